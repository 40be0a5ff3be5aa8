// The `local` comm backend: ranks are threads of one process. Each rank
// reads its peers' buffers directly, so a collective copies every byte once
// (the copy it needs), with every rank copying its own share in parallel:
//   all_to_all_v      rank r pulls slice r of every peer's send
//   all_gather_v      rank r pulls every peer's send
//   reduce_scatter_v  rank r reduces slice r of every peer's send, in rank order
//   all_reduce        rank r reduces chunk r of every send into its recv, then
//                     pulls every other chunk from its owner's recv
//   broadcast         every rank pulls root's buffer
// Ranks see each other's arguments, so counts, dtypes, roots and reduce
// ops that disagree are caught on every rank with the same message.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "local_world.h"
#include "shardrec/sdk/comm.hpp"

namespace shardrec::local_comm {
namespace {

using sdk::Collective;
using sdk::CollectiveOp;

std::string WorldName(const sr_comm_create_args& a) {
  const std::string rdzv = a.rendezvous ? a.rendezvous : "";
  if (rdzv.rfind("local:", 0) != 0 || rdzv.size() == 6) {
    throw sdk::InvalidArgument("comm local joins the threads of one process; its rendezvous is local:NAME, got '" +
                               rdzv + "'");
  }
  return std::string(a.prefix ? a.prefix : "") + "/" + rdzv.substr(6);
}

class LocalComm {
 public:
  explicit LocalComm(const sr_comm_create_args& a)
      : rank_(a.rank), timeout_ms_(a.timeout_ms), global_ranks_(sdk::IdentityRanks(a.world_size)) {
    sdk::Options options(a.options, "comm local");
    options.Finish();
    world_ = LocalWorld::Join(WorldName(a), a.world_size, a.rank, a.timeout_ms);
    SizeScratch();
  }
  LocalComm(std::shared_ptr<LocalWorld> world, int rank, int64_t timeout_ms, std::vector<int> global_ranks)
      : rank_(rank), timeout_ms_(timeout_ms), global_ranks_(std::move(global_ranks)), world_(std::move(world)) {
    SizeScratch();
  }
  ~LocalComm() {
    worker_.reset();  // finishes the running collective, cancels the rest
    world_->Leave(rank_);
  }

  int rank() const { return rank_; }
  int world_size() const { return world_->size(); }
  DLDeviceType device_type() const { return kDLCPU; }

  std::shared_ptr<sdk::Request> Post(Collective c) {
    sdk::SealCounts(c, rank_);  // peers check agreement against the digests: O(world) each
    const int64_t seq = ++posted_;
    const char* op = sdk::CollectiveName(c.op);
    return worker_->Submit(op, seq, [this, seq, c = std::move(c)] { Run(seq, c); },
                           [this, seq] { return world_->DescribeLaggards(seq, global_ranks_); });
  }

  std::unique_ptr<LocalComm> Split(int32_t color, int32_t key) {
    const int64_t seq = ++posted_;
    const int64_t split_index = ++splits_;
    // Shared with the job, which may outlive this call when Wait times out.
    auto result = std::make_shared<std::unique_ptr<LocalComm>>();
    auto job = worker_->Submit(
        "split", seq,
        [this, seq, split_index, color, key, result] {
          Collective marker;  // barrier-shaped, so peers check they all split
          LocalWorld::Slot& mine = world_->slot(rank_);
          mine.color = color;
          mine.key = key;
          PublishAndCheck(seq, marker, "split");
          std::vector<int64_t> colors(world_size()), keys(world_size());
          for (int q = 0; q < world_size(); ++q) {
            colors[q] = world_->slot(q).color;
            keys[q] = world_->slot(q).key;
          }
          Phase(seq, 2, "split");
          sdk::SplitGroup group = sdk::SplitMembers(colors, keys, rank_, global_ranks_);
          const std::string name =
              world_->name() + "/split" + std::to_string(split_index) + "/color" + std::to_string(color);
          auto sub = LocalWorld::Join(name, static_cast<int>(group.global_ranks.size()), group.rank, timeout_ms_);
          *result = std::make_unique<LocalComm>(std::move(sub), group.rank, timeout_ms_, std::move(group.global_ranks));
        },
        [this, seq] { return world_->DescribeLaggards(seq, global_ranks_); });
    job->Wait(2 * timeout_ms_);  // two waits inside: the peers' split and their join
    return std::move(*result);
  }

