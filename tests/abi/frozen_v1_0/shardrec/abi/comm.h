/*
 * shardrec plugin ABI v1 — comm-backend components (SR_KIND_COMM).
 *
 * A communicator joins `world_size` ranks through a rendezvous and runs
 * collectives on DLTensors. Every collective is asynchronous: it returns a
 * request handle to test, wait on (with a timeout) and destroy. Several
 * requests may be outstanding; they complete in the order they were posted
 * on one communicator. A peer that dies or stalls makes wait() fail with
 * SR_DEADLINE_EXCEEDED or SR_UNAVAILABLE and a message naming that rank.
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
