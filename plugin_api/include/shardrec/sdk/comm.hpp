// shardrec plugin SDK — the comm-backend adapter: turns a C++ class into an
// sr_comm_vtable.
//
//   class MyComm {
//    public:
//     explicit MyComm(const sr_comm_create_args& args);   // joins the job
//     int rank() const; int world_size() const;
//     DLDeviceType device_type() const;                    // where tensors live
//     std::unique_ptr<MyComm> Split(int32_t color, int32_t key);
//     std::shared_ptr<sdk::Request> Post(sdk::Collective c);
//   };
//   static const sr_component kComponents[] = {sdk::Component(
//       SR_KIND_COMM, "mine", "1.0", "my transport", &sdk::CommVtable<MyComm>())};
//
// Each collective entry checks its arguments with ParseCollective (so Post
// sees counts copied and validated, and never a NULL or a short buffer),
// and hands the request back as an opaque handle. OrderedWorker
// (sdk/comm_request.hpp) runs collectives in order on a thread; KvStore and
// PeerMonitor (sdk/kv_store.hpp) reach the host's rendezvous store.
#ifndef SHARDREC_SDK_COMM_HPP_
#define SHARDREC_SDK_COMM_HPP_

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "shardrec/sdk/collective.hpp"
#include "shardrec/sdk/comm_request.hpp"
#include "shardrec/sdk/kv_store.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::sdk {

// The common checks of sr_comm_create_args (rank inside the world, local
// rank inside the host, a positive timeout) with messages naming the field.
inline void CheckCreateArgs(const sr_comm_create_args& a) {
  if (a.world_size < 1) throw InvalidArgument("world_size must be at least 1, got " + std::to_string(a.world_size));
  if (a.rank < 0 || a.rank >= a.world_size) {
    throw InvalidArgument("rank " + std::to_string(a.rank) + " is outside [0, " + std::to_string(a.world_size) + ")");
  }
  if (a.local_world_size < 1 || a.local_rank < 0 || a.local_rank >= a.local_world_size) {
    throw InvalidArgument("local rank " + std::to_string(a.local_rank) + " is outside [0, local_world_size " +
                          std::to_string(a.local_world_size) + ")");
  }
  if (a.timeout_ms <= 0) throw InvalidArgument("timeout_ms must be positive, got " + std::to_string(a.timeout_ms));
}

// The host's store when it gave one (ABI >= 1.1), else an invalid KvStore.
inline KvStore StoreOf(const sr_comm_create_args& a) {
  return a.struct_size >= SR_STRUCT_SIZE(sr_comm_create_args, store) ? KvStore(a.store) : KvStore();
}

// 0, 1, ..., n-1: the job's ranks of a communicator that is the whole job.
inline std::vector<int> IdentityRanks(int n) {
  std::vector<int> r(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) r[static_cast<size_t>(i)] = i;
  return r;
}

// The sub-communicator this rank lands in when every rank q of a
// communicator splits with (colors[q], keys[q]), MPI_Comm_split style: the
// ranks of this rank's color ordered by (key, rank). `global_ranks` maps the
// communicator's ranks to the job's; the result maps the sub-communicator's.
struct SplitGroup {
  int rank = 0;                  // this rank's rank in the sub-communicator
  std::vector<int> global_ranks;  // the job's rank of each member
};

inline SplitGroup SplitMembers(const std::vector<int64_t>& colors, const std::vector<int64_t>& keys, int my_rank,
                               const std::vector<int>& global_ranks) {
  std::vector<std::pair<int64_t, int>> members;  // (key, rank)
  for (size_t q = 0; q < colors.size(); ++q) {
    if (colors[q] == colors[my_rank]) members.emplace_back(keys[q], static_cast<int>(q));
  }
  std::sort(members.begin(), members.end());
  SplitGroup g;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i].second == my_rank) g.rank = static_cast<int>(i);
    g.global_ranks.push_back(global_ranks[members[i].second]);
  }
  return g;
}