 private:
  // Per-collective buffers, sized once (the worker runs one collective at a time).
  void SizeScratch() {
    ops_.resize(world_size());
    srcs_.resize(world_size());
  }

  void Phase(int64_t seq, int k, const char* what) {
    world_->Arrive(rank_, seq * LocalWorld::kPhasesPerCollective + k, seq, what, timeout_ms_, global_ranks_);
  }

  // Publishes `c`, waits until every rank has, and checks that the ranks'
  // arguments agree. Every rank checks the same published arguments, so
  // every rank throws the same error, and only after phase 2: a rank must
  // not leave (and free its arguments) while peers still read them.
  void PublishAndCheck(int64_t seq, const Collective& c, const char* what) {
    world_->slot(rank_).op = &c;
    Phase(seq, 0, what);
    for (int q = 0; q < world_size(); ++q) ops_[q] = world_->slot(q).op;
    try {
      sdk::CheckAgreement(ops_, global_ranks_);
    } catch (const sdk::Error&) {
      Phase(seq, 2, what);
      throw;
    }
  }

  void Run(int64_t seq, const Collective& c) {
    const char* what = sdk::CollectiveName(c.op);
    PublishAndCheck(seq, c, what);
    const int n = world_size();
    auto peer = [&](int q) -> const Collective& { return *world_->slot(q).op; };
    switch (c.op) {
      case CollectiveOp::kAllToAllV:
        for (int q = 0; q < n; ++q) {
          std::memcpy(c.recv + c.Bytes(c.recv_displs[q]), peer(q).send + c.Bytes(peer(q).send_displs[rank_]),
                      c.Bytes(c.recv_counts[q]));
        }
        break;
      case CollectiveOp::kAllGatherV:
        for (int q = 0; q < n; ++q) {
          std::memcpy(c.recv + c.Bytes(c.recv_displs[q]), peer(q).send, c.Bytes(c.recv_counts[q]));
        }
        break;
      case CollectiveOp::kReduceScatterV: {
        for (int q = 0; q < n; ++q) srcs_[q] = peer(q).send + c.Bytes(c.recv_displs[rank_]);
        sdk::ReduceMany(c.dtype, c.reduce_op, c.recv, srcs_.data(), n, c.recv_counts[rank_]);
        break;
      }
      case CollectiveOp::kAllReduce: {
        auto lo = [&](int q) { return c.recv_numel * q / n; };
        for (int q = 0; q < n; ++q) srcs_[q] = peer(q).send + c.Bytes(lo(rank_));
        sdk::ReduceMany(c.dtype, c.reduce_op, c.recv + c.Bytes(lo(rank_)), srcs_.data(), n, lo(rank_ + 1) - lo(rank_));
        Phase(seq, 1, what);  // every chunk is reduced in its owner's recv
        for (int q = 0; q < n; ++q) {
          if (q != rank_) std::memcpy(c.recv + c.Bytes(lo(q)), peer(q).recv + c.Bytes(lo(q)), c.Bytes(lo(q + 1) - lo(q)));
        }
        break;
      }
      case CollectiveOp::kBroadcast:
        if (rank_ != c.root) std::memcpy(c.recv, peer(c.root).recv, c.Bytes(c.recv_numel));
        break;
      case CollectiveOp::kBarrier: break;
    }
    Phase(seq, 2, what);  // nobody reads this rank's buffers any more
  }

  const int rank_;
  const int64_t timeout_ms_;
  std::vector<int> global_ranks_;
  std::shared_ptr<LocalWorld> world_;
  int64_t posted_ = 0, splits_ = 0;
  std::vector<const Collective*> ops_;
  std::vector<const void*> srcs_;
  std::unique_ptr<sdk::OrderedWorker> worker_ = std::make_unique<sdk::OrderedWorker>(timeout_ms_);
};

const sr_named_value kAttributes[] = {
    sdk::StringAttr("transport", "shared memory between threads of one process"),
    sdk::StringAttr("rendezvous", "local:NAME"),
    sdk::StringListAttr("reduce_dtypes", sdk::kReducibleDTypeNames, std::size(sdk::kReducibleDTypeNames)),
    sdk::BoolAttr("checks_arguments_across_ranks", true),
};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_COMM, "local", "1.0",
                   "ranks as threads of one process; collectives read peers' buffers directly",
                   &sdk::CommVtable<LocalComm>(), sdk::List(kAttributes), 10),
};

}  // namespace
}  // namespace shardrec::local_comm

SHARDREC_DEFINE_PLUGIN("local", "1.0", shardrec::local_comm::kComponents)
