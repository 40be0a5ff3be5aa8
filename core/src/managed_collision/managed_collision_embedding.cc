#include "shardrec/core/managed_collision/managed_collision_embedding.h"

namespace shardrec {
namespace {

std::vector<EmbeddingTableConfig> PlanTables(const ShardingPlan& plan) {
  std::vector<EmbeddingTableConfig> tables;
  for (const auto& t : plan.tables) tables.push_back(t.config);
  return tables;
}

}  // namespace

StatusOr<ManagedCollisionEmbeddingBagCollection> CreateManagedCollisionEmbeddingBagCollection(
    const PluginRegistry& registry, std::vector<EmbeddingBagConfig> tables, const ManagedCollisionConfigs& managed,
    const EmbeddingModuleOptions& options) {
  SR_ASSIGN_OR_RETURN(auto collection, ManagedCollisionCollection::Create(registry, tables, managed));
  SR_ASSIGN_OR_RETURN(auto ebc, EmbeddingBagCollection::Create(registry, std::move(tables), options));
  return ManagedCollisionEmbeddingBagCollection(std::move(ebc), std::move(collection));
}

StatusOr<ManagedCollisionEmbeddingCollection> CreateManagedCollisionEmbeddingCollection(
    const PluginRegistry& registry, std::vector<EmbeddingConfig> tables, const ManagedCollisionConfigs& managed,
    const EmbeddingModuleOptions& options) {
  SR_ASSIGN_OR_RETURN(auto collection, ManagedCollisionCollection::Create(registry, tables, managed));
  SR_ASSIGN_OR_RETURN(auto ec, EmbeddingCollection::Create(registry, std::move(tables), options));
  return ManagedCollisionEmbeddingCollection(std::move(ec), std::move(collection));
}

StatusOr<ShardedManagedCollisionEmbeddingBagCollection> CreateShardedManagedCollisionEmbeddingBagCollection(
    const PluginRegistry& registry, const ProcessGroup& group, const ShardingPlan& plan,
    const ManagedCollisionConfigs& managed, const EmbeddingModuleOptions& options, ShardedModuleOptions sharded,
    ManagedCollisionDist dist) {
  SR_ASSIGN_OR_RETURN(auto ebc, ShardedEmbeddingBagCollection::Create(registry, group, plan, options, sharded));
  SR_ASSIGN_OR_RETURN(auto collection,
                      ShardedManagedCollisionCollection::Create(
                          registry, group, PlanTables(plan), managed,
                          dist == ManagedCollisionDist::kFused ? &ebc.tables().layout() : nullptr));
  return ShardedManagedCollisionEmbeddingBagCollection(std::move(ebc), std::move(collection));
}

StatusOr<ShardedManagedCollisionEmbeddingCollection> CreateShardedManagedCollisionEmbeddingCollection(
    const PluginRegistry& registry, const ProcessGroup& group, const ShardingPlan& plan,
    const ManagedCollisionConfigs& managed, const EmbeddingModuleOptions& options) {
  SR_ASSIGN_OR_RETURN(auto collection,
                      ShardedManagedCollisionCollection::Create(registry, group, PlanTables(plan), managed));
  SR_ASSIGN_OR_RETURN(auto ec, ShardedEmbeddingCollection::Create(registry, group, plan, options));
  return ShardedManagedCollisionEmbeddingCollection(std::move(ec), std::move(collection));
}

}  // namespace shardrec
