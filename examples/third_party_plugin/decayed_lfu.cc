// A third-party eviction policy: "decayed LFU". Each access counts fully when
// it happens and loses half its weight every `half_life` iterations, so a
// once-hot id fades instead of squatting on its slot forever (plain LFU) and
// a single recent hit does not outrank a steady id (plain LRU).
//
//   score = window_count + (count - window_count) * 0.5 ^ ((now - last_access) / half_life)
//
// Options: half_life (iterations, > 0, default 100).
#include <cmath>

#include <shardrec/sdk/plugin.hpp>

namespace {

namespace sdk = shardrec::sdk;

class DecayedLfu {
 public:
  explicit DecayedLfu(sdk::Options& options) : half_life_(options.GetDouble("half_life", 100.0)) {
    if (!(half_life_ > 0.0) || !std::isfinite(half_life_)) {
      throw sdk::InvalidArgument("half_life must be a finite number > 0");
    }
  }

  void Score(const sr_eviction_score_args& a) const {
    const int64_t n = static_cast<int64_t>(a.num_resident + a.num_candidates);
    sdk::TensorView<const int64_t, 1> counts(a.counts, "counts", {n});
    sdk::TensorView<const int64_t, 1> last(a.last_access, "last_access", {n});
    sdk::TensorView<const int64_t, 1> window(a.window_counts, "window_counts", {n});
    sdk::TensorView<double, 1> scores(a.scores, "scores", {n});
    for (int64_t i = 0; i < n; ++i) {
      const double age = static_cast<double>(a.now - last(i));
      const double older = static_cast<double>(counts(i) - window(i));
      scores(i) = static_cast<double>(window(i)) + older * std::exp2(-age / half_life_);
    }
  }

 private:
  double half_life_;
};

const sr_named_value kAttributes[] = {
    sdk::IntAttr("metadata_columns", 0),
    sdk::BoolAttr("deterministic", true),
    sdk::BoolAttr("thread_safe", true),
};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_EVICTION, "decayed_lfu", "1.0",
                   "LFU whose counts halve every half_life iterations",
                   &sdk::EvictionVtable<DecayedLfu>(), sdk::List(kAttributes))};

}  // namespace

SHARDREC_DEFINE_PLUGIN("decayed_lfu", "1.0", kComponents)
