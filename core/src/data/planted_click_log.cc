// PlantedClickModel and WritePlantedTsv (planted_click_log.h).
#include "shardrec/core/data/planted_click_log.h"

#include <tbb/parallel_for.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "shardrec/core/random/split_mix.h"

namespace shardrec::data {

namespace {

// A small counter-based generator: the stream of sample i.
class Stream {
 public:
  explicit Stream(uint64_t key) : state_(SplitMix64(key)) {}
  uint64_t Bits() { return state_ = SplitMix64(state_); }
  double Uniform() { return static_cast<double>(Bits() >> 11) * 0x1.0p-53; }  // [0, 1)
  double Gauss() {
    const double u = std::max(Uniform(), 1e-300), v = Uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  uint64_t state_;
};

double GaussOf(uint64_t key) { return Stream(key).Gauss(); }

constexpr uint64_t kDenseTag = 0x64656e7365ULL, kIdTag = 0x6964ULL, kHashTag = 0x68617368ULL, kMuTag = 0x6d75ULL;

}  // namespace

PlantedClickModel::PlantedClickModel(PlantedClickModelOptions o) : o_(o) {
  zipf_cdf_.resize(static_cast<size_t>(std::max<int64_t>(o_.cardinality, 1)));
  double sum = 0;
  for (size_t k = 0; k < zipf_cdf_.size(); ++k) {
    sum += 1.0 / std::pow(static_cast<double>(k + 1), o_.zipf_alpha);
    zipf_cdf_[k] = sum;
  }
  for (double& c : zipf_cdf_) c /= sum;
  for (int j = 0; j < kCriteoDense; ++j) {
    mu_[static_cast<size_t>(j)] = 0.3 + 2.2 * Stream(o_.seed ^ kMuTag ^ static_cast<uint64_t>(j)).Uniform();
    dense_weight_[static_cast<size_t>(j)] = o_.dense_effect * GaussOf(o_.seed ^ kDenseTag ^ static_cast<uint64_t>(j));
  }
  // The bias: about base_rate clicks over a fixed sample of the stream.
  std::vector<double> logits;
  for (int64_t i = 0; i < 20000; ++i) {
    double l = 0;
    Sample(-1 - i, &l);
    logits.push_back(l);
  }
  double lo = -20, hi = 20;
  for (int it = 0; it < 60; ++it) {
    const double mid = (lo + hi) / 2;
    double rate = 0;
    for (double l : logits) rate += 1.0 / (1.0 + std::exp(-(l + mid)));
    (rate / static_cast<double>(logits.size()) < o_.base_rate ? lo : hi) = mid;
  }
  bias_ = (lo + hi) / 2;
}

CriteoRow PlantedClickModel::Sample(int64_t index, double* logit, std::array<bool, kCriteoFields>* missing) const {
  Stream s(o_.seed * 0x2545f4914f6cdd1dULL ^ static_cast<uint64_t>(index));
  CriteoRow row;
  double l = bias_;
  for (int j = 0; j < kCriteoDense; ++j) {
    const double mu = mu_[static_cast<size_t>(j)];
    const bool absent = s.Uniform() < 0.1;
    int64_t x = static_cast<int64_t>(std::floor(std::exp(mu + 1.2 * s.Gauss()))) - 1;
    if (j != 1) x = std::max<int64_t>(x, 0);
    if (absent) x = 0;
    row.dense[static_cast<size_t>(j)] = x;
    if (missing) (*missing)[static_cast<size_t>(1 + j)] = absent;
    // Standardised roughly by the draw's own scale: log(1 + x) ~ mu +- 1.2.
    const double z = (CriteoDenseTransform(x) - mu) / 1.2;
    l += dense_weight_[static_cast<size_t>(j)] * z;
  }
  for (int f = 0; f < kCriteoSparse; ++f) {
    const bool absent = s.Uniform() < 0.05;
    const double u = s.Uniform();
    const auto k = static_cast<uint64_t>(std::lower_bound(zipf_cdf_.begin(), zipf_cdf_.end(), u) - zipf_cdf_.begin());
    const uint64_t key = (static_cast<uint64_t>(f) << 40) ^ k;
    row.sparse[static_cast<size_t>(f)] = absent ? 0 : (SplitMix64(o_.seed ^ kHashTag ^ key) & 0xffffffffULL);
    if (missing) (*missing)[static_cast<size_t>(1 + kCriteoDense + f)] = absent;
    if (!absent && f < o_.informative) l += o_.id_effect * GaussOf(o_.seed ^ kIdTag ^ key);
  }
  const double p = 1.0 / (1.0 + std::exp(-l));
  row.label = s.Uniform() < p ? 1.0f : 0.0f;
  if (missing) (*missing)[0] = false;
  *logit = l;
  return row;
}

std::string PlantedClickModel::Line(const CriteoRow& row, const std::array<bool, kCriteoFields>& missing) {
  fmt::memory_buffer out;
  fmt::format_to(std::back_inserter(out), "{}", row.label > 0.5f ? 1 : 0);
  for (int j = 0; j < kCriteoDense; ++j) {
    out.push_back('\t');
    if (!missing[static_cast<size_t>(1 + j)]) fmt::format_to(std::back_inserter(out), "{}", row.dense[static_cast<size_t>(j)]);
  }
  for (int f = 0; f < kCriteoSparse; ++f) {
    out.push_back('\t');
    if (!missing[static_cast<size_t>(1 + kCriteoDense + f)]) {
      fmt::format_to(std::back_inserter(out), "{:08x}", row.sparse[static_cast<size_t>(f)]);
    }
  }
  return fmt::to_string(out);
}

namespace {

// Plain or gzip output, by the file name.
class Output {
 public:
  Status Open(const std::filesystem::path& path, bool gzip) {
    gzip_ = gzip;
    if (gzip) {
      gz_ = gzopen(path.c_str(), "wb1");
      if (gz_ == nullptr) return InvalidArgumentError(path.string() + ": cannot create");
    } else {
      file_ = std::fopen(path.c_str(), "wb");
      if (file_ == nullptr) return InvalidArgumentError(path.string() + ": cannot create");
    }
    return Status::Ok();
  }
  bool Write(const std::string& s) {
    if (gzip_) return gzwrite(gz_, s.data(), static_cast<unsigned>(s.size())) == static_cast<int>(s.size());
    return std::fwrite(s.data(), 1, s.size(), file_) == s.size();
  }
  bool Close() {
    bool ok = true;
    if (gz_ != nullptr) ok = gzclose(gz_) == Z_OK;
    if (file_ != nullptr) {
      ok = std::fflush(file_) == 0;
      ok = fsync(fileno(file_)) == 0 && ok;
      ok = std::fclose(file_) == 0 && ok;
    }
    gz_ = nullptr;
    file_ = nullptr;
    return ok;
  }
  ~Output() { Close(); }

