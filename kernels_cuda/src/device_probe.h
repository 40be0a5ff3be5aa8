// Device discovery for the CUDA kernel plugin, compiled by nvcc.
#pragma once

#include <string>

namespace shardrec::cuda {

// Number of usable CUDA devices; 0 with `why` set when there are none or the
// driver is missing.
int CountDevices(std::string* why);

// Runs a one-thread kernel on `device` and checks its result: proves the
// fatbin in this library matches the GPU. Empty on success, else the error.
std::string SmokeTest(int device);

}  // namespace shardrec::cuda
