// ClickLogReader (click_log_reader.h).
#include "shardrec/core/data/click_log_reader.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <limits>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "shardrec/core/random/split_mix.h"

#include "sample_source.h"

namespace shardrec::data {

namespace fs = std::filesystem;

namespace {

bool IsTsvName(const fs::path& p) {
  const std::string ext = p.extension().string();
  return ext == ".tsv" || ext == ".txt" || ext == ".gz";
}

}  // namespace

StatusOr<ClickLogSpec> ClickLogSpec::Parse(const std::string& text) {
  ClickLogSpec spec;
  spec.text = text;
  const std::string prefix = "criteo:";
  if (text.rfind(prefix, 0) != 0) {
    return InvalidArgumentError(fmt::format("data '{}': expected criteo:PATH[,PATH...] (Criteo TSV files, plain or "
                                            "gzip, or a directory of them or of TorchRec's day_N_*.npy)", text));
  }
  std::vector<std::string> paths;
  for (size_t start = prefix.size(); start <= text.size();) {
    const size_t comma = std::min(text.find(',', start), text.size());
    if (comma > start) paths.push_back(text.substr(start, comma - start));
    start = comma + 1;
  }
  if (paths.empty()) return InvalidArgumentError(fmt::format("data '{}': no path after criteo:", text));
  std::error_code ec;
  for (const auto& p : paths) {
    if (fs::is_directory(p, ec)) {
      bool npy = false;
      std::vector<std::string> tsv;
      for (const auto& e : fs::directory_iterator(p, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind("day_", 0) == 0 && name.size() > 10 && name.substr(name.size() - 10) == "_dense.npy") npy = true;
        if (e.is_regular_file(ec) && IsTsvName(e.path())) tsv.push_back(e.path().string());
      }
      if (npy) {
        if (paths.size() != 1) return InvalidArgumentError(fmt::format("data '{}': a NumPy-layout directory stands alone", text));
        spec.kind = Kind::kNpy;
        spec.files = {p};
        return spec;
      }
      if (tsv.empty()) {
        return InvalidArgumentError(fmt::format("data '{}': directory {} has no day_N_dense.npy and no .tsv, .txt or "
                                                ".gz files", text, p));
      }
      std::sort(tsv.begin(), tsv.end());
      spec.files.insert(spec.files.end(), tsv.begin(), tsv.end());
    } else if (fs::is_regular_file(p, ec)) {
      spec.files.push_back(p);
    } else {
      return Status(SR_NOT_FOUND, fmt::format("data '{}': {} does not exist (or is not a file or directory)", text, p));
    }
  }
  for (const auto& f : spec.files) {
    FILE* probe = std::fopen(f.c_str(), "rb");
    if (probe == nullptr) return Status(SR_NOT_FOUND, fmt::format("data '{}': {} is not readable", text, f));
    std::fclose(probe);
  }
  return spec;
}

class ClickLogReader::Impl {
 public:
  Impl(std::unique_ptr<SampleSource> source, ClickLogOptions options)
      : source_(std::move(source)), o_(std::move(options)) {
    global_ = o_.batch * o_.world;
    const int64_t s = std::max<int64_t>(o_.shuffle_buffer, 1);
    window_ = (s + global_ - 1) / global_ * global_;
    if (o_.threads > 0) arena_.initialize(o_.threads);
    else arena_.initialize();
  }
  ~Impl() { Stop(); }

  Status StartEpoch(int64_t epoch, int64_t position) {
    Stop();
    epoch_ = epoch;
    SR_RETURN_IF_ERROR(source_->Rewind());
    // Windows start at multiples of the window from the epoch's start, so
    // a resumed run reshuffles the window it stopped in as it was.
    const int64_t start = position / window_ * window_;
    SR_RETURN_IF_ERROR(source_->Skip(start));
    window_first_ = start;
    window_batches_ = next_batch_ = 0;
    skip_batches_ = (position - start) / global_;
    done_ = false;
    if (o_.prefetch > 0) {
      stop_ = finished_ = false;
      producer_ = std::thread([this] { Produce(); });
    }
    return Status::Ok();
  }

  StatusOr<std::optional<ClickBatch>> Next() {
    if (o_.prefetch == 0) return Make();
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [this] { return !queue_.empty() || finished_; });
    if (queue_.empty()) return std::optional<ClickBatch>();  // past the epoch's end
    auto item = std::move(queue_.front());
    queue_.pop_front();
    space_.notify_one();
    wait_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return item;
  }

