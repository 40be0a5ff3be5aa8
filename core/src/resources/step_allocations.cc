// KeepStepAllocationsForReuse (step_allocations.h).
#include "shardrec/core/resources/step_allocations.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace shardrec {

bool KeepStepAllocationsForReuse() {
#if defined(__GLIBC__)
  // Blocks up to 256 MiB come from the heap (a step's largest buffers are
  // tens of MiB); freed memory is trimmed back to the kernel only past
  // 1 GiB free at the top of the heap.
  bool ok = true;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") == nullptr) ok = mallopt(M_MMAP_THRESHOLD, 256 << 20) == 1 && ok;
  if (std::getenv("MALLOC_TRIM_THRESHOLD_") == nullptr) ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  return ok;
#else
  return false;
#endif
}

}  // namespace shardrec
