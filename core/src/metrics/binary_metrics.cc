// Binary-classification metrics (binary_metrics.h).
#include "shardrec/core/metrics/binary_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace shardrec::metrics {

double Auc(std::span<const float> scores, std::span<const float> labels) {
  const size_t n = std::min(scores.size(), labels.size());
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return scores[a] > scores[b]; });
  double tp = 0, fp = 0, area = 0;
  for (size_t i = 0; i < n;) {
    // A run of equal scores moves the curve diagonally: a trapezoid.
    double dtp = 0, dfp = 0;
    size_t j = i;
    for (; j < n && scores[order[j]] == scores[order[i]]; ++j) {
      if (labels[order[j]] > 0.5f) dtp += 1; else dfp += 1;
    }
    area += dfp * (tp + dtp / 2);
    tp += dtp;
    fp += dfp;
    i = j;
  }
  if (tp == 0 || fp == 0) return std::numeric_limits<double>::quiet_NaN();
  return area / (tp * fp);
}

BinaryMetrics ComputeBinaryMetrics(std::span<const float> logits, std::span<const float> labels) {
  BinaryMetrics m;
  const size_t n = std::min(logits.size(), labels.size());
  m.samples = static_cast<int64_t>(n);
  if (n == 0) {
    m.auc = m.log_loss = m.ne = m.calibration = m.accuracy = m.mean_label = std::numeric_limits<double>::quiet_NaN();
    return m;
  }
  double ce = 0, p_sum = 0, y_sum = 0, right = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = logits[i], y = labels[i] > 0.5f ? 1.0 : 0.0;
    // -(y log p + (1 - y) log(1 - p)) with p = sigmoid(x), without overflow.
    ce += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
    const double p = 1.0 / (1.0 + std::exp(-x));
    p_sum += p;
    y_sum += y;
    right += ((p >= 0.5) == (y == 1.0)) ? 1 : 0;
  }
  const double count = static_cast<double>(n);
  m.log_loss = ce / count;
  m.mean_label = y_sum / count;
  const double q = m.mean_label;
  const double base = (q <= 0 || q >= 1) ? 0.0 : -(q * std::log(q) + (1 - q) * std::log(1 - q));
  m.ne = base > 0 ? m.log_loss / base : std::numeric_limits<double>::quiet_NaN();
  m.calibration = y_sum > 0 ? p_sum / y_sum : std::numeric_limits<double>::quiet_NaN();
  m.accuracy = right / count;
  m.auc = Auc(logits, labels);  // monotone in p: the logits rank the same
  return m;
}

StatusOr<BinaryMetrics> ComputeOverRanks(const ProcessGroup* group, std::span<const float> logits,
                                         std::span<const float> labels) {
  if (group == nullptr || group->world_size() == 1) return ComputeBinaryMetrics(logits, labels);
  const auto n = static_cast<int64_t>(std::min(logits.size(), labels.size()));
  SR_ASSIGN_OR_RETURN(auto counts, AllGatherValues(*group, n));
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  // Logits and labels side by side: one gather.
  Tensor mine = Tensor::Empty(dtype::kFloat32, {n, 2});
  for (int64_t i = 0; i < n; ++i) {
    mine.data<float>()[2 * i] = logits[static_cast<size_t>(i)];
    mine.data<float>()[2 * i + 1] = labels[static_cast<size_t>(i)];
  }
  SR_ASSIGN_OR_RETURN(Tensor all, AllGatherRows(*group, mine, counts));
  std::vector<float> l(static_cast<size_t>(total)), y(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) {
    l[static_cast<size_t>(i)] = all.data<float>()[2 * i];
    y[static_cast<size_t>(i)] = all.data<float>()[2 * i + 1];
  }
  return ComputeBinaryMetrics(l, y);
}

void MetricWindow::Add(std::span<const float> logits, std::span<const float> labels) {
  logits_.insert(logits_.end(), logits.begin(), logits.end());
  labels_.insert(labels_.end(), labels.begin(), labels.end());
  const auto excess = static_cast<int64_t>(logits_.size()) - window_;
  if (excess > 0) {
    logits_.erase(logits_.begin(), logits_.begin() + excess);
    labels_.erase(labels_.begin(), labels_.begin() + excess);
  }
}

}  // namespace shardrec::metrics
