// TrainPipelineSparseDist (TorchRec's torchrec.distributed.train_pipeline),
// written out explicitly instead of traced from a model: while the step
// thread trains batch i (lookup, output dist, dense forward and backward,
// the optimizers), a pipeline thread runs batch i+1's input dist (both
// phases of the KJT all-to-all, managed collision's remap) on a group of
// its own, and the data loader reads and prepares batch i+2.
//
//   ProcessGroup dist_group = group.Duplicate().value();  // collective
//   TrainPipelineSparseDist<Batch, Dist> pipeline(PipelineMode::kSparseDist, &dist_group,
//       [&]() -> StatusOr<std::optional<Batch>> { ... the loader's next batch, nullopt at the end ... },
//       [&](Batch& b, const ProcessGroup* via) { return ebc.DistributeInput(b.sparse, via); });
//   while (true) {
//     SR_ASSIGN_OR_RETURN(auto stage, pipeline.Next());
//     if (!stage) break;                             // every batch ran
//     auto out = ebc.Forward(std::move(stage->dist));  // lookup + output dist
//     ... model forward/backward, ebc.Backward, optimizer ...
//   }
//
// The numbers are the unpipelined run's, bit for bit: each batch goes
// through the same functions in the same order; only when the dist of the
// next batch runs changes, and the dist reads nothing the step writes (the
// sharding layout; managed collision's own maps, which only dists touch).
// What a dist would read that the step writes must not be prefetched: ask
// Next() for Prefetch::kFetch when the next dist depends on this step's
// update (position weights weight the ids before the dist), and for
// Prefetch::kNothing before a checkpoint or an evaluation, which must see
// the state after this step and not the next batch's remap or the
// reader's next position.
//
// End of data: Next() returns every batch fetched before the fetch
// function said nullopt, then nullopt (TorchRec's execute_all_batches).
// An error in the pipeline thread (a fetch, a dist, a peer that died)
// comes out of the Next() that would have returned that batch.
//
// Not thread-safe: one step thread calls Next(). The destructor waits for
// a fetch or dist in flight (a dist stuck on a dead peer ends with the
// group's timeout).
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/status.h"

namespace shardrec {

enum class PipelineMode {
  kNone,        // fetch, dist and step one after another on the step thread
  kSparseDist,  // the next batch's fetch and dist overlap this batch's step
};
StatusOr<PipelineMode> ParsePipelineMode(std::string_view name);  // "none" or "sparse_dist"
const char* PipelineModeName(PipelineMode mode);

// Seconds summed over the batches a pipeline handed out.
struct PipelineTimes {
  double fetch = 0;          // in the fetch function, wherever it ran
  double dist = 0;           // in the dist function, wherever it ran
  double exposed_fetch = 0;  // the step thread waiting for (or running) fetches
  double exposed_dist = 0;   // the step thread waiting for (or running) dists
  int64_t batches = 0;
  double hidden() const { return fetch + dist - exposed_fetch - exposed_dist; }
};

namespace pipeline_detail {
// One background thread that runs one job at a time.
class JobThread {
 public:
  JobThread();
  ~JobThread();  // waits for the job in flight
  JobThread(const JobThread&) = delete;
  JobThread& operator=(const JobThread&) = delete;
  void Start(std::function<void()> job);  // the previous job must have finished (Wait)
  void Wait();

 private:
  struct State;
  std::unique_ptr<State> state_;
};
}  // namespace pipeline_detail

template <class Batch, class Dist>
class TrainPipelineSparseDist {
 public:
  struct Stage {
    Batch batch;
    Dist dist;
  };
  using FetchFn = std::function<StatusOr<std::optional<Batch>>()>;
  // via: the pipeline's dist group when it runs on the pipeline thread,
  // null (the module's own group) when it runs on the step thread.
  using DistFn = std::function<StatusOr<Dist>(Batch& batch, const ProcessGroup* via)>;
  enum class Prefetch {
    kFetchAndDist,  // the next batch's fetch and input dist overlap this step
    kFetch,         // only its fetch (the dist reads what this step updates)
    kNothing,       // neither (a checkpoint or an evaluation follows this step)
  };

  // dist_group: a Duplicate() of the module's group, used only by the
  // pipeline thread (required for kSparseDist; unused by kNone).
  TrainPipelineSparseDist(PipelineMode mode, const ProcessGroup* dist_group, FetchFn fetch, DistFn dist)
      : mode_(mode), dist_group_(dist_group), fetch_(std::move(fetch)), dist_(std::move(dist)) {
    if (mode_ == PipelineMode::kSparseDist) thread_ = std::make_unique<pipeline_detail::JobThread>();
  }
  ~TrainPipelineSparseDist() {
    if (thread_) thread_->Wait();
  }
  TrainPipelineSparseDist(const TrainPipelineSparseDist&) = delete;
  TrainPipelineSparseDist& operator=(const TrainPipelineSparseDist&) = delete;