 private:
  bool gzip_ = false;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
};

}  // namespace

Status WritePlantedTsv(const PlantedClickModel& model, int64_t first, int64_t count, const std::filesystem::path& path,
                       std::vector<float>* logits, std::vector<float>* labels,
                       const std::function<void(int64_t)>& progress) {
  const auto tmp = path.parent_path() / (".tmp." + path.filename().string() + "." + std::to_string(getpid()));
  Output out;
  SR_RETURN_IF_ERROR(out.Open(tmp, path.extension() == ".gz"));
  constexpr int64_t kBlock = 16384;
  std::vector<std::string> block(kBlock);
  std::vector<double> block_logits(kBlock);
  std::vector<float> block_labels(kBlock);
  for (int64_t begin = 0; begin < count; begin += kBlock) {
    const int64_t n = std::min(kBlock, count - begin);
    tbb::parallel_for(int64_t{0}, n, [&](int64_t i) {
      std::array<bool, kCriteoFields> missing{};
      double l = 0;
      const CriteoRow row = model.Sample(first + begin + i, &l, &missing);
      block[static_cast<size_t>(i)] = PlantedClickModel::Line(row, missing) + "\n";
      block_logits[static_cast<size_t>(i)] = l;
      block_labels[static_cast<size_t>(i)] = row.label;
    });
    std::string text;
    for (int64_t i = 0; i < n; ++i) text += block[static_cast<size_t>(i)];
    if (!out.Write(text)) {
      out.Close();
      std::filesystem::remove(tmp);
      return InternalError(tmp.string() + ": write failed (disk full?)");
    }
    if (logits) logits->insert(logits->end(), block_logits.begin(), block_logits.begin() + n);
    if (labels) labels->insert(labels->end(), block_labels.begin(), block_labels.begin() + n);
    if (progress) progress(begin + n);
  }
  if (!out.Close()) {
    std::filesystem::remove(tmp);
    return InternalError(tmp.string() + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return InternalError(fmt::format("{}: cannot rename to {}: {}", tmp.string(), path.string(), ec.message()));
  return Status::Ok();
}

}  // namespace shardrec::data
