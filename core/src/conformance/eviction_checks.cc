// Conformance checks for eviction policies: creation and option validation,
// the score contract (one finite-or-minus-infinity score per entry, nothing
// written past the end, deterministic, bad tensors refused without writing)
// and, when present, select's capacity bound; for a policy that declares
// `incremental`, the promise itself (the order of idle entries the same at
// any `now`, no access lowering a score, and each entry scored on its own).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "recorder.h"
#include "shardrec/core/dl_view.h"
#include "shardrec/core/plugin_objects.h"

namespace shardrec::conformance {
namespace {

constexpr double kGuard = -12345.678;

// A small history: 5 resident slots and 4 candidates, with ties.
struct History {
  size_t resident = 5, candidates = 4;
  std::vector<int64_t> counts{7, 3, 3, 1, 12, 2, 3, 1, 9};
  std::vector<int64_t> last{10, 4, 4, 9, 1, 10, 10, 8, 10};
  std::vector<int64_t> window{0, 1, 1, 0, 0, 2, 3, 1, 9};
  size_t n() const { return resident + candidates; }
};

// Score arguments over a History: views of its vectors and of `scores`.
struct ScoreCall {
  ScoreCall(const History& h, std::vector<double>& scores, int64_t counts_len = -1)
      : n(static_cast<int64_t>(h.n())),
        counts(h.counts.data(), {counts_len < 0 ? n : counts_len}),
        last(h.last.data(), {n}),
        window(h.window.data(), {n}),
        out(scores.data(), {n}) {
    args.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
    args.now = 11;
    args.num_resident = h.resident;
    args.num_candidates = h.candidates;
    args.counts = counts.get();
    args.last_access = last.get();
    args.window_counts = window.get();
    args.metadata = nullptr;
    args.scores = out.get();
  }
  int64_t n;
  DLView counts, last, window, out;
  sr_eviction_score_args args{};
};

Status Score(const EvictionPolicy& p, const History& h, std::vector<double>& scores,
             DLDataType scores_dtype = {kDLFloat, 64, 1}, int64_t counts_len = -1, int64_t now = 11) {
  ScoreCall call(h, scores, counts_len);
  call.out->dtype = scores_dtype;
  call.args.now = now;
  return p.Score(call.args);
}

// The `incremental` promise (managed collision scores holders once, at
// now = 2^52, and compares those keys across rounds).
void CheckIncremental(const EvictionPolicy& policy, const History& h, Recorder& rec) {
  std::vector<double> at_11(h.n()), later(h.n()), key_time(h.n());
  Status st = Score(policy, h, at_11);
  if (st.ok()) st = Score(policy, h, later, {kDLFloat, 64, 1}, -1, 1000);
  if (st.ok()) st = Score(policy, h, key_time, {kDLFloat, 64, 1}, -1, int64_t{1} << 52);
  if (!rec.ExpectOk(st, "incremental: score at now = 11, 1000 and 2^52")) return;
  auto sign = [](double a, double b) { return (a > b) - (a < b); };
  std::string moved;
  for (size_t i = 0; i < h.n() && moved.empty(); ++i) {
    for (size_t j = 0; j < h.n() && moved.empty(); ++j) {
      const int s = sign(at_11[i], at_11[j]);
      if (s != sign(later[i], later[j]) || s != sign(key_time[i], key_time[j])) {
        moved = "entries " + std::to_string(i) + " and " + std::to_string(j) + " change order as now advances";
      }
    }
  }
  rec.Expect(moved.empty(), "incremental: idle entries keep their order at any now", moved);
  // The incremental round scores the holders it updated and the window's
  // candidates in calls of their own: each entry alone must score as it
  // does among the others.
  std::string alone;
  for (size_t i = 0; i < h.n() && st.ok() && alone.empty(); ++i) {
    History one;
    one.resident = i < h.resident ? 1 : 0;
    one.candidates = 1 - one.resident;
    one.counts = {h.counts[i]};
    one.last = {h.last[i]};
    one.window = {h.window[i]};
    std::vector<double> single(1);
    st = Score(policy, one, single, {kDLFloat, 64, 1}, -1, int64_t{1} << 52);
    if (st.ok() && !(single[0] == key_time[i])) {
      alone = "entry " + std::to_string(i) + " scores " + std::to_string(single[0]) + " alone and " +
              std::to_string(key_time[i]) + " among the others";
    }
  }
  rec.Expect(st.ok() && alone.empty(), "incremental: an entry's score depends on that entry alone",
             st.ok() ? alone : st.ToString());
  History accessed = h;
  for (size_t i = 0; i < h.n(); ++i) {
    accessed.counts[i] += 1;
    accessed.last[i] = 11;
  }
  std::vector<double> after(h.n());
  st = Score(policy, accessed, after);
  std::string lowered;
  for (size_t i = 0; i < h.n() && st.ok() && lowered.empty(); ++i) {
    if (after[i] < at_11[i]) lowered = "entry " + std::to_string(i) + ": an access lowered its score";
  }
  rec.Expect(st.ok() && lowered.empty(), "incremental: an access never lowers a score",
             st.ok() ? lowered : st.ToString());
}

}  // namespace

void CheckEviction(const ComponentRef& ref, const OptionList& options, Recorder& rec) {
  auto bad = EvictionPolicy::Create(ref, UnknownOption());
  rec.ExpectError(bad.status(), SR_INVALID_ARGUMENT, "create refuses an unknown option");

  auto created = EvictionPolicy::Create(ref, options);
  if (!rec.ExpectOk(created.status(), "create with the given options")) return;
  const EvictionPolicy& policy = created.value();

  if (ref.Int64Attribute("metadata_columns").value_or(0) > 0) {
    rec.Skip("score contract", "policies with their own metadata columns need a metadata tensor; "
                               "the kit checks metadata-free policies only");
    return;
  }

  History h;
  // Empty input: nothing to score, and no failure.
  {
    History empty;
    empty.resident = empty.candidates = 0;
    std::vector<double> s(1, kGuard);
    Status st = Score(policy, empty, s);
    rec.Expect(st.ok() && s[0] == kGuard, "score accepts zero entries and writes nothing",
               st.ok() ? "wrote past the end" : st.ToString());
  }

  std::vector<double> first(h.n() + 1, kGuard);
  Status st = Score(policy, h, first);
  if (!rec.ExpectOk(st, "score 5 resident + 4 candidate entries")) return;
  bool finite = true;
  for (size_t i = 0; i < h.n(); ++i) {
    finite = finite && !std::isnan(first[i]) && first[i] != std::numeric_limits<double>::infinity();
  }
  rec.Expect(finite, "every score is a number (finite or -inf)", "a score is NaN or +inf");
  rec.Expect(first[h.n()] == kGuard, "nothing written past the end of scores",
             "the guard value after the last score changed");

  std::vector<double> second(h.n() + 1, kGuard);
  st = Score(policy, h, second);
  rec.Expect(st.ok() && std::memcmp(first.data(), second.data(), h.n() * sizeof(double)) == 0,
             "deterministic: equal inputs give equal scores",
             st.ok() ? "two calls gave different scores" : st.ToString());

  std::vector<double> untouched(h.n() + 1, kGuard);
  st = Score(policy, h, untouched, DLDataType{kDLFloat, 32, 1});
  rec.ExpectError(st, SR_INVALID_ARGUMENT, "score refuses a float32 scores tensor");
  st = Score(policy, h, untouched, DLDataType{kDLFloat, 64, 1}, static_cast<int64_t>(h.n()) - 1);
  rec.ExpectError(st, SR_INVALID_ARGUMENT, "score refuses counts of the wrong length");
  bool clean = true;
  for (double v : untouched) clean = clean && v == kGuard;
  rec.Expect(clean, "a refused call writes nothing", "scores changed by a refused call");

  if (ref.BoolAttribute("incremental").value_or(false)) CheckIncremental(policy, h, rec);

  if (!policy.HasSelect()) {
    rec.Pass("select absent: the host keeps the highest scores");
    return;
  }
  std::vector<uint8_t> keep(h.n() + 1, 7);
  ScoreCall scored(h, first);
  DLView keep_view(keep.data(), {static_cast<int64_t>(h.n())});
  sr_eviction_select_args sel{};
  sel.struct_size = SR_STRUCT_SIZE(sr_eviction_select_args, keep);
  sel.scored = &scored.args;
  sel.capacity = h.resident;
  sel.keep = keep_view.get();
  st = policy.Select(sel);
  if (!rec.ExpectOk(st, "select within capacity")) return;
  size_t kept = 0;
  bool binary = true;
  for (size_t i = 0; i < h.n(); ++i) {
    kept += keep[i] == 1;
    binary = binary && keep[i] <= 1;
  }
  rec.Expect(binary && kept <= h.resident && keep[h.n()] == 7,
             "select keeps at most capacity entries, writes 0/1, nothing past the end",
             "kept " + std::to_string(kept) + " of capacity " + std::to_string(h.resident));
}

}  // namespace shardrec::conformance