  int64_t bytes_read() const { return bytes_read_.load(); }
  double wait_seconds() const { return wait_; }
  std::string Describe() const { return source_->Describe(); }

 private:
  void Produce() {
    for (;;) {
      auto item = Make();
      const bool last = !item.ok() || !item->has_value();
      std::unique_lock<std::mutex> lock(mu_);
      space_.wait(lock, [this] { return stop_ || static_cast<int>(queue_.size()) < o_.prefetch; });
      if (stop_) return;
      queue_.push_back(std::move(item));
      finished_ = last;
      ready_.notify_one();
      if (last) return;  // the epoch's end (or an error): Next sees it
    }
  }

  void Stop() {
    if (!producer_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    space_.notify_all();
    producer_.join();
    queue_.clear();
  }

  // Reads the next window; false at the epoch's end.
  StatusOr<bool> NextWindow() {
    window_first_ += window_batches_ * global_;
    SR_ASSIGN_OR_RETURN(const int64_t got, source_->ReadWindow(window_));
    bytes_read_ = source_->bytes_read();
    window_batches_ = got / global_;
    next_batch_ = 0;
    if (window_batches_ == 0) return false;
    order_.resize(static_cast<size_t>(got));
    for (int64_t i = 0; i < got; ++i) order_[static_cast<size_t>(i)] = i;
    if (o_.shuffle_buffer > 0) {
      // Fisher-Yates by (seed, epoch, window): the same on every rank.
      uint64_t state = SplitMix64(o_.seed ^ SplitMix64(static_cast<uint64_t>(epoch_) ^ SplitMix64(static_cast<uint64_t>(window_first_))));
      for (int64_t i = got - 1; i > 0; --i) {
        state = SplitMix64(state);
        const auto j = static_cast<int64_t>(state % static_cast<uint64_t>(i + 1));
        std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
      }
    }
    return true;
  }

  StatusOr<std::optional<ClickBatch>> Make() {
    if (done_) return std::optional<ClickBatch>();
    while (next_batch_ >= window_batches_ || skip_batches_ > 0) {
      if (next_batch_ >= window_batches_) {
        SR_ASSIGN_OR_RETURN(bool more, NextWindow());
        if (!more) {
          done_ = true;
          return std::optional<ClickBatch>();
        }
      }
      if (skip_batches_ > 0 && next_batch_ < window_batches_) {
        const int64_t n = std::min(skip_batches_, window_batches_ - next_batch_);
        next_batch_ += n;
        skip_batches_ -= n;
      }
    }
    const int64_t b = o_.batch;
    const int64_t first = next_batch_ * global_ + o_.rank * b;
    std::vector<RawSample> samples(static_cast<size_t>(b));
    std::vector<Status> errors(static_cast<size_t>(b), Status::Ok());
    arena_.execute([&] {
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, b, 256), [&](const tbb::blocked_range<int64_t>& r) {
        for (int64_t i = r.begin(); i < r.end(); ++i) {
          errors[static_cast<size_t>(i)] =
              source_->Decode(order_[static_cast<size_t>(first + i)], &samples[static_cast<size_t>(i)]);
        }
      });
    });
    ClickBatch batch;
    std::vector<size_t> keep;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (errors[i].ok()) {
        keep.push_back(i);
      } else if (!o_.skip_bad_lines) {
        return errors[i];
      } else {
        ++batch.bad_lines;
      }
    }
    const auto n = static_cast<int64_t>(keep.size());
    batch.dense = Tensor::Empty(dtype::kFloat32, {n, kCriteoDense});
    batch.labels = Tensor::Empty(dtype::kFloat32, {n});
    const size_t features = o_.features.size();
    std::vector<int64_t> values(features * keep.size()), lengths(features * keep.size(), 1);
    const bool floor_mod = source_->signed_ids();
    for (int64_t k = 0; k < n; ++k) {
      const RawSample& s = samples[keep[static_cast<size_t>(k)]];
      batch.labels.data<float>()[k] = s.label;
      std::copy(s.dense.begin(), s.dense.end(), batch.dense.data<float>() + k * kCriteoDense);
      for (size_t f = 0; f < features; ++f) {
        const auto rows = static_cast<uint64_t>(o_.num_embeddings[f]);
        int64_t id;
        if (rows == 0) {
          // The raw value, non-negative: a signed int32 hash as its 32 bits.
          const auto v = static_cast<int64_t>(s.sparse[f]);
          id = floor_mod && v < 0 ? v + (int64_t{1} << 32) : (v & std::numeric_limits<int64_t>::max());
        } else if (floor_mod) {
          const auto v = static_cast<int64_t>(s.sparse[f]);
          const auto m = static_cast<int64_t>(rows);
          id = ((v % m) + m) % m;
        } else {
          id = static_cast<int64_t>(s.sparse[f] % rows);
        }
        values[f * keep.size() + static_cast<size_t>(k)] = id;
      }
    }
    SR_ASSIGN_OR_RETURN(batch.sparse, KeyedJaggedTensor::FromLengths(o_.features, std::move(values), std::move(lengths)));
    ++next_batch_;
    batch.epoch = epoch_;
    batch.position = window_first_ + next_batch_ * global_;
    return std::optional<ClickBatch>(std::move(batch));
  }

  std::unique_ptr<SampleSource> source_;
  ClickLogOptions o_;
  int64_t global_ = 0, window_ = 0;
  tbb::task_arena arena_;
  int64_t epoch_ = 0, window_first_ = 0, window_batches_ = 0, next_batch_ = 0, skip_batches_ = 0;
  bool done_ = false;
  std::vector<int64_t> order_;
  std::atomic<int64_t> bytes_read_{0};
  double wait_ = 0;
  // The prefetching thread and its queue.
  std::thread producer_;
  std::mutex mu_;
  std::condition_variable ready_, space_;
  std::deque<StatusOr<std::optional<ClickBatch>>> queue_;
  bool stop_ = false, finished_ = false;
};