namespace detail {
struct RequestBox {
  std::shared_ptr<Request> request;
};

template <class T>
sr_status* PostEntry(CollectiveOp op, sr_communicator* c, const sr_collective_args* a, sr_request** out) {
  return Guard([&] {
    if (c == nullptr || out == nullptr) throw InvalidArgument(std::string(CollectiveName(op)) + ": NULL comm or out");
    *out = nullptr;
    T* comm = reinterpret_cast<T*>(c);
    Collective parsed = ParseCollective(op, a, comm->rank(), comm->world_size(), comm->device_type());
    std::shared_ptr<Request> r = comm->Post(std::move(parsed));
    *out = reinterpret_cast<sr_request*>(new RequestBox{std::move(r)});
  });
}
}  // namespace detail

template <class T>
const sr_comm_vtable& CommVtable() {
  static const sr_comm_vtable vt = [] {
    sr_comm_vtable v{};
    v.struct_size = SR_STRUCT_SIZE(sr_comm_vtable, request_destroy);
    v.create = [](const sr_comm_create_args* a, sr_communicator** out) {
      return Guard([&] {
        if (a == nullptr || out == nullptr) throw InvalidArgument("create: NULL args");
        CheckCreateArgs(*a);
        *out = reinterpret_cast<sr_communicator*>(new T(*a));
      });
    };
    v.destroy = [](sr_communicator* c) { delete reinterpret_cast<T*>(c); };
    v.split = [](sr_communicator* c, int32_t color, int32_t key, sr_communicator** out) {
      return Guard([&] {
        if (c == nullptr || out == nullptr) throw InvalidArgument("split: NULL comm or out");
        if (color < 0) throw InvalidArgument("split: color must be non-negative, got " + std::to_string(color));
        *out = reinterpret_cast<sr_communicator*>(reinterpret_cast<T*>(c)->Split(color, key).release());
      });
    };
    v.all_to_all_v = [](sr_communicator* c, const sr_collective_args* a, sr_request** out) {
      return detail::PostEntry<T>(CollectiveOp::kAllToAllV, c, a, out);
    };
    v.reduce_scatter_v = [](sr_communicator* c, const sr_collective_args* a, sr_request** out) {
      return detail::PostEntry<T>(CollectiveOp::kReduceScatterV, c, a, out);
    };
    v.all_gather_v = [](sr_communicator* c, const sr_collective_args* a, sr_request** out) {
      return detail::PostEntry<T>(CollectiveOp::kAllGatherV, c, a, out);
    };
    v.all_reduce = [](sr_communicator* c, const sr_collective_args* a, sr_request** out) {
      return detail::PostEntry<T>(CollectiveOp::kAllReduce, c, a, out);
    };
    v.broadcast = [](sr_communicator* c, const sr_collective_args* a, sr_request** out) {
      return detail::PostEntry<T>(CollectiveOp::kBroadcast, c, a, out);
    };
    v.barrier = [](sr_communicator* c, sr_request** out) {
      return detail::PostEntry<T>(CollectiveOp::kBarrier, c, nullptr, out);
    };
    v.request_test = [](sr_request* r, int32_t* done) {
      return Guard([&] {
        if (r == nullptr || done == nullptr) throw InvalidArgument("request_test: NULL request or done");
        *done = 0;
        *done = reinterpret_cast<detail::RequestBox*>(r)->request->Test() ? 1 : 0;
      });
    };
    v.request_wait = [](sr_request* r, int64_t timeout_ms) {
      return Guard([&] {
        if (r == nullptr) throw InvalidArgument("request_wait: NULL request");
        reinterpret_cast<detail::RequestBox*>(r)->request->Wait(timeout_ms);
      });
    };
    v.request_destroy = [](sr_request* r) { delete reinterpret_cast<detail::RequestBox*>(r); };
    return v;
  }();
  return vt;
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_COMM_HPP_
