// Criteo TSV files, plain or gzip (zlib's gzread reads both), as a
// SampleSource (sample_source.h): lines are found with memchr in a buffer
// that holds the window's text; only the lines a rank keeps are parsed.
#include <zlib.h>

#include <cstring>

#include <fmt/format.h>

#include "sample_source.h"

namespace shardrec::data {

namespace {

constexpr unsigned kGzBufferBytes = 1u << 20;
constexpr size_t kReadBytes = size_t{1} << 20;

class TsvSource final : public SampleSource {
 public:
  explicit TsvSource(std::vector<std::filesystem::path> files) : files_(std::move(files)) {}
  ~TsvSource() override { Close(); }

  Status Rewind() override {
    Close();
    file_ = 0;
    line_no_ = 0;
    buf_.clear();
    return Open();
  }

  Status Skip(int64_t count) override {
    while (count > 0) {
      SR_ASSIGN_OR_RETURN(int64_t got, ReadWindow(std::min<int64_t>(count, 65536)));
      if (got == 0) return FailedPreconditionError(fmt::format("{}: the stream ends {} samples before the resume position", Describe(), count));
      count -= got;
    }
    return Status::Ok();
  }

  StatusOr<int64_t> ReadWindow(int64_t count) override {
    lines_.clear();
    // Keep the partial line at the end of the last window.
    buf_.erase(0, consumed_);
    consumed_ = 0;
    size_t scan = 0;
    while (static_cast<int64_t>(lines_.size()) < count) {
      const void* nl = scan < buf_.size() ? std::memchr(buf_.data() + scan, '\n', buf_.size() - scan) : nullptr;
      if (nl != nullptr) {
        const size_t end = static_cast<size_t>(static_cast<const char*>(nl) - buf_.data());
        lines_.push_back({consumed_, end - consumed_, file_, ++line_no_});
        consumed_ = end + 1;
        scan = consumed_;
        continue;
      }
      scan = buf_.size();
      if (gz_ == nullptr) break;  // every file read
      SR_ASSIGN_OR_RETURN(bool more, Fill());
      if (more) continue;
      // The file's end: a last line without '\n' is a line too.
      if (consumed_ < buf_.size()) {
        lines_.push_back({consumed_, buf_.size() - consumed_, file_, ++line_no_});
        buf_.push_back('\n');  // keeps the next file's bytes apart
        consumed_ = buf_.size();
        scan = consumed_;
      }
      Close();
      if (file_ + 1 < files_.size()) {
        ++file_;
        line_no_ = 0;
        SR_RETURN_IF_ERROR(Open());
      }
    }
    return static_cast<int64_t>(lines_.size());
  }

  Status Decode(int64_t i, RawSample* out) const override {
    const Line& l = lines_[static_cast<size_t>(i)];
    CriteoRow row;
    Status st = ParseCriteoLine(std::string_view(buf_.data() + l.start, l.length), &row);
    if (!st.ok()) {
      return InvalidArgumentError(fmt::format("{}:{}: {}", files_[l.file].string(), l.line, st.message()));
    }
    out->label = row.label;
    for (int j = 0; j < kCriteoDense; ++j) out->dense[static_cast<size_t>(j)] = CriteoDenseTransform(row.dense[static_cast<size_t>(j)]);
    out->sparse = row.sparse;
    return Status::Ok();
  }

  std::string Describe() const override {
    return files_.size() == 1 ? files_[0].string() : fmt::format("{} and {} more file(s)", files_[0].string(), files_.size() - 1);
  }
  int64_t bytes_read() const override { return bytes_read_; }

 private:
  struct Line {
    size_t start, length;
    size_t file;
    int64_t line;
  };

  Status Open() {
    gz_ = gzopen(files_[file_].c_str(), "rb");
    if (gz_ == nullptr) {
      return Status(SR_NOT_FOUND, fmt::format("{}: cannot open: {}", files_[file_].string(), std::strerror(errno)));
    }
    gzbuffer(gz_, kGzBufferBytes);
    return Status::Ok();
  }
  void Close() {
    if (gz_ != nullptr) gzclose(gz_);
    gz_ = nullptr;
  }
  // Appends the next bytes of the current file; false at its end.
  StatusOr<bool> Fill() {
    const size_t at = buf_.size();
    buf_.resize(at + kReadBytes);
    const int n = gzread(gz_, buf_.data() + at, static_cast<unsigned>(kReadBytes));
    if (n < 0) {
      int code = 0;
      const char* why = gzerror(gz_, &code);
      buf_.resize(at);
      return InvalidArgumentError(fmt::format("{}: cannot read: {}", files_[file_].string(), why ? why : "zlib error"));
    }
    buf_.resize(at + static_cast<size_t>(n));
    bytes_read_ += n;
    return n > 0;
  }

  std::vector<std::filesystem::path> files_;
  size_t file_ = 0;
  int64_t line_no_ = 0;
  gzFile gz_ = nullptr;
  std::string buf_;
  size_t consumed_ = 0;  // bytes of buf_ that belong to lines already handed out
  std::vector<Line> lines_;
  int64_t bytes_read_ = 0;
};

}  // namespace

StatusOr<int64_t> CountTsvSamples(const std::vector<std::filesystem::path>& files) {
  int64_t lines = 0;
  std::vector<char> buf(kReadBytes);
  for (const auto& path : files) {
    gzFile gz = gzopen(path.c_str(), "rb");
    if (gz == nullptr) return Status(SR_NOT_FOUND, fmt::format("{}: cannot open: {}", path.string(), std::strerror(errno)));
    gzbuffer(gz, kGzBufferBytes);
    char last = '\n';
    for (;;) {
      const int n = gzread(gz, buf.data(), static_cast<unsigned>(buf.size()));
      if (n < 0) {
        int code = 0;
        const std::string why = gzerror(gz, &code);
        gzclose(gz);
        return InvalidArgumentError(fmt::format("{}: cannot read: {}", path.string(), why));
      }
      if (n == 0) break;
      for (const char* p = buf.data(); (p = static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(buf.data() + n - p)))) != nullptr; ++p) {
        ++lines;
      }
      last = buf[static_cast<size_t>(n - 1)];
    }
    gzclose(gz);
    if (last != '\n') ++lines;
  }
  return lines;
}

StatusOr<std::unique_ptr<SampleSource>> OpenTsvSource(std::vector<std::filesystem::path> files) {
  if (files.empty()) return InvalidArgumentError("no click log files");
  auto source = std::make_unique<TsvSource>(std::move(files));
  SR_RETURN_IF_ERROR(source->Rewind());
  return std::unique_ptr<SampleSource>(std::move(source));
}

}  // namespace shardrec::data
