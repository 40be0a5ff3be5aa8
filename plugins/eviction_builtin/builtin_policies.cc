// libshardrec_eviction_builtin.so: TorchRec's managed-collision eviction
// scores as three components of one library (lru, lfu, distance_lfu).
//
// With age = now - last_access + 1 and d = decay_exponent (default 1.0):
//   lfu:          score = count                 (lifetime, window included)
//   lru:          score = -(age ^ d)
//   distance_lfu: score = count / (age ^ d)
// Higher keeps. The host keeps the top `capacity` scores, ties to the lower
// index, so residents win ties against candidates, as in TorchRec's stable
// argsort over [slots ‖ new ids]. Threshold filters and admission details
// belong to the managed-collision issue.
#include <cmath>

#include "shardrec/sdk/plugin.hpp"

namespace {

using shardrec::sdk::InvalidArgument;
using shardrec::sdk::Options;
using shardrec::sdk::TensorView;

enum class Kind { kLru, kLfu, kDistanceLfu };

template <Kind K>
class Policy {
 public:
  explicit Policy(Options& options) {
    if constexpr (K != Kind::kLfu) {
      decay_ = options.GetDouble("decay_exponent", 1.0);
      if (!(decay_ >= 0.0) || !std::isfinite(decay_)) {
        throw InvalidArgument("decay_exponent must be a finite number >= 0");
      }
    }
  }

  void Score(const sr_eviction_score_args& a) const {
    const int64_t n = static_cast<int64_t>(a.num_resident + a.num_candidates);
    // Validate every argument before writing anything.
    TensorView<const int64_t, 1> counts(a.counts, "counts", {n});
    TensorView<const int64_t, 1> last(a.last_access, "last_access", {n});
    TensorView<double, 1> scores(a.scores, "scores", {n});
    for (int64_t i = 0; i < n; ++i) {
      if (last(i) > a.now) {
        throw InvalidArgument("last_access[" + std::to_string(i) + "] = " +
                              std::to_string(last(i)) + " is after now = " +
                              std::to_string(a.now));
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const double age = static_cast<double>(a.now - last(i) + 1);
      const double decayed = decay_ == 1.0 ? age : std::pow(age, decay_);
      if constexpr (K == Kind::kLfu) {
        scores(i) = static_cast<double>(counts(i));
      } else if constexpr (K == Kind::kLru) {
        scores(i) = -decayed;
      } else {
        scores(i) = static_cast<double>(counts(i)) / decayed;
      }
    }
  }

 private:
  double decay_ = 1.0;
};

const char* const kMetadata[] = {"count", "last_access"};
// incremental: the order of two entries that are not accessed does not
// change as `now` advances, and an access never lowers a score. True of
// lru (order by last access) and lfu (by count); not of distance_lfu,
// whose count / age can reorder two entries as both age.
const sr_named_value kIncrementalAttributes[] = {
    shardrec::sdk::StringListAttr("metadata", kMetadata, 2),
    shardrec::sdk::IntAttr("metadata_columns", 0),
    shardrec::sdk::BoolAttr("deterministic", true),
    shardrec::sdk::BoolAttr("thread_safe", true),
    shardrec::sdk::BoolAttr("incremental", true),
};
const sr_named_value kAttributes[] = {
    shardrec::sdk::StringListAttr("metadata", kMetadata, 2),
    shardrec::sdk::IntAttr("metadata_columns", 0),
    shardrec::sdk::BoolAttr("deterministic", true),
    shardrec::sdk::BoolAttr("thread_safe", true),
    shardrec::sdk::BoolAttr("incremental", false),
};

const sr_component kComponents[] = {
    shardrec::sdk::Component(SR_KIND_EVICTION, "lru", "1.0",
                             "least recently used: -(now - last_access + 1)^decay_exponent",
                             &shardrec::sdk::EvictionVtable<Policy<Kind::kLru>>(),
                             shardrec::sdk::List(kIncrementalAttributes), /*priority=*/10),
    shardrec::sdk::Component(SR_KIND_EVICTION, "lfu", "1.0",
                             "least frequently used: lifetime access count",
                             &shardrec::sdk::EvictionVtable<Policy<Kind::kLfu>>(),
                             shardrec::sdk::List(kIncrementalAttributes)),
    shardrec::sdk::Component(SR_KIND_EVICTION, "distance_lfu", "1.0",
                             "count / (now - last_access + 1)^decay_exponent",
                             &shardrec::sdk::EvictionVtable<Policy<Kind::kDistanceLfu>>(),
                             shardrec::sdk::List(kAttributes)),
};

}  // namespace

SHARDREC_DEFINE_PLUGIN("builtin", "0.1.0", kComponents)
