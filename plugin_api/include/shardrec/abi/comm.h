/*
 * shardrec plugin ABI v1 — comm-backend components (SR_KIND_COMM).
 *
 * A communicator joins `world_size` ranks through a rendezvous and runs
 * collectives on DLTensors. Every collective is asynchronous: it returns a
 * request handle to test, wait on (with a timeout) and destroy. Several
 * requests may be outstanding; they complete in the order they were posted
 * on one communicator. A peer that dies or stalls makes wait() fail with
 * SR_DEADLINE_EXCEEDED or SR_UNAVAILABLE and a message naming that rank.
 *
 * Lifetimes (1.1 makes these explicit): a request belongs to the
 * communicator that posted it and must be destroyed before it; a
 * sub-communicator from split() is independent of its parent once created
 * (either may be destroyed first) but shares the parent's store. A
 * communicator is used by one thread at a time; its requests may be tested
 * and waited on from any thread.
 */
#ifndef SHARDREC_ABI_COMM_H_
#define SHARDREC_ABI_COMM_H_

#include "shardrec/abi/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_communicator sr_communicator; /* opaque, plugin-created */
typedef struct sr_request sr_request;           /* opaque, plugin-created */

#define SR_REDUCE_SUM 0
#define SR_REDUCE_MAX 1
#define SR_REDUCE_MIN 2

/* ABI 1.1. The job's key/value store: the host opens the rendezvous named in
 * sr_comm_create_args (a directory, a Redis server, an in-process table) and
 * scopes every key to the job's prefix, so backends only pick key names.
 * Backends meet through it (Gloo's addresses, NCCL's unique id) and may
 * publish liveness in it. Every entry is thread-safe and never unwinds; a
 * failure returns an SR_* code and writes a NUL-terminated reason into `err`
 * (at most err_size bytes, truncated). Borrowed: valid until the
 * communicator created with it, and every one split from it, is destroyed. */
typedef struct sr_kv_store {
  size_t struct_size;
  void* ctx; /* passed back to every entry */
  /* Sets `key` to `size` bytes at `value`, replacing an older value. */
  int32_t (*set)(void* ctx, const char* key, const void* value, size_t size,
                 char* err, size_t err_size);
  /* Waits up to timeout_ms for `key` (0: only looks; < 0: the store's
   * default), then calls sink(sink_ctx, value, size) once before returning
   * SR_OK. SR_DEADLINE_EXCEEDED when the key never appeared. */
  int32_t (*get)(void* ctx, const char* key, int64_t timeout_ms,
                 void (*sink)(void* sink_ctx, const void* value, size_t size),
                 void* sink_ctx, char* err, size_t err_size);
} sr_kv_store;

typedef struct sr_comm_create_args {
  size_t struct_size;
  sr_extension* ext;
  int32_t rank;
  int32_t world_size;
  int32_t local_rank;       /* rank within its host */
  int32_t local_world_size; /* ranks on this host */
  /* Where ranks meet: "file:DIR", "redis:HOST:PORT", "local:NAME" (threads
   * of one process) ... as the backend documents. */
  const char* rendezvous;
  /* Namespace of this job inside the rendezvous: two jobs with different
   * prefixes never meet. */
  const char* prefix;
  int64_t timeout_ms; /* default for rendezvous and for wait() */
  DLDevice device;    /* where the tensors live */
  sr_named_value_list options;
  /* ABI 1.1: the rendezvous opened by the host (see sr_kv_store), for every
   * kind of rendezvous, "local:" included; NULL only from a 1.0 host. */
  const sr_kv_store* store;
} sr_comm_create_args;

/* Arguments of every collective; each collective says which fields it reads.
 * Counts are host arrays of world_size element counts (not bytes); tensors
 * are contiguous, of one dtype, and treated as flat. Per-peer slices are
 * packed in rank order (displacement = prefix sum of counts). */
typedef struct sr_collective_args {
  size_t struct_size;
  sr_extension* ext;
  const DLTensor* send;
  DLTensor* recv;              /* may alias send where the collective allows */
  const int64_t* send_counts;  /* all_to_all_v */
  const int64_t* recv_counts;  /* all_to_all_v, reduce_scatter_v, all_gather_v */
  int32_t reduce_op;           /* SR_REDUCE_*: all_reduce, reduce_scatter_v */
  int32_t root;                /* broadcast */
  void* stream;                /* device backends enqueue here; NULL on CPU */
} sr_collective_args;

typedef struct sr_comm_vtable {
  size_t struct_size;
  sr_extension* ext;
  /* Required. Blocks until every rank joined or timeout_ms passed. */
  sr_status* (*create)(const sr_comm_create_args* args, sr_communicator** out);
  void (*destroy)(sr_communicator* comm);
  /* Required. Splits into sub-communicators, MPI_Comm_split style: ranks
   * with the same color form one, ordered by key. Collective over comm. */
  sr_status* (*split)(sr_communicator* comm, int32_t color, int32_t key,
                      sr_communicator** out);
  /* Collectives. Required unless marked optional. */
  sr_status* (*all_to_all_v)(sr_communicator* comm,
                             const sr_collective_args* args, sr_request** out);
  /* send: world_size slices of recv_counts[r] elements, summed with
   * reduce_op; rank r receives its slice in recv. */
  sr_status* (*reduce_scatter_v)(sr_communicator* comm,
                                 const sr_collective_args* args,
                                 sr_request** out);
  /* send: this rank's recv_counts[rank] elements; recv: every rank's. */
  sr_status* (*all_gather_v)(sr_communicator* comm,
                             const sr_collective_args* args, sr_request** out);
  sr_status* (*all_reduce)(sr_communicator* comm,
                           const sr_collective_args* args, sr_request** out);
  /* recv is the buffer on every rank; root's content is sent. */
  sr_status* (*broadcast)(sr_communicator* comm, const sr_collective_args* args,
                          sr_request** out);
  sr_status* (*barrier)(sr_communicator* comm, sr_request** out);
  /* Requests. test sets *done to 1 when complete (its status, if an error,
   * is returned then); wait blocks up to timeout_ms (< 0: the
   * communicator's default). destroy may be called on an incomplete request
   * only after the communicator failed. */
  sr_status* (*request_test)(sr_request* request, int32_t* done);
  sr_status* (*request_wait)(sr_request* request, int64_t timeout_ms);
  void (*request_destroy)(sr_request* request);
} sr_comm_vtable;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_ABI_COMM_H_ */
