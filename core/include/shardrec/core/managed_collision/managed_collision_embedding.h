// ManagedCollisionEmbeddingBagCollection and ManagedCollisionEmbedding-
// Collection (TorchRec's torchrec.modules.mc_embedding_modules), unsharded
// and sharded: a ManagedCollisionCollection in front of an embedding
// module. A forward remaps the raw ids (profiling them when training),
// resets the rows of ids evicted by a round (weights as at creation,
// optimizer state zero, through the kernel plugin), then looks the rows
// up. Backward uses the remapped input of the last forward.
//
//   auto mc = ManagedCollisionEmbeddingBagCollection::Create(registry, tables, managed, options);
//   auto pooled = mc->Forward(kjt, /*training=*/true);
//   mc->Backward(grad, step);
#pragma once

#include <chrono>
#include <concepts>
#include <limits>
#include <map>
#include <optional>

#include "shardrec/core/managed_collision/managed_collision_collection.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/embedding_collection.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_collection.h"

namespace shardrec {

namespace mc_detail {
inline Status ResetRows(const EmbeddingTables& tables, const std::string& name, std::span<const int64_t> rows) {
  SR_ASSIGN_OR_RETURN(const int32_t t, tables.TableIndex(name));
  return tables.ResetRows(t, rows);
}
inline Status ResetRows(const ShardedTables& tables, const std::string& name, std::span<const int64_t> rows) {
  return tables.ResetRows(name, rows);
}
}  // namespace mc_detail

// Embedding: EmbeddingBagCollection, EmbeddingCollection or their sharded
// forms; Collection: the matching (sharded) ManagedCollisionCollection.
template <class Embedding, class Collection>
class ManagedCollisionEmbedding {
  // Sharded modules whose input dist takes the collection's routes.
  static constexpr bool kRoutes =
      requires(const Embedding& e, const KeyedJaggedTensor& k, const IdRoutes* r) { e.DistributeInput(k, nullptr, r); };

 public:
  ManagedCollisionEmbedding(Embedding embedding, Collection collection)
      : embedding_(std::move(embedding)), collection_(std::move(collection)) {}

  // Remap, reset the evicted rows, look up. remapped: the remapped
  // features (TorchRec's return_remapped_features). Collective when sharded.
  auto Forward(const KeyedJaggedTensor& input, bool training = true, int64_t* invalid_ids = nullptr)
      -> decltype(std::declval<Embedding&>().Forward(input, invalid_ids)) {
    if constexpr (kRoutes) {
      SR_ASSIGN_OR_RETURN(Prepared prepared, PrepareStep(input, training, nullptr));
      return Forward(std::move(prepared), invalid_ids);
    } else {
      const auto start = std::chrono::steady_clock::now();
      SR_ASSIGN_OR_RETURN(KeyedJaggedTensor remapped, collection_.Forward(input, training));
      if (training) {
        // Unsharded Evict returns the map, sharded a StatusOr of it.
        StatusOr<std::map<std::string, std::vector<int64_t>>> evicted = collection_.Evict();
        if (!evicted.ok()) return evicted.status();
        for (const auto& [table, rows] : *evicted) {
          SR_RETURN_IF_ERROR(mc_detail::ResetRows(embedding_.tables(), table, rows));
        }
      }
      last_ = std::move(remapped);
      remap_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      return embedding_.Forward(*last_, invalid_ids);
    }
  }

  // A train pipeline's halves of a sharded, training Forward. Prepare
  // remaps the raw ids, runs the embedding's input dist and takes the
  // round's evictions, all on `via` (a Duplicate() of the group; null: the
  // module's): it touches the collection, never the tables, so it may run
  // on a second thread while the previous batch trains. Tables the
  // collection fuses travel raw in the input dist and are remapped on the
  // rank that holds their rows. Forward(Prepared) then resets the evicted
  // rows, after the previous batch's update as in the unpipelined order,
  // and looks up. Forward(input, true) is exactly Forward(Prepare(input)).
  struct Prepared {
    KeyedJaggedTensor remapped;  // the separate tables' ids as rows; the fused tables' raw
    std::map<std::string, std::vector<int64_t>> evicted;
    DistributedInput dist;
    double remap_seconds = 0;  // remapping and taking the evictions
  };
  StatusOr<Prepared> Prepare(const KeyedJaggedTensor& input, const ProcessGroup* via = nullptr)
    requires kRoutes
  {
    return PrepareStep(input, /*training=*/true, via);
  }
  template <class P>
    requires std::same_as<P, Prepared> && requires(Embedding& e, DistributedInput d) { e.Forward(std::move(d)); }
  StatusOr<KeyedTensor> Forward(P prepared, int64_t* invalid_ids = nullptr) {
    const auto start = std::chrono::steady_clock::now();
    for (const auto& [table, rows] : prepared.evicted) {
      SR_RETURN_IF_ERROR(mc_detail::ResetRows(embedding_.tables(), table, rows));
    }
    last_ = std::move(prepared.remapped);
    remap_seconds_ += prepared.remap_seconds +
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return embedding_.Forward(std::move(prepared.dist), invalid_ids);
  }

