// Whether a backward kernel adds into its gradient output (beta = 1, the
// kernels' convention) or overwrites it (beta = 0): a caller whose gradient
// buffer holds nothing yet asks for kWrite instead of zero-filling it first,
// which saves a pass over the buffer (and, on CUDA, lets a library write its
// result in place instead of into scratch that is then added).
#ifndef TRELLIS_FRAMEWORK_KERNELS_GRAD_WRITE_H_
#define TRELLIS_FRAMEWORK_KERNELS_GRAD_WRITE_H_

namespace trellis {

enum class GradWrite { kAccumulate, kWrite };

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_KERNELS_GRAD_WRITE_H_
