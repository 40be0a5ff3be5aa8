/*
 * shardrec plugin ABI v1 — eviction-policy components (SR_KIND_EVICTION).
 *
 * A policy scores ids competing for the slots of a bounded id space. The host
 * (managed collision, or a row cache) owns the id→slot map, admission and the
 * reset of evicted rows; it keeps each id's lifetime count and last access and
 * hands them over, resident slots first, then the candidates seen in the last
 * window. The policy returns one score per entry (higher = keep). The host
 * keeps the `capacity` highest scores, ties going to the lower index (so
 * residents win ties against candidates), unless the policy chooses itself.
 *
 * A policy that declares the attribute thread_safe may have several handles
 * of it, made with the same options, called from different threads at once
 * (a row cache scores the parts of its sets so); one that does not is called
 * from one thread at a time.
 */
#ifndef SHARDREC_ABI_EVICTION_H_
#define SHARDREC_ABI_EVICTION_H_

#include "shardrec/abi/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_eviction_policy sr_eviction_policy; /* opaque */

/* n = num_resident + num_candidates entries; entries [0, num_resident) are
 * resident slots, the rest are candidate ids. All tensors are on the CPU. */
typedef struct sr_eviction_score_args {
  size_t struct_size;
  sr_extension* ext;
  int64_t now; /* the current iteration */
  size_t num_resident;
  size_t num_candidates;
  /* int64 [n]: lifetime access count (window included) */
  const DLTensor* counts;
  /* int64 [n]: iteration of the last access */
  const DLTensor* last_access;
  /* int64 [n]: accesses in the window that just ended (0 = not seen) */
  const DLTensor* window_counts;
  /* int64 [n, metadata_columns] or NULL: the policy's own per-id columns,
   * declared with the attribute "metadata_columns". Resident rows persist
   * across calls; candidate rows start at 0. The policy may update them. */
  DLTensor* metadata;
  /* float64 [n] out. -inf means "never admit" (a threshold filter). */
  DLTensor* scores;
} sr_eviction_score_args;

typedef struct sr_eviction_select_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_eviction_score_args* scored; /* scores already filled */
  size_t capacity;                      /* entries that may keep a slot */
  DLTensor* keep;                       /* uint8 [n] out: 1 = keeps a slot */
} sr_eviction_select_args;

typedef struct sr_eviction_vtable {
  size_t struct_size;
  sr_extension* ext;
  /* Required. Options such as decay_exponent arrive as strings. */
  sr_status* (*create)(sr_named_value_list options, sr_eviction_policy** out);
  void (*destroy)(sr_eviction_policy* policy);
  /* Required. Deterministic: equal inputs give equal scores. */
  sr_status* (*score)(sr_eviction_policy* policy,
                      const sr_eviction_score_args* args);
  /* Optional: NULL means keep the `capacity` highest scores (stable), never
   * an entry scored -inf. */
  sr_status* (*select)(sr_eviction_policy* policy,
                       const sr_eviction_select_args* args);
} sr_eviction_vtable;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_ABI_EVICTION_H_ */
