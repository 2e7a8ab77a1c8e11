// ColumnSumsMany: the bias and LayerNorm weight gradients of a block in one
// launch (cuda_launch.h).
//
// Grid: x runs over the column strips (32 columns) of every job, one job
// after another; y over `splits` spans of rows. Each block sums its strip
// over its span (8 row lanes, then the lanes in order) into a float
// partial. Then the block counts itself done on its strip's counter; the
// last block of the strip adds the strip's partials in split order onto the
// outputs and resets the counter to 0. Sums run in an order fixed by the
// sizes, so results are bitwise reproducible.
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

struct ColumnJobs {
  ColumnJob job[kColumnJobs];
  int64_t strip_begin[kColumnJobs + 1];  // the first strip of each job
};

template <typename T>
__device__ float Load(const void* p, int64_t i) {
  return ToFloat(static_cast<const T*>(p)[i]);
}

__device__ float LoadAs(Elem t, const void* p, int64_t i) {
  return t == Elem::kF32 ? Load<float>(p, i) : Load<bf16>(p, i);
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
  __shared__ float tile[2][kColumnLanes][kColumnTile + 1];
  __shared__ bool last;
  const int64_t strip = blockIdx.x;
  int j = 0;
  while (j + 1 < count && strip >= jobs.strip_begin[j + 1]) ++j;
  const ColumnJob& job = jobs.job[j];
  const int64_t c =
      (strip - jobs.strip_begin[j]) * int64_t{kColumnTile} + threadIdx.x;
  const int64_t split = blockIdx.y, splits = gridDim.y;
  const int64_t r_begin = split * rows_per_split;
  const int64_t r_end = min(rows, r_begin + rows_per_split);
  float acc_w = 0.f, acc_b = 0.f;
  if (c < job.cols) {
    for (int64_t r = r_begin + threadIdx.y; r < r_end; r += kColumnLanes) {
      const float d = LoadAs(job.in_type, job.dout, r * job.cols + c);
      acc_b += d;
      if (job.x != nullptr) {
        const float x = LoadAs(job.in_type, job.x, r * job.cols + c);
        acc_w += d * (x - job.mean[r]) * job.rstd[r];
      }
    }
  }
  tile[0][threadIdx.y][threadIdx.x] = acc_w;
  tile[1][threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  // Partials: (strip, split, 2, 32).
  float* mine = partial + ((strip * splits + split) * 2) * kColumnTile;
  if (threadIdx.y < 2) {
    float sum = 0.f;
    for (int y = 0; y < kColumnLanes; ++y)
      sum += tile[threadIdx.y][y][threadIdx.x];
    mine[threadIdx.y * kColumnTile + threadIdx.x] = sum;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    last = atomicAdd(&counters[strip], 1u) == static_cast<unsigned>(splits - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int k = threadIdx.y;  // 0: dw, 1: db
  if (k < 2 && c < job.cols && (k == 1 || job.x != nullptr)) {
    float sum = 0.f;
    const float* strip_partials = partial + strip * splits * 2 * kColumnTile;
    for (int64_t s = 0; s < splits; ++s) {
      sum += __ldcg(strip_partials + (s * 2 + k) * kColumnTile + threadIdx.x);
    }
    AddTo(job.out_type, k == 0 ? job.dw : job.db, c, sum);
  }
  if (threadIdx.x == 0 && threadIdx.y == 0) counters[strip] = 0;
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
    packed.strip_begin[j] = strips;
    strips += (jobs[j].cols + kColumnTile - 1) / kColumnTile;
  }
  packed.strip_begin[count] = strips;
  if (rows == 0 || strips == 0) return;
  // About 2048 blocks in all, each row lane summing at least 4 rows.
  const int64_t max_splits = std::max<int64_t>(1, rows / (4 * kColumnLanes));
  const int64_t splits = std::clamp<int64_t>(
      2048 / strips, 1, std::min<int64_t>(max_splits, 1024));
  const int64_t rows_per_split = (rows + splits - 1) / splits;
  Scratch<float> partial(strips * splits * 2 * kColumnTile);
  unsigned* counters = Counters(strips);
  const dim3 grid(static_cast<unsigned>(strips), static_cast<unsigned>(splits));
  const dim3 block(kColumnTile, kColumnLanes);
  ColumnSumsManyKernel<<<grid, block>>>(packed, count, rows, rows_per_split,
                                        partial.get(), counters);
  TRELLIS_CUDA_CHECK_LAUNCH();
}

}  // namespace cuda_launch
}  // namespace trellis