  // grad: what the embedding module's Backward takes, for the last Forward.
  template <class Grad>
  Status Backward(const Grad& grad, int64_t iteration,
                  double learning_rate = std::numeric_limits<double>::quiet_NaN()) {
    if (!last_) return FailedPreconditionError("managed-collision module: Backward before Forward");
    if constexpr (requires { embedding_.Backward(grad, iteration, learning_rate); }) {
      return embedding_.Backward(grad, iteration, learning_rate);  // sharded: keeps its own input
    } else {
      return embedding_.Backward(*last_, grad, iteration, learning_rate);
    }
  }

  Embedding& embedding() { return embedding_; }
  const Embedding& embedding() const { return embedding_; }
  Collection& collection() { return collection_; }
  const Collection& collection() const { return collection_; }
  // The remapped features of the last Forward (sharded: a fused table's
  // features keep their raw ids; they became rows where the rows live).
  const std::optional<KeyedJaggedTensor>& remapped() const { return last_; }
  // Wall seconds spent remapping and resetting evicted rows, summed over Forwards.
  double remap_seconds() const { return remap_seconds_; }

 private:
  StatusOr<Prepared> PrepareStep(const KeyedJaggedTensor& input, bool training, const ProcessGroup* via)
    requires kRoutes
  {
    using Clock = std::chrono::steady_clock;
    auto start = Clock::now();
    Prepared p;
    SR_ASSIGN_OR_RETURN(p.remapped, collection_.Forward(input, training, via));
    p.remap_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const IdRoutes* routes = collection_.routes().empty() ? nullptr : &collection_.routes();
    SR_ASSIGN_OR_RETURN(p.dist, embedding_.DistributeInput(p.remapped, via, routes));
    start = Clock::now();
    SR_RETURN_IF_ERROR(collection_.RemapReceived(p.dist, training, via));
    if (training) {
      SR_ASSIGN_OR_RETURN(p.evicted, collection_.Evict(via));
    }
    p.remap_seconds += std::chrono::duration<double>(Clock::now() - start).count();
    return p;
  }

  Embedding embedding_;
  Collection collection_;
  std::optional<KeyedJaggedTensor> last_;
  double remap_seconds_ = 0;
};

using ManagedCollisionEmbeddingBagCollection =
    ManagedCollisionEmbedding<EmbeddingBagCollection, ManagedCollisionCollection>;
using ManagedCollisionEmbeddingCollection = ManagedCollisionEmbedding<EmbeddingCollection, ManagedCollisionCollection>;
using ShardedManagedCollisionEmbeddingBagCollection =
    ManagedCollisionEmbedding<ShardedEmbeddingBagCollection, ShardedManagedCollisionCollection>;
using ShardedManagedCollisionEmbeddingCollection =
    ManagedCollisionEmbedding<ShardedEmbeddingCollection, ShardedManagedCollisionCollection>;

// Factories: the embedding module, then its collection over the same tables.
StatusOr<ManagedCollisionEmbeddingBagCollection> CreateManagedCollisionEmbeddingBagCollection(
    const PluginRegistry& registry, std::vector<EmbeddingBagConfig> tables, const ManagedCollisionConfigs& managed,
    const EmbeddingModuleOptions& options);
StatusOr<ManagedCollisionEmbeddingCollection> CreateManagedCollisionEmbeddingCollection(
    const PluginRegistry& registry, std::vector<EmbeddingConfig> tables, const ManagedCollisionConfigs& managed,
    const EmbeddingModuleOptions& options);
// How a sharded managed-collision module meets its embedding's input dist
// (managed_collision_collection.h): fused where the plan allows (the
// default), or every table separate (the collection's own collectives).
enum class ManagedCollisionDist { kFused, kSeparate };
StatusOr<ShardedManagedCollisionEmbeddingBagCollection> CreateShardedManagedCollisionEmbeddingBagCollection(
    const PluginRegistry& registry, const ProcessGroup& group, const ShardingPlan& plan,
    const ManagedCollisionConfigs& managed, const EmbeddingModuleOptions& options, ShardedModuleOptions sharded = {},
    ManagedCollisionDist dist = ManagedCollisionDist::kFused);
StatusOr<ShardedManagedCollisionEmbeddingCollection> CreateShardedManagedCollisionEmbeddingCollection(
    const PluginRegistry& registry, const ProcessGroup& group, const ShardingPlan& plan,
    const ManagedCollisionConfigs& managed, const EmbeddingModuleOptions& options);

}  // namespace shardrec
