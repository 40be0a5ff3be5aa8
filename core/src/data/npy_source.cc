// TorchRec's preprocessed Criteo layout as a SampleSource (sample_source.h):
// for every day N, day_N_dense.npy (float32 [rows, 13], log(x + 3) already
// applied by TorchRec's preprocessing), day_N_sparse.npy (int32 or int64
// [rows, 26]) and day_N_labels.npy (int32, int64 or float32, [rows] or
// [rows, 1]), days in ascending N. Rows are read by positional reads.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "sample_source.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::data {

namespace {

namespace fs = std::filesystem;

struct NpyArray {
  fs::path path;
  NpyLayout layout;
  int64_t row_elems = 1;
  int elem_bytes = 4;
};

struct Day {
  int64_t number = 0;
  NpyArray dense, sparse, labels;
  int64_t rows = 0;
};

StatusOr<NpyArray> OpenArray(const fs::path& path, const std::vector<std::string>& descrs, int64_t cols) {
  SR_ASSIGN_OR_RETURN(NpyLayout layout, ReadNpyLayout(path));
  if (std::find(descrs.begin(), descrs.end(), layout.descr) == descrs.end()) {
    return InvalidArgumentError(fmt::format("{}: dtype {} (expected one of {})", path.string(), layout.descr,
                                            fmt::format("{}", fmt::join(descrs, ", "))));
  }
  const bool shape_ok = (layout.shape.size() == 2 && layout.shape[1] == cols) ||
                        (cols == 1 && layout.shape.size() == 1);
  if (!shape_ok) {
    return InvalidArgumentError(fmt::format("{}: shape {} (expected [rows, {}]{})", path.string(),
                                            ShapeString(layout.shape), cols, cols == 1 ? " or [rows]" : ""));
  }
  NpyArray a;
  a.path = path;
  a.layout = std::move(layout);
  a.row_elems = cols;
  a.elem_bytes = static_cast<int>(a.layout.dtype.bits / 8);
  return a;
}

class NpySource final : public SampleSource {
 public:
  explicit NpySource(std::vector<Day> days) : days_(std::move(days)) {}

  Status Rewind() override {
    next_ = 0;
    return Status::Ok();
  }
  Status Skip(int64_t count) override {
    if (next_ + count > Total()) {
      return FailedPreconditionError(fmt::format("{}: the stream ends {} samples before the resume position", Describe(),
                                         next_ + count - Total()));
    }
    next_ += count;
    return Status::Ok();
  }
  StatusOr<int64_t> ReadWindow(int64_t count) override {
    const int64_t n = std::clamp<int64_t>(Total() - next_, 0, count);
    dense_.resize(static_cast<size_t>(n * kCriteoDense));
    sparse_.resize(static_cast<size_t>(n * kCriteoSparse));
    labels_.resize(static_cast<size_t>(n));
    std::vector<char> raw;
    int64_t done = 0;
    while (done < n) {
      auto [day, row] = Locate(next_ + done);
      const int64_t take = std::min(n - done, day->rows - row);
      SR_RETURN_IF_ERROR(ReadRows(day->dense, row, take, &raw));
      std::memcpy(dense_.data() + done * kCriteoDense, raw.data(), raw.size());
      SR_RETURN_IF_ERROR(ReadRows(day->sparse, row, take, &raw));
      for (int64_t i = 0; i < take * kCriteoSparse; ++i) {
        sparse_[static_cast<size_t>(done * kCriteoSparse + i)] =
            day->sparse.elem_bytes == 4 ? Load<int32_t>(raw, i) : Load<int64_t>(raw, i);
      }
      SR_RETURN_IF_ERROR(ReadRows(day->labels, row, take, &raw));
      for (int64_t i = 0; i < take; ++i) {
        float v;
        if (day->labels.layout.descr == "<f4") {
          v = Load<float>(raw, i);
        } else {
          v = static_cast<float>(day->labels.elem_bytes == 4 ? Load<int32_t>(raw, i) : Load<int64_t>(raw, i));
        }
        if (v != 0.0f && v != 1.0f) {
          return InvalidArgumentError(fmt::format("{}: row {}: label {} (expected 0 or 1)", day->labels.path.string(),
                                                  row + i, v));
        }
        labels_[static_cast<size_t>(done + i)] = v;
      }
      done += take;
    }
    next_ += n;
    return n;
  }
  Status Decode(int64_t i, RawSample* out) const override {
    out->label = labels_[static_cast<size_t>(i)];
    std::copy_n(dense_.begin() + i * kCriteoDense, kCriteoDense, out->dense.begin());
    for (int j = 0; j < kCriteoSparse; ++j) {
      out->sparse[static_cast<size_t>(j)] = static_cast<uint64_t>(sparse_[static_cast<size_t>(i * kCriteoSparse + j)]);
    }
    return Status::Ok();
  }
  std::string Describe() const override {
    return fmt::format("{} ({} days, {} samples)", days_[0].dense.path.parent_path().string(), days_.size(), Total());
  }
  int64_t bytes_read() const override { return bytes_read_; }
  bool signed_ids() const override { return true; }
  int64_t total() const { return Total(); }

