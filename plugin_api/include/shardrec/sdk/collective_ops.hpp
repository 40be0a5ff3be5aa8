// shardrec plugin SDK — the collectives and reduce ops by name. Free of
// the SDK's status machinery (like dtype.hpp), so the host names them with
// the same strings as the backends.
#ifndef SHARDREC_SDK_COLLECTIVE_OPS_HPP_
#define SHARDREC_SDK_COLLECTIVE_OPS_HPP_

#include <cstdint>

#include "shardrec/abi/comm.h"

namespace shardrec::sdk {

enum class CollectiveOp : int32_t {
  kAllToAllV,
  kReduceScatterV,
  kAllGatherV,
  kAllReduce,
  kBroadcast,
  kBarrier,
};

inline const char* CollectiveName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllToAllV: return "all_to_all_v";
    case CollectiveOp::kReduceScatterV: return "reduce_scatter_v";
    case CollectiveOp::kAllGatherV: return "all_gather_v";
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kBarrier: return "barrier";
  }
  return "?";
}

inline const char* ReduceOpName(int32_t op) {
  switch (op) {
    case SR_REDUCE_SUM: return "sum";
    case SR_REDUCE_MAX: return "max";
    case SR_REDUCE_MIN: return "min";
  }
  return "?";
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_COLLECTIVE_OPS_HPP_
