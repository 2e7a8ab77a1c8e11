// ColumnSumsMany: the bias and LayerNorm weight gradients of a block in one
// launch (cuda_launch.h).
//
// Grid: x runs over the column strips of every job, one job after another;
// y over `splits` spans of rows. A block is 32 threads across by 8 row
// lanes; each thread owns `vec` adjacent columns of its strip (a strip is
// 32·vec columns) and sums them over its lane's rows of the span, four rows
// of loads in flight at a time, into float registers; the block then adds
// its 8 lanes in order into a float partial per column. Where a job's
// columns and pointers allow, vec is 16 bytes of its input type (8
// bfloat16 or 4 float32 columns, one vector load per row); else 1. Then the
// block counts itself done on its strip's counter; the last block of the
// strip adds the strip's partials in split order onto the outputs and
// resets the counter to 0. Sums run in an order fixed by the sizes, so
// results are bitwise reproducible.
//
// The counters live per thread and device, allocated (and zeroed) on first
// use and grown as needed; every launch leaves them at 0. Launches that use
// them must run in stream order on one stream (as every kernel of a thread
// does here).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "framework/cuda/device_common.cuh"

namespace trellis {
namespace cuda_launch {
namespace {

// The widest vector (8 bfloat16 columns) and so the widest strip.
constexpr int kMaxVec = 8;
constexpr int kStripCols = kColumnTile * kMaxVec;
// Rows whose loads a thread issues before it adds them.
constexpr int kRowsInFlight = 4;

struct ColumnJobs {
  ColumnJob job[kColumnJobs];
  int vec[kColumnJobs];                  // columns per thread
  int64_t strip_begin[kColumnJobs + 1];  // the first strip of each job
};

// V elements of type T at p as floats: one 16-byte load when V > 1 (p then
// 16-byte aligned).
template <typename T, int V>
__device__ __forceinline__ void LoadColumns(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = ToFloat(*p);
  } else {
    static_assert(V * sizeof(T) == 16, "one 16-byte load");
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = ToFloat(e[i]);
  }
}

// This thread's sums over rows r_begin + lane, + 8, ... (< r_end) of columns
// [c0, c0 + V), stored into the block's tile; zeros where c0 is past the
// job's columns (V divides them when V > 1).
template <typename T, int V>
__device__ void SumColumns(const ColumnJob& job, int64_t c0, int64_t r_begin,
                           int64_t r_end,
                           float (&tile)[2][kColumnLanes][kStripCols + 1]) {
  float acc_w[V] = {}, acc_b[V] = {};
  if (c0 < job.cols) {
    const T* dout = static_cast<const T*>(job.dout) + c0;
    const T* x = job.x != nullptr ? static_cast<const T*>(job.x) + c0 : nullptr;
    int64_t r = r_begin + threadIdx.y;
    constexpr int64_t kStep = kColumnLanes * kRowsInFlight;
    for (; r + (kRowsInFlight - 1) * kColumnLanes < r_end; r += kStep) {
      float d[kRowsInFlight][V];
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
        LoadColumns<T, V>(dout + (r + u * kColumnLanes) * job.cols, d[u]);
      }
      if (x != nullptr) {
        float xs[kRowsInFlight][V];
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) {
          LoadColumns<T, V>(x + (r + u * kColumnLanes) * job.cols, xs[u]);
        }
#pragma unroll
        for (int u = 0; u < kRowsInFlight; ++u) {
          const int64_t row = r + u * kColumnLanes;
          const float mean = job.mean[row], rstd = job.rstd[row];
#pragma unroll
          for (int v = 0; v < V; ++v) {
            acc_w[v] += d[u][v] * (xs[u][v] - mean) * rstd;
          }
        }
      }
#pragma unroll
      for (int u = 0; u < kRowsInFlight; ++u) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc_b[v] += d[u][v];
      }
    }
    for (; r < r_end; r += kColumnLanes) {
      float d[V];
      LoadColumns<T, V>(dout + r * job.cols, d);
      if (x != nullptr) {
        float xs[V];
        LoadColumns<T, V>(x + r * job.cols, xs);
        const float mean = job.mean[r], rstd = job.rstd[r];
#pragma unroll
        for (int v = 0; v < V; ++v) acc_w[v] += d[v] * (xs[v] - mean) * rstd;
      }
#pragma unroll
      for (int v = 0; v < V; ++v) acc_b[v] += d[v];
    }
  }
#pragma unroll
  for (int v = 0; v < V; ++v) {
    tile[0][threadIdx.y][threadIdx.x * V + v] = acc_w[v];
    tile[1][threadIdx.y][threadIdx.x * V + v] = acc_b[v];
  }
}

__device__ void AddTo(Elem t, void* p, int64_t i, float v) {
  if (t == Elem::kF32) {
    float* f = static_cast<float*>(p);
    f[i] += v;
  } else {
    bf16* b = static_cast<bf16*>(p);
    b[i] = FromFloat<bf16>(ToFloat(b[i]) + v);
  }
}

