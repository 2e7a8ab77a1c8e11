// DeviceCompletionProbe: a way to ask, from any thread and without
// blocking, whether the work issued to a device so far has finished.
//
// For a CUDA device it records an event on the compute stream now (the
// stream that communication requests order themselves before) and returns
// a probe that queries that event (cudaEventQuery: no host wait, callable
// from another thread; the event is released with the probe). For the CPU,
// whose work is done when issued, it returns null.
//
// Used by the communication watchdog (parallel/device_wait_monitor.h) to
// put a deadline on device work the host never waits for itself.
//
// Thread safety: call DeviceCompletionProbe on the thread that issues the
// device's work; the probe may then be called from one other thread.
#ifndef TRELLIS_FRAMEWORK_DEVICE_COMPLETION_H_
#define TRELLIS_FRAMEWORK_DEVICE_COMPLETION_H_

#include <functional>

#include "framework/tensor.h"

namespace trellis {

// True once the work issued to the device before the probe was made has
// finished. Failing device calls are fatal, naming the call.
using CompletionProbe = std::function<bool()>;

// Null for the CPU. REQUIRES: a CUDA build for a CUDA device.
CompletionProbe DeviceCompletionProbe(Device device);

}  // namespace trellis

#endif  // TRELLIS_FRAMEWORK_DEVICE_COMPLETION_H_
