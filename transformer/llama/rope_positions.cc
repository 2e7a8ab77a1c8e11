#include "transformer/llama/rope_positions.h"

#include <algorithm>
#include <cstring>

namespace trellis {
namespace {

// The tables' dtype: the activations' on the CPU, float32 on CUDA.
DType TableDType(DType dtype, Device device) {
  return device.is_cpu() ? dtype : DType::kF32;
}

class RopePositions : public BlockPositions {
 public:
  RopePositions(int64_t heads, int64_t kv_heads, int64_t head_dim, double theta,
                RopeScaling scaling)
      : heads_(heads),
        kv_heads_(kv_heads),
        head_dim_(head_dim),
        theta_(theta),
        scaling_(scaling) {}

  std::vector<Slot> Slots(int64_t seq_len, DType dtype,
                          Device device) const override {
    const DType table = TableDType(dtype, device);
    const Shape shape = {seq_len, head_dim_ / 2};
    return {{&BlockTensors::cos, shape, table, SlotPlace::kWorkspace},
            {&BlockTensors::sin, shape, table, SlotPlace::kWorkspace}};
  }
  void FillTables(int64_t seq_len, BlockTensors& tables) const override {
    const DType table = tables.cos.dtype();
    TRELLIS_CHECK(table == DType::kF32 || table == DType::kF64)
        << "RoPE tables in " << DTypeName(table);
    absl::StatusOr<RopeTables> t =
        RopeTable(head_dim_, seq_len, theta_, scaling_, table);
    TRELLIS_CHECK(t.ok()) << t.status();  // ModelConfig::Validate checked it.
    tables.cos.CopyFrom(t->cos);
    tables.sin.CopyFrom(t->sin);
  }
  void FillTablesAt(const std::vector<int32_t>& positions,
                    BlockTensors& tables) const override {
    const int32_t last = *std::max_element(positions.begin(), positions.end());
    absl::StatusOr<RopeTables> t =
        RopeTable(head_dim_, last + 1, theta_, scaling_, tables.cos.dtype());
    TRELLIS_CHECK(t.ok()) << t.status();
    tables.cos.CopyFrom(GatherRows(t->cos, positions));
    tables.sin.CopyFrom(GatherRows(t->sin, positions));
  }
  void Forward(Tensor& qkv, int64_t first,
               const BlockTensors& tables) const override {
    // The kernel rotates row r of a window by the angle of table row r:
    // the tables from `first` on give the tokens' positions.
    const int64_t t = qkv.dim(1);
    RopeForward(qkv, heads_, kv_heads_, Rows(tables.cos, first, t),
                Rows(tables.sin, first, t));
  }
  void Backward(Tensor& dqkv, const BlockTensors& tables) const override {
    RopeBackward(dqkv, heads_, kv_heads_, tables.cos, tables.sin);
  }

 private:
  // Rows `rows` of a host table, in that order.
  static Tensor GatherRows(const Tensor& table,
                           const std::vector<int32_t>& rows) {
    const int64_t n = static_cast<int64_t>(rows.size());
    Tensor out = Tensor::Empty({n, table.dim(1)}, table.dtype());
    const size_t row_bytes = table.dim(1) * DTypeSize(table.dtype());
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(static_cast<char*>(out.raw()) + i * row_bytes,
                  static_cast<const char*>(table.raw()) + rows[i] * row_bytes,
                  row_bytes);
    }
    return out;
  }
  static Tensor Rows(const Tensor& table, int64_t first, int64_t n) {
    return first == 0 && table.dim(0) == n ? table : table.Narrow(first, n);
  }

  int64_t heads_, kv_heads_, head_dim_;
  double theta_;
  RopeScaling scaling_;
};

}  // namespace

std::shared_ptr<const BlockPositions> NewRopePositions(int64_t heads,
                                                       int64_t kv_heads,
                                                       int64_t head_dim,
                                                       double theta,
                                                       RopeScaling scaling) {
  return std::make_shared<RopePositions>(heads, kv_heads, head_dim, theta,
                                         scaling);
}

}  // namespace trellis