 private:
  int64_t Total() const {
    int64_t t = 0;
    for (const Day& d : days_) t += d.rows;
    return t;
  }
  std::pair<const Day*, int64_t> Locate(int64_t sample) const {
    for (const Day& d : days_) {
      if (sample < d.rows) return {&d, sample};
      sample -= d.rows;
    }
    return {&days_.back(), days_.back().rows};
  }
  template <class T>
  static T Load(const std::vector<char>& raw, int64_t i) {
    T v;
    std::memcpy(&v, raw.data() + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return v;
  }
  Status ReadRows(const NpyArray& a, int64_t row, int64_t count, std::vector<char>* out) {
    const int64_t row_bytes = a.row_elems * a.elem_bytes;
    out->resize(static_cast<size_t>(count * row_bytes));
    const int fd = ::open(a.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status(SR_NOT_FOUND, fmt::format("{}: cannot open: {}", a.path.string(), std::strerror(errno)));
    int64_t done = 0;
    while (done < static_cast<int64_t>(out->size())) {
      const ssize_t n = ::pread(fd, out->data() + done, out->size() - static_cast<size_t>(done),
                                a.layout.data_offset + row * row_bytes + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ::close(fd);
        return InvalidArgumentError(fmt::format("{}: truncated or unreadable at row {}", a.path.string(), row));
      }
      done += n;
    }
    ::close(fd);
    bytes_read_ += done;
    return Status::Ok();
  }

  std::vector<Day> days_;
  int64_t next_ = 0;
  std::vector<float> dense_, labels_;
  std::vector<int64_t> sparse_;
  int64_t bytes_read_ = 0;
};

}  // namespace

StatusOr<int64_t> CountNpySamples(const fs::path& dir) {
  SR_ASSIGN_OR_RETURN(auto source, OpenNpySource(dir));
  return static_cast<NpySource*>(source.get())->total();
}

StatusOr<std::unique_ptr<SampleSource>> OpenNpySource(const fs::path& dir) {
  std::map<int64_t, Day> days;
  std::error_code ec;
  const std::regex name(R"(day_(\d{1,9})_dense\.npy)");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string file = e.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    Day d;
    d.number = std::stoll(m[1].str());
    days[d.number] = d;
  }
  if (ec) return InvalidArgumentError(fmt::format("{}: cannot list: {}", dir.string(), ec.message()));
  if (days.empty()) return InvalidArgumentError(fmt::format("{}: no day_N_dense.npy files", dir.string()));
  std::vector<Day> out;
  for (auto& entry : days) {
    const int64_t n = entry.first;
    Day& d = entry.second;
    const auto path = [&](const char* what) { return dir / fmt::format("day_{}_{}.npy", n, what); };
    SR_ASSIGN_OR_RETURN(d.dense, OpenArray(path("dense"), {"<f4"}, kCriteoDense));
    SR_ASSIGN_OR_RETURN(d.sparse, OpenArray(path("sparse"), {"<i4", "<i8"}, kCriteoSparse));
    SR_ASSIGN_OR_RETURN(d.labels, OpenArray(path("labels"), {"<i4", "<i8", "<f4"}, 1));
    d.rows = d.dense.layout.shape[0];
    if (d.sparse.layout.shape[0] != d.rows || d.labels.layout.shape[0] != d.rows) {
      return InvalidArgumentError(fmt::format("day {} of {}: dense has {} rows, sparse {}, labels {}", n, dir.string(),
                                              d.rows, d.sparse.layout.shape[0], d.labels.layout.shape[0]));
    }
    out.push_back(std::move(d));
  }
  return std::unique_ptr<SampleSource>(std::make_unique<NpySource>(std::move(out)));
}

}  // namespace shardrec::data
