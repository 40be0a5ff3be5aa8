// The machine's own limit for an embedding lookup: a plain random-row
// gather — for each bag, sum its rows into an output row — over a table of
// the same shape and byte width as the kernel's, with the same ids, the
// same threads, 2 MiB pages and software prefetch (what the research
// probes found fastest: /work/shared/research/baselines-2026-11-22.md §1b).
// A kernel's forward divided by this is its efficiency; noise in the
// machine moves both numbers together.
#pragma once

#include <cstdint>
#include <memory>

#include "id_batches.h"

namespace shardrec::bench {

class GatherProbe {
 public:
  // A rows x row_bytes table (filled with small floats) and a
  // [batch, row_bytes/4] float output.
  GatherProbe(int64_t rows, int64_t row_bytes, int64_t batch, int threads);
  ~GatherProbe();
  // Gathers one batch with `threads` threads; returns seconds.
  double Run(const IdBatch& batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardrec::bench
