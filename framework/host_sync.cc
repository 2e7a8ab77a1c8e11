#include "framework/host_sync.h"

#ifdef TRELLIS_WITH_CUDA
#include "framework/cuda/cuda_device.h"
#endif

namespace trellis {
namespace {

// Per thread, so concurrent tests and ranks in threads never mix counts.
thread_local int64_t host_waits = 0;

}  // namespace

void CountHostWait() { ++host_waits; }

int64_t HostWaits() { return host_waits; }

void ResetHostWaits() { host_waits = 0; }

Tensor ReadToHost(const Tensor& t) {
  if (t.device().is_cpu()) {
    CountHostWait();
    return t.Clone();
  }
  // The device-to-host copy counts itself (CudaCopy).
  return t.To(Device::Cpu());
}

void CopyToHost(const Tensor& src, Tensor& host) {
  TRELLIS_CHECK(host.device().is_cpu()) << "CopyToHost writes a host tensor";
  // A copy from the device counts itself (CudaCopy).
  if (src.device().is_cpu()) CountHostWait();
  host.CopyFrom(src);
}

void WaitForDevice(Device device) {
#ifdef TRELLIS_WITH_CUDA
  if (device.is_cuda()) {
    CudaSynchronize(device.index);  // counts itself
    return;
  }
#endif
  if (device.is_cpu()) CountHostWait();
}

}  // namespace trellis