  // The next batch, fetched and distributed; nullopt once the data ended
  // and every batch was returned. `prefetch` says what of the batch after
  // it may start now, while the caller trains this one.
  StatusOr<std::optional<Stage>> Next(Prefetch prefetch = Prefetch::kFetchAndDist) {
    if (!status_.ok()) return status_;
    if (done_ && !ahead_) return std::optional<Stage>();
    if (mode_ == PipelineMode::kSparseDist && dist_group_ == nullptr) {
      return status_ = FailedPreconditionError("the sparse_dist pipeline needs a dist group (ProcessGroup::Duplicate)");
    }
    // This batch: from the pipeline thread, or made here.
    const auto wait_start = Clock::now();
    if (!ahead_) StartAhead(Prefetch::kNothing);
    if (ahead_->running) thread_->Wait();
    // The wait is exposed; split it by what the thread was doing then, and
    // never count more than the work itself took (the rest is waking up).
    const double waited = Seconds(wait_start);
    const double f_left = std::max(0.0, ahead_->fetch_end - ToSeconds(wait_start));
    const double on_fetch = std::min(waited, f_left);
    times_.exposed_fetch += std::min(on_fetch, ahead_->fetch_seconds);
    times_.exposed_dist += std::min(waited - on_fetch, ahead_->dist_seconds);
    Ahead a = std::move(*ahead_);
    ahead_.reset();
    times_.fetch += a.fetch_seconds;
    times_.dist += a.dist_seconds;
    if (!a.status.ok()) return status_ = a.status;
    if (!a.batch) {  // the data ended
      done_ = true;
      return std::optional<Stage>();
    }
    // Made on the step thread, or only fetched ahead: the dist runs here.
    if (!a.dist) {
      const auto start = Clock::now();
      auto d = GuardedDist(*a.batch, nullptr);
      const double s = Seconds(start);
      times_.dist += s;
      times_.exposed_dist += s;
      if (!d.ok()) return status_ = d.status();
      a.dist.emplace(std::move(d).value());
    }
    ++times_.batches;
    if (prefetch != Prefetch::kNothing && mode_ == PipelineMode::kSparseDist && !done_) StartAhead(prefetch);
    return std::optional<Stage>(Stage{std::move(*a.batch), std::move(*a.dist)});
  }

  PipelineMode mode() const { return mode_; }
  const PipelineTimes& times() const { return times_; }

 private:
  using Clock = std::chrono::steady_clock;
  // A batch on its way: what the pipeline thread (or the step thread, when
  // nothing was prefetched) made of it.
  struct Ahead {
    bool running = false;  // a job on the pipeline thread fills the rest
    Status status = Status::Ok();
    std::optional<Batch> batch;
    std::optional<Dist> dist;
    double fetch_seconds = 0, dist_seconds = 0;
    double fetch_end = 0;  // ToSeconds() of the fetch's end
  };
  static double Seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  }
  double ToSeconds(Clock::time_point t) const { return std::chrono::duration<double>(t - epoch_).count(); }

  // The dist function; a std::bad_alloc and the like become its error.
  StatusOr<Dist> GuardedDist(Batch& batch, const ProcessGroup* via) {
    try {
      return dist_(batch, via);
    } catch (const std::exception& e) {
      return InternalError(std::string("train pipeline: ") + e.what());
    }
  }

  // Fetches (and with kFetchAndDist distributes) the next batch: on the
  // pipeline thread when `prefetch` asks for it, else here, now.
  void StartAhead(Prefetch prefetch) {
    ahead_.emplace();
    Ahead* a = &*ahead_;
    const bool on_thread = prefetch != Prefetch::kNothing;
    const bool with_dist = prefetch == Prefetch::kFetchAndDist;
    auto job = [this, a, with_dist] {
      auto start = Clock::now();
      auto b = fetch_();
      a->fetch_seconds = Seconds(start);
      a->fetch_end = ToSeconds(Clock::now());
      if (!b.ok()) {
        a->status = b.status();
        return;
      }
      if (!b->has_value()) return;
      a->batch.emplace(std::move(**b));
      if (!with_dist) return;
      start = Clock::now();
      auto d = GuardedDist(*a->batch, dist_group_);
      a->dist_seconds = Seconds(start);
      if (!d.ok()) {
        a->status = d.status();
        return;
      }
      a->dist.emplace(std::move(d).value());
    };
    // A std::bad_alloc and the like become the batch's error.
    auto guarded = [a, job = std::move(job)] {
      try {
        job();
      } catch (const std::exception& e) {
        a->status = InternalError(std::string("train pipeline: ") + e.what());
      }
    };
    if (on_thread) {
      a->running = true;
      thread_->Start(std::move(guarded));
    } else {
      guarded();
    }
  }

  PipelineMode mode_;
  const ProcessGroup* dist_group_;
  FetchFn fetch_;
  DistFn dist_;
  std::unique_ptr<pipeline_detail::JobThread> thread_;
  std::optional<Ahead> ahead_;
  bool done_ = false;
  Status status_ = Status::Ok();
  PipelineTimes times_;
  const Clock::time_point epoch_ = Clock::now();
};

}  // namespace shardrec
