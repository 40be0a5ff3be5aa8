// shardrec plugin SDK — request handles for asynchronous collectives, and
// the one-thread worker that CPU backends run their collectives on.
//
// A backend's Post() returns a Request. OrderedWorker gives the common
// shape: collectives run one after another, in the order posted, on a
// thread of the communicator, so several may be outstanding while the
// caller computes; the first failure poisons the worker, and every later
// collective fails at once with that error instead of waiting for peers
// that have already moved on. A caller that waits on the next collective
// while the worker is idle runs it on its own thread: the usual
// post-then-wait costs no thread hand-off.
#ifndef SHARDREC_SDK_COMM_REQUEST_HPP_
#define SHARDREC_SDK_COMM_REQUEST_HPP_

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

// An outstanding collective. Test() and Wait() throw the collective's error
// (an sdk::Error) once it failed; Wait() throws SR_DEADLINE_EXCEEDED when
// the collective is still running after timeout_ms (< 0: the backend's
// default). Both may be called from any thread.
class Request {
 public:
  virtual ~Request() = default;
  virtual bool Test() = 0;
  virtual void Wait(int64_t timeout_ms) = 0;
};

class OrderedWorker;

// A unit of work run by an OrderedWorker; its outcome is its Request.
class Job final : public Request {
 public:
  using Body = std::function<void()>;
  // Says why the job has not finished (which peer it waits for), for the
  // timeout message of Wait(). Called on the waiting thread.
  using Diagnose = std::function<std::string()>;

  // `op` ("all_to_all_v") is a string literal; `seq` numbers the
  // collective on its communicator. The message text "op (collective #seq)"
  // is built only when one is needed.
  Job(const char* op, int64_t seq, Body body, Diagnose diagnose, int64_t default_timeout_ms, OrderedWorker* owner)
      : op_(op),
        seq_(seq),
        body_(std::move(body)),
        diagnose_(std::move(diagnose)),
        default_timeout_ms_(default_timeout_ms),
        owner_(owner) {}

  bool Test() override {
    std::lock_guard<std::mutex> lock(m_);
    if (done_ && code_ != SR_OK) throw Error(code_, message_);
    return done_;
  }

  void Wait(int64_t timeout_ms) override;  // below OrderedWorker

  std::string what() const { return std::string(op_) + " (collective #" + std::to_string(seq_) + ")"; }

  // Runs the body and records its outcome.
  void Run() {
    int32_t code = SR_OK;
    std::string message;
    try {
      body_();
    } catch (const Error& e) {
      code = e.code();
      message = what() + ": " + e.what();
    } catch (const std::exception& e) {
      code = SR_INTERNAL;
      message = what() + ": " + e.what();
    } catch (...) {
      code = SR_INTERNAL;
      message = what() + ": unknown exception";
    }
    Finish(code, std::move(message));
  }

  void Finish(int32_t code, std::string message) {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (done_) return;
      done_ = true;
      code_ = code;
      message_ = std::move(message);
      body_ = nullptr;  // drops what the body captured (buffers, counts)
    }
    cv_.notify_all();
  }

  bool done() const {
    std::lock_guard<std::mutex> lock(m_);
    return done_;
  }
  // The outcome once done: SR_OK or the error code, and its message.
  int32_t code() const {
    std::lock_guard<std::mutex> lock(m_);
    return code_;
  }
  std::string message() const {
    std::lock_guard<std::mutex> lock(m_);
    return message_;
  }

 private:
  const char* const op_;
  const int64_t seq_;
  Body body_;
  Diagnose diagnose_;
  const int64_t default_timeout_ms_;
  // Valid while the job is not done: the worker finishes every job before
  // it goes.
  OrderedWorker* const owner_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  int32_t code_ = SR_OK;
  std::string message_;
};

// One thread that runs jobs in the order submitted. The destructor cancels
// jobs not yet started and waits for the running one (whose own timeouts
// bound that wait).
class OrderedWorker {
 public:
  // `default_timeout_ms`: what a Wait(-1) on its jobs waits.
  explicit OrderedWorker(int64_t default_timeout_ms)
      : default_timeout_ms_(default_timeout_ms), thread_([this] { Loop(); }) {}
  OrderedWorker(const OrderedWorker&) = delete;
  OrderedWorker& operator=(const OrderedWorker&) = delete;
  ~OrderedWorker() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<Job> Submit(const char* op, int64_t seq, Job::Body body, Job::Diagnose diagnose) {
    auto job = std::make_shared<Job>(op, seq, std::move(body), std::move(diagnose), default_timeout_ms_, this);
    {
      std::lock_guard<std::mutex> lock(m_);
      if (!failure_.empty()) {
        RejectAfterFailure(*job);
        return job;
      }
      queue_.push_back(job);
    }
    cv_.notify_all();
    return job;
  }

  // Runs `job` on the calling thread when it is next in line and the worker
  // is idle; false (nothing done) otherwise.
  bool RunHere(const Job* job) {
    std::shared_ptr<Job> mine;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (busy_ || stopping_ || queue_.empty() || queue_.front().get() != job || !failure_.empty()) return false;
      mine = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
    }
    Execute(*mine);
    return true;
  }

 private:
  // Called with m_ held, after a failure.
  void RejectAfterFailure(Job& job) {
    job.Finish(SR_FAILED_PRECONDITION, job.what() + ": the communicator failed earlier and cannot be used: " + failure_);
  }

  void Execute(Job& job) {
    job.Run();
    {
      std::lock_guard<std::mutex> lock(m_);
      busy_ = false;
      if (job.code() != SR_OK && failure_.empty()) failure_ = job.message();
    }
    cv_.notify_all();  // the worker may have more in line
  }

  void Loop() {
    for (;;) {
      std::shared_ptr<Job> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stopping_ || (!queue_.empty() && !busy_); });
        if (stopping_) {
          cv_.wait(lock, [&] { return !busy_; });  // a caller may be running one
          for (auto& j : queue_) j->Finish(SR_CANCELLED, j->what() + ": cancelled: the communicator was destroyed");
          queue_.clear();
          return;
        }
        job = std::move(queue_.front());
        queue_.pop_front();
        if (!failure_.empty()) {
          RejectAfterFailure(*job);
          continue;
        }
        busy_ = true;
      }
      Execute(*job);
    }
  }

  const int64_t default_timeout_ms_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool busy_ = false;  // a job is running (on the worker or a caller)
  bool stopping_ = false;
  std::string failure_;
  std::thread thread_;  // last: starts after the members it uses exist
};

inline void Job::Wait(int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = default_timeout_ms_;
  // Running it here would ignore a timeout shorter than the collective's
  // own (a poll), so only a full wait takes the job over.
  if (timeout_ms >= default_timeout_ms_ && !done()) owner_->RunHere(this);
  std::unique_lock<std::mutex> lock(m_);
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return done_; })) {
    lock.unlock();
    std::string why = diagnose_ ? diagnose_() : std::string();
    throw Error(SR_DEADLINE_EXCEEDED, what() + " did not complete within " + std::to_string(timeout_ms) + " ms" +
                                          (why.empty() ? "" : ": " + why));
  }
  if (code_ != SR_OK) throw Error(code_, message_);
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_COMM_REQUEST_HPP_
