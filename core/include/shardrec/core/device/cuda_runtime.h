// The host's view of CUDA: how many GPUs there are, device and pinned host
// memory for the allocator callbacks plugins call (sr_host_api.alloc with
// kDLCUDA / kDLCUDAHost), copies, and a device-to-device copy probe for
// `shardrec bench kernel --kernel cuda`. Built on the CUDA runtime (linked
// statically) when the toolkit was found at configure time; otherwise every
// function reports that this build has no CUDA, so a CPU-only build behaves
// exactly like a machine without a GPU.
#pragma once

#include <cstddef>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec::device {

// True when core was built with the CUDA runtime.
bool CudaBuilt();

// Visible GPUs; 0 with *why set ("this build has no CUDA", the driver's
// error, or "the driver reports 0 devices") when there are none.
int CudaDeviceCount(std::string* why = nullptr);

// The GPU rank `rank` uses when ranks share a host: rank mod the visible
// GPUs (0 when there are none). With torchrun-style launches rank mod GPUs
// is the local rank whenever every host runs one rank per GPU.
int DeviceForRank(int rank);

// Device memory on `device`, ordered on `stream` (a cudaStream_t; NULL: the
// default stream). NULL when it cannot allocate.
void* CudaAlloc(int device, size_t bytes, void* stream);
void CudaFree(int device, void* ptr, void* stream);
// Page-locked host memory, so host<->device copies run asynchronously.
void* CudaHostAlloc(size_t bytes);
void CudaHostFree(void* ptr);

// A stream of its own on `device` (non-blocking w.r.t. the default stream).
StatusOr<void*> CreateStream(int device);
void DestroyStream(int device, void* stream);

// Asynchronous copies on `stream`; Synchronize waits for the stream.
Status CopyToDevice(int device, void* dst, const void* src, size_t bytes, void* stream);
Status CopyToHost(int device, void* dst, const void* src, size_t bytes, void* stream);
Status Synchronize(int device, void* stream);

// Bytes moved per second (read + write) by cudaMemcpyAsync device to device
// of a `bytes` buffer, best of `repeats` timed with CUDA events: the limit a
// memory-bound embedding kernel is measured against.
StatusOr<double> DeviceCopyBandwidth(int device, size_t bytes, int repeats);

}  // namespace shardrec::device
