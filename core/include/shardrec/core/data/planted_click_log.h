// A click log with a known answer: Criteo-format samples drawn from a
// planted logistic model, so a test (and the README's first command) knows
// what "the model learned" means. Sample i is a pure function of (seed, i):
//   - dense j: a count x = floor(exp(mu_j + 1.2 g)) - 1 (g standard normal;
//     j = 1 may be -1, as Criteo's int_1 is), missing with probability 0.1;
//   - categorical f: id k in [0, cardinality_f) drawn Zipf(alpha), written
//     as an 8-hex-digit hash of (f, k), missing with probability 0.05;
//   - logit = bias + sum_j w_j z_j + sum_f e_f(k_f), with z_j the dense
//     value log(1 + max(x, 0)) standardised, w_j and the per-id effects
//     e_f(k) ~ N(0, sigma_f) drawn from hashes of the seed (sigma_f = 0 for
//     uninformative features); label ~ Bernoulli(sigmoid(logit)).
// The planted model's own AUC on a set of samples is what no model can beat
// on average; a trained model is judged against it.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/core/data/criteo_line.h"
#include "shardrec/core/status.h"

namespace shardrec::data {

struct PlantedClickModelOptions {
  uint64_t seed = 1;
  int64_t cardinality = 2000;   // ids per categorical feature
  double zipf_alpha = 1.05;
  int informative = 13;         // categorical features with an effect (the first ones)
  double id_effect = 0.6;       // sigma of an informative feature's per-id effect
  double dense_effect = 0.45;   // sigma of the dense weights
  double base_rate = 0.25;      // the bias aims at about this click rate (Criteo's)
};

class PlantedClickModel {
 public:
  explicit PlantedClickModel(PlantedClickModelOptions o);
  // Sample `index`: its Criteo row, the planted logit and (when given)
  // which fields a file leaves empty.
  CriteoRow Sample(int64_t index, double* logit, std::array<bool, kCriteoFields>* missing = nullptr) const;
  // The row as a Criteo TSV line (no '\n'), empty fields for missing values.
  static std::string Line(const CriteoRow& row, const std::array<bool, kCriteoFields>& missing);
  const PlantedClickModelOptions& options() const { return o_; }

 private:
  PlantedClickModelOptions o_;
  std::vector<double> zipf_cdf_;
  std::array<double, kCriteoDense> mu_{}, dense_weight_{};  // per dense feature, from the seed
  double bias_ = 0;
};

// Writes samples [first, first + count) as Criteo TSV to `path` (gzip when
// the name ends in .gz), atomically (a temporary file, then rename). Adds
// the samples' planted logits and labels to *logits / *labels when given
// (for the planted AUC). `progress` is called with samples written.
Status WritePlantedTsv(const PlantedClickModel& model, int64_t first, int64_t count, const std::filesystem::path& path,
                       std::vector<float>* logits, std::vector<float>* labels,
                       const std::function<void(int64_t)>& progress = nullptr);

}  // namespace shardrec::data