StatusOr<std::unique_ptr<ClickLogReader>> ClickLogReader::Open(const ClickLogSpec& spec, const ClickLogOptions& options) {
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return InvalidArgumentError(fmt::format("click log reader: rank {} of a world of {}", options.rank, options.world));
  }
  if (options.batch < 1) return InvalidArgumentError("click log reader: the batch must be at least 1");
  if (options.features.size() != static_cast<size_t>(kCriteoSparse) || options.num_embeddings.size() != options.features.size()) {
    return InvalidArgumentError(fmt::format("a Criteo click log has {} categorical columns; the tables have {} features "
                                            "(give 26 features, e.g. --tables 26x100000x64)",
                                            kCriteoSparse, options.features.size()));
  }
  for (int64_t rows : options.num_embeddings) {
    if (rows < 0) return InvalidArgumentError("click log reader: a negative number of rows");
  }
  if (options.shuffle_buffer < 0 || options.prefetch < 0 || options.threads < 0) {
    return InvalidArgumentError("click log reader: the shuffle buffer, prefetch and threads must be >= 0");
  }
  std::unique_ptr<SampleSource> source;
  if (spec.kind == ClickLogSpec::Kind::kNpy) {
    SR_ASSIGN_OR_RETURN(source, OpenNpySource(spec.files.at(0)));
  } else {
    std::vector<fs::path> files(spec.files.begin(), spec.files.end());
    SR_ASSIGN_OR_RETURN(source, OpenTsvSource(std::move(files)));
  }
  auto reader = std::unique_ptr<ClickLogReader>(new ClickLogReader(std::make_unique<Impl>(std::move(source), options)));
  SR_RETURN_IF_ERROR(reader->StartEpoch(0, 0));
  return reader;
}

StatusOr<int64_t> ClickLogReader::CountSamples(const ClickLogSpec& spec) {
  if (spec.kind == ClickLogSpec::Kind::kNpy) return CountNpySamples(spec.files.at(0));
  return CountTsvSamples(std::vector<fs::path>(spec.files.begin(), spec.files.end()));
}

ClickLogReader::ClickLogReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ClickLogReader::~ClickLogReader() = default;
StatusOr<std::optional<ClickBatch>> ClickLogReader::Next() { return impl_->Next(); }
Status ClickLogReader::StartEpoch(int64_t epoch, int64_t position) { return impl_->StartEpoch(epoch, position); }
int64_t ClickLogReader::bytes_read() const { return impl_->bytes_read(); }
double ClickLogReader::wait_seconds() const { return impl_->wait_seconds(); }
std::string ClickLogReader::Describe() const { return impl_->Describe(); }

}  // namespace shardrec::data