__global__ void ColumnSumsManyKernel(const __grid_constant__ ColumnJobs jobs,
                                     int count, int64_t rows,
                                     int64_t rows_per_split, float* partial,
                                     unsigned* counters) {
  __shared__ float tile[2][kColumnLanes][kStripCols + 1];
  __shared__ bool last;
  const int64_t strip = blockIdx.x;
  int j = 0;
  while (j + 1 < count && strip >= jobs.strip_begin[j + 1]) ++j;
  const ColumnJob& job = jobs.job[j];
  const int vec = jobs.vec[j];
  const int width = kColumnTile * vec;  // this strip's columns
  const int64_t strip_c0 = (strip - jobs.strip_begin[j]) * width;
  const int64_t c0 = strip_c0 + int64_t{threadIdx.x} * vec;
  const int64_t split = blockIdx.y, splits = gridDim.y;
  const int64_t r_begin = split * rows_per_split;
  const int64_t r_end = min(rows, r_begin + rows_per_split);
  if (vec == 8) {
    SumColumns<bf16, 8>(job, c0, r_begin, r_end, tile);
  } else if (vec == 4) {
    SumColumns<float, 4>(job, c0, r_begin, r_end, tile);
  } else if (job.in_type == Elem::kF32) {
    SumColumns<float, 1>(job, c0, r_begin, r_end, tile);
  } else {
    SumColumns<bf16, 1>(job, c0, r_begin, r_end, tile);
  }
  __syncthreads();
  // Partials: (strip, split, 2, kStripCols); thread t adds the lanes of
  // column t of the strip, for dw and db.
  const int t = threadIdx.y * kColumnTile + threadIdx.x;
  float* mine = partial + (strip * splits + split) * 2 * kStripCols;
  if (t < width) {
    for (int k = 0; k < 2; ++k) {
      float sum = 0.f;
      for (int y = 0; y < kColumnLanes; ++y) sum += tile[k][y][t];
      mine[k * kStripCols + t] = sum;
    }
  }
  __threadfence();
  __syncthreads();
  if (t == 0) {
    last = atomicAdd(&counters[strip], 1u) == static_cast<unsigned>(splits - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t c = strip_c0 + t;
  if (t < width && c < job.cols) {
    const float* strip_partials = partial + strip * splits * 2 * kStripCols;
    for (int k = 0; k < 2; ++k) {
      if (k == 0 && job.x == nullptr) continue;
      float sum = 0.f;
      for (int64_t s = 0; s < splits; ++s) {
        sum += __ldcg(strip_partials + (s * 2 + k) * kStripCols + t);
      }
      AddTo(job.out_type, k == 0 ? job.dw : job.db, c, sum);
    }
  }
  if (t == 0) counters[strip] = 0;
}

// Columns per thread for `job`: 16 bytes of its input type where its
// columns and pointers allow one aligned load per row, else 1.
int VectorWidth(const ColumnJob& job) {
  const int vec = job.in_type == Elem::kBF16 ? 8 : 4;
  const auto aligned = [](const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
  };
  const bool fits = job.cols % vec == 0 && aligned(job.dout) &&
                    (job.x == nullptr || aligned(job.x));
  return fits ? vec : 1;
}

// This thread's zeroed counters on the current device, at least n.
unsigned* Counters(int64_t n) {
  struct Buffer {
    unsigned* data = nullptr;
    int64_t size = 0;
  };
  thread_local std::vector<Buffer> buffers;
  int device = 0;
  TRELLIS_CUDA_CHECK(cudaGetDevice(&device));
  if (buffers.size() <= static_cast<size_t>(device)) buffers.resize(device + 1);
  Buffer& b = buffers[device];
  if (b.size < n) {
    // cudaFree waits for the device, so no launch still reads the old ones.
    if (b.data != nullptr) TRELLIS_CUDA_CHECK(cudaFree(b.data));
    const int64_t size = std::max<int64_t>(n, 4096);
    TRELLIS_CUDA_CHECK(cudaMalloc(&b.data, sizeof(unsigned) * size));
    TRELLIS_CUDA_CHECK(cudaMemset(b.data, 0, sizeof(unsigned) * size));
    b.size = size;
  }
  return b.data;
}

}  // namespace

void ColumnSumsMany(const ColumnJob* jobs, int count, int64_t rows) {
  if (count > kColumnJobs) {
    internal::DeviceCallFailure("trellis", "ColumnSumsMany", __FILE__, __LINE__,
                                "more jobs than one launch takes");
  }
  ColumnJobs packed{};
  int64_t strips = 0;
  for (int j = 0; j < count; ++j) {
    packed.job[j] = jobs[j];
    packed.vec[j] = VectorWidth(jobs[j]);
    packed.strip_begin[j] = strips;
    const int64_t width = int64_t{kColumnTile} * packed.vec[j];
    strips += (jobs[j].cols + width - 1) / width;
  }
  packed.strip_begin[count] = strips;
  if (rows == 0 || strips == 0) return;
  // About 2048 blocks in all, each row lane summing at least 4 rows.
  const int64_t max_splits = std::max<int64_t>(1, rows / (4 * kColumnLanes));
  const int64_t splits = std::clamp<int64_t>(
      2048 / strips, 1, std::min<int64_t>(max_splits, 1024));
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  Scratch<float> partial(strips * splits * 2 * kStripCols);
  unsigned* counters = Counters(strips);
  const dim3 grid(static_cast<unsigned>(strips), static_cast<unsigned>(splits));
  const dim3 block(kColumnTile, kColumnLanes);
  ColumnSumsManyKernel<<<grid, block>>>(packed, count, rows, rows_per_split,
                                        partial.get(), counters);
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
