// The pipeline's thread and its mode names (train_pipeline.h).
#include "shardrec/core/pipeline/train_pipeline.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

namespace shardrec {

StatusOr<PipelineMode> ParsePipelineMode(std::string_view name) {
  if (name == "none") return PipelineMode::kNone;
  if (name == "sparse_dist") return PipelineMode::kSparseDist;
  return InvalidArgumentError("'" + std::string(name) + "' is not a train pipeline: expected none or sparse_dist");
}

const char* PipelineModeName(PipelineMode mode) {
  return mode == PipelineMode::kSparseDist ? "sparse_dist" : "none";
}

namespace pipeline_detail {

struct JobThread::State {
  std::mutex mu;
  std::condition_variable cv;
  std::function<void()> job;  // set: waiting to run or running
  bool busy = false, stop = false;
  std::thread thread;
};

JobThread::JobThread() : state_(std::make_unique<State>()) {
  State* s = state_.get();
  s->thread = std::thread([s] {
    std::unique_lock<std::mutex> lock(s->mu);
    while (true) {
      s->cv.wait(lock, [s] { return s->stop || s->job; });
      if (!s->job) return;  // stopped with nothing to run
      std::function<void()> job = std::move(s->job);
      lock.unlock();
      // Jobs report through Status; an exception here would end the process.
      try {
        job();
      } catch (const std::exception&) {
      }
      lock.lock();
      s->job = nullptr;
      s->busy = false;
      s->cv.notify_all();
    }
  });
}

JobThread::~JobThread() {
  {
    std::unique_lock<std::mutex> lock(state_->mu);
    state_->cv.wait(lock, [this] { return !state_->busy; });
    state_->stop = true;
  }
  state_->cv.notify_all();
  state_->thread.join();
}

void JobThread::Start(std::function<void()> job) {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [this] { return !state_->busy; });
  state_->job = std::move(job);
  state_->busy = true;
  state_->cv.notify_all();
}

void JobThread::Wait() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [this] { return !state_->busy; });
}

}  // namespace pipeline_detail
}  // namespace shardrec
