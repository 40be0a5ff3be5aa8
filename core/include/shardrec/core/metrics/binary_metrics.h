// The metrics a recommendation team reads off a click model, as TorchRec's
// RecMetrics define them, for predictions p = sigmoid(logit) and labels y
// in {0, 1} over a set of samples:
//   auc          the area under the ROC curve, exact (sorted, ties as
//                trapezoids: sklearn's roc_auc_score)
//   log_loss     mean of -(y log p + (1 - y) log(1 - p)), from the logit
//                (stable for any logit; sklearn's log_loss on p)
//   ne           normalized entropy: log_loss / H(mean label), H the
//                binary entropy (TorchRec's NE; 1.0 = predicting the base
//                rate, lower is better)
//   calibration  sum of p / sum of y (TorchRec's CalibrationMetric)
//   accuracy     share of samples with (p >= 0.5) == y
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/status.h"

namespace shardrec::metrics {

struct BinaryMetrics {
  int64_t samples = 0;
  double auc = 0, log_loss = 0, ne = 0, calibration = 0, accuracy = 0, mean_label = 0;
};

// Over these samples. AUC is NaN when only one class is present, NE when
// the mean label is 0 or 1, calibration when no label is 1.
BinaryMetrics ComputeBinaryMetrics(std::span<const float> logits, std::span<const float> labels);
double Auc(std::span<const float> scores, std::span<const float> labels);

// Every rank's samples, gathered to every rank (collective), then
// ComputeBinaryMetrics: exact AUC over the ranks' union.
StatusOr<BinaryMetrics> ComputeOverRanks(const ProcessGroup* group, std::span<const float> logits,
                                         std::span<const float> labels);

// The last `window` samples (TorchRec's windowed metrics), this rank's.
class MetricWindow {
 public:
  explicit MetricWindow(int64_t window) : window_(window) {}
  void Add(std::span<const float> logits, std::span<const float> labels);
  const std::vector<float>& logits() const { return logits_; }
  const std::vector<float>& labels() const { return labels_; }
  int64_t size() const { return static_cast<int64_t>(logits_.size()); }

 private:
  int64_t window_;
  std::vector<float> logits_, labels_;
};

}  // namespace shardrec::metrics
