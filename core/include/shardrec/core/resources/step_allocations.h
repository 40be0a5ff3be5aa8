// Keeping the memory a training step frees for the next step. Every step
// allocates and frees the same large buffers (pooled embeddings, their
// gradients, the dists' send and receive tensors). glibc's defaults give
// such blocks back to the kernel (mmap for blocks over 128 KiB, heap
// trimming over 128 KiB free), so the next step takes fresh pages again:
// a page fault and a zeroed page (with transparent huge pages, 2 MiB
// zeroed) for every one. On the default 2-rank job that was a tenth of
// all CPU time (perf: clear_page_erms, exc_page_fault).
#pragma once

namespace shardrec {

// Raises glibc's mmap and trim thresholds (mallopt) so freed blocks stay in
// the heap for reuse; memory is still reused, never leaked, and a process's
// peak is what it was. Leaves any threshold the user set through
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ alone. Call once, early,
// from a host program. Returns false where it cannot (not glibc).
bool KeepStepAllocationsForReuse();

}  // namespace shardrec
