// ReadDistEnv against the variables torchrun, Open MPI, MPICH/Hydra and
// Slurm set, from fake environments; and the errors for malformed ones.
#include "shardrec/core/launch/dist_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace shardrec {
namespace {

using Env = std::map<std::string, std::string>;

StatusOr<DistEnv> Read(const Env& env) {
  return ReadDistEnv([&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

void ExpectPlacement(const StatusOr<DistEnv>& env, int rank, int world, int local_rank, int local_world,
                     const std::string& source) {
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->rank, rank);
  EXPECT_EQ(env->world_size, world);
  EXPECT_EQ(env->local_rank, local_rank);
  EXPECT_EQ(env->local_world_size, local_world);
  EXPECT_EQ(env->source, source);
  EXPECT_EQ(env->launched(), !source.empty());
}

// The error is INVALID_ARGUMENT and its message holds every piece.
void ExpectError(const Env& env, std::initializer_list<std::string> pieces) {
  StatusOr<DistEnv> got = Read(env);
  ASSERT_FALSE(got.ok()) << "accepted a malformed environment";
  EXPECT_EQ(got.status().code(), SR_INVALID_ARGUMENT);
  for (const std::string& piece : pieces) {
    EXPECT_NE(got.status().message().find(piece), std::string::npos)
        << "'" << piece << "' missing from: " << got.status().message();
  }
}

TEST(DistEnv, NothingSetIsRankZeroOfOneNotLaunched) {
  StatusOr<DistEnv> env = Read({});
  ExpectPlacement(env, 0, 1, 0, 1, "");
  EXPECT_EQ(env->rdzv, "");
  EXPECT_EQ(env->run_id, "");
  EXPECT_EQ(env->master_port, 0);
}

TEST(DistEnv, Torchrun) {
  StatusOr<DistEnv> env = Read({{"RANK", "5"},
                                {"WORLD_SIZE", "8"},
                                {"LOCAL_RANK", "1"},
                                {"LOCAL_WORLD_SIZE", "4"},
                                {"MASTER_ADDR", "10.0.0.1"},
                                {"MASTER_PORT", "29500"},
                                {"TORCHELASTIC_RUN_ID", "elastic7"},
                                {"SHARDREC_RDZV", "redis:10.0.0.1:6379"}});
  ExpectPlacement(env, 5, 8, 1, 4, "torchrun");
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(env->rdzv, "redis:10.0.0.1:6379");
  EXPECT_EQ(env->run_id, "elastic7");
}

TEST(DistEnv, ShardrecRunIdWinsOverTorchelastic) {
  StatusOr<DistEnv> env =
      Read({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"SHARDREC_RUN_ID", "mine"}, {"TORCHELASTIC_RUN_ID", "theirs"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->run_id, "mine");
}

TEST(DistEnv, WithoutLocalVariablesAllRanksAreLocal) {
  ExpectPlacement(Read({{"RANK", "2"}, {"WORLD_SIZE", "3"}}), 2, 3, 2, 3, "torchrun");
}

TEST(DistEnv, OpenMpi) {
  ExpectPlacement(Read({{"OMPI_COMM_WORLD_RANK", "3"},
                        {"OMPI_COMM_WORLD_SIZE", "6"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                        {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}),
                  3, 6, 0, 3, "mpirun");
}

TEST(DistEnv, MpichHydra) {
  ExpectPlacement(Read({{"PMI_RANK", "4"}, {"PMI_SIZE", "5"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}}), 4,
                  5, 1, 2, "mpirun");
}

TEST(DistEnv, TorchrunWinsOverSlurmAroundIt) {
  ExpectPlacement(Read({{"RANK", "1"},
                        {"WORLD_SIZE", "2"},
                        {"LOCAL_RANK", "1"},
                        {"LOCAL_WORLD_SIZE", "2"},
                        {"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "1"},
                        {"SLURM_LOCALID", "0"},
                        {"SLURM_STEP_ID", "0"},
                        {"SLURM_STEP_TASKS_PER_NODE", "1"}}),
                  1, 2, 1, 2, "torchrun");
}

Env SlurmStep(const std::string& procid, const std::string& ntasks, const std::string& localid,
              const std::string& nodeid, const std::string& tasks_per_node) {
  return {{"SLURM_PROCID", procid}, {"SLURM_NTASKS", ntasks}, {"SLURM_LOCALID", localid},
          {"SLURM_NODEID", nodeid}, {"SLURM_STEP_ID", "0"},   {"SLURM_STEP_TASKS_PER_NODE", tasks_per_node},
          {"SLURM_JOB_ID", "4242"}};
}

TEST(DistEnv, SlurmUniform) { ExpectPlacement(Read(SlurmStep("5", "8", "1", "1", "4(x2)")), 5, 8, 1, 4, "slurm"); }

TEST(DistEnv, SlurmRepeatSyntaxPicksThisNode) {
  // "2(x3),1": nodes 0..2 run 2 tasks, node 3 runs 1. Ranks 0..6.
  ExpectPlacement(Read(SlurmStep("6", "7", "0", "3", "2(x3),1")), 6, 7, 0, 1, "slurm");
  ExpectPlacement(Read(SlurmStep("5", "7", "1", "2", "2(x3),1")), 5, 7, 1, 2, "slurm");
  ExpectPlacement(Read(SlurmStep("0", "7", "0", "0", "2(x3),1")), 0, 7, 0, 2, "slurm");
  // Several groups.
  ExpectPlacement(Read(SlurmStep("7", "9", "2", "2", "1,1(x1),3,4")), 7, 9, 2, 3, "slurm");
}

TEST(DistEnv, SlurmNtasksPerNodeWhenNoStepList) {
  Env env = SlurmStep("3", "4", "1", "1", "");
  env.erase("SLURM_STEP_TASKS_PER_NODE");
  env["SLURM_NTASKS_PER_NODE"] = "2";
  ExpectPlacement(Read(env), 3, 4, 1, 2, "slurm");
}

TEST(DistEnv, SlurmStepListWinsOverRequestedCount) {
  // --ntasks-per-node 4 with 6 tasks on 2 nodes: the second node has 2.
  Env env = SlurmStep("5", "6", "1", "1", "4,2");
  env["SLURM_NTASKS_PER_NODE"] = "4";
  ExpectPlacement(Read(env), 5, 6, 1, 2, "slurm");
}

TEST(DistEnv, SlurmBatchScriptIsNotLaunched) {
  // sbatch's script has SLURM_PROCID=0 but no srun step: nothing started ranks.
  Env env = SlurmStep("0", "8", "0", "0", "4(x2)");
  env.erase("SLURM_STEP_ID");
  ExpectPlacement(Read(env), 0, 1, 0, 1, "");
  env["SLURM_STEP_ID"] = "extern";
  ExpectPlacement(Read(env), 0, 1, 0, 1, "");
  env["SLURM_STEPID"] = "3";  // the older name
  env.erase("SLURM_STEP_ID");
  ExpectPlacement(Read(env), 0, 8, 0, 4, "slurm");
}

TEST(DistEnv, SrunPmiWithoutHydraLocalIdsReadsSlurm) {
  Env env = SlurmStep("5", "6", "1", "1", "4,2");
  env["PMI_RANK"] = "5";
  env["PMI_SIZE"] = "6";
  ExpectPlacement(Read(env), 5, 6, 1, 2, "slurm");
}

TEST(DistEnv, EmptyValueCountsAsUnset) {
  ExpectPlacement(Read({{"RANK", ""}, {"WORLD_SIZE", ""}, {"SHARDREC_RDZV", ""}}), 0, 1, 0, 1, "");
}

TEST(DistEnv, MalformedNumbersAreNamed) {
  ExpectError({{"RANK", "two"}, {"WORLD_SIZE", "4"}}, {"RANK", "'two'"});
  ExpectError({{"RANK", "-1"}, {"WORLD_SIZE", "4"}}, {"RANK", "'-1'"});
  ExpectError({{"RANK", "+1"}, {"WORLD_SIZE", "4"}}, {"RANK", "'+1'"});
  ExpectError({{"RANK", "1 "}, {"WORLD_SIZE", "4"}}, {"RANK", "'1 '"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "0"}}, {"WORLD_SIZE", "'0'"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "99999999999"}}, {"WORLD_SIZE", "99999999999"});
  ExpectError({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2x"}}, {"OMPI_COMM_WORLD_SIZE", "'2x'"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "http"}}, {"MASTER_PORT", "'http'"});
  ExpectError({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}, {"MASTER_PORT", "70000"});
}

TEST(DistEnv, InconsistentValuesAreNamed) {
  ExpectError({{"RANK", "4"}, {"WORLD_SIZE", "4"}}, {"RANK='4'", "WORLD_SIZE='4'"});
  ExpectError({{"RANK", "1"}}, {"RANK='1'", "WORLD_SIZE is not"});
  ExpectError({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE='2'", "RANK is not"});
  ExpectError({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}},
              {"LOCAL_RANK='2'", "LOCAL_WORLD_SIZE='2'"});
  ExpectError({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}}, {"LOCAL_RANK='1'", "LOCAL_WORLD_SIZE"});
  ExpectError({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "3"}},
              {"LOCAL_WORLD_SIZE=3", "WORLD_SIZE=2"});
  ExpectError({{"PMI_RANK", "3"}, {"PMI_SIZE", "2"}}, {"PMI_RANK='3'", "PMI_SIZE='2'"});
}

TEST(DistEnv, SlurmErrorsAreNamed) {
  ExpectError(SlurmStep("1", "4", "1", "0", "2(x2"), {"SLURM_STEP_TASKS_PER_NODE", "'2(x2'"});
  ExpectError(SlurmStep("1", "4", "1", "0", "2(y2)"), {"SLURM_STEP_TASKS_PER_NODE", "'2(y2)'"});
  ExpectError(SlurmStep("1", "4", "1", "0", "2,,2"), {"SLURM_STEP_TASKS_PER_NODE", "'2,,2'"});
  ExpectError(SlurmStep("1", "4", "1", "0", "0"), {"SLURM_STEP_TASKS_PER_NODE", "'0'"});
  ExpectError(SlurmStep("1", "4", "2", "0", "2(x2)"), {"SLURM_LOCALID='2'", "2"});
  ExpectError(SlurmStep("1", "4", "0", "5", "2(x2)"), {"SLURM_NODEID='5'", "2(x2)"});
  ExpectError(SlurmStep("1", "4", "0", "x", "2(x2)"), {"SLURM_NODEID", "'x'"});
  ExpectError(SlurmStep("4", "4", "0", "0", "2(x2)"), {"SLURM_PROCID='4'", "SLURM_NTASKS='4'"});
  ExpectError(SlurmStep("0", "2", "0", "0", "4"), {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS=2"});
  Env no_node = SlurmStep("1", "3", "0", "0", "2,1");
  no_node.erase("SLURM_NODEID");
  ExpectError(no_node, {"SLURM_STEP_TASKS_PER_NODE='2,1'", "SLURM_NODEID"});
  Env no_count = SlurmStep("1", "3", "0", "0", "2,1");
  no_count.erase("SLURM_STEP_TASKS_PER_NODE");
  ExpectError(no_count, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"});
  Env no_local = SlurmStep("1", "3", "0", "0", "2,1");
  no_local.erase("SLURM_LOCALID");
  ExpectError(no_local, {"SLURM_LOCALID"});
}

TEST(DistEnv, RendezvousIsChecked) {
  StatusOr<DistEnv> env = Read({{"SHARDREC_RDZV", "file:/tmp/x"}});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->rdzv, "file:/tmp/x");
  EXPECT_FALSE(env->launched());
  ExpectError({{"SHARDREC_RDZV", "tcp://a:1"}}, {"SHARDREC_RDZV", "'tcp://a:1'"});
  ExpectError({{"SHARDREC_RDZV", "redis:host"}}, {"SHARDREC_RDZV", "'redis:host'"});
  ExpectError({{"SHARDREC_RDZV", "redis:host:port"}}, {"SHARDREC_RDZV", "port 'port'"});
  ExpectError({{"SHARDREC_RDZV", "file:"}}, {"SHARDREC_RDZV", "'file:'"});
}

TEST(DistEnv, RendezvousSyntax) {
  EXPECT_TRUE(CheckRendezvousSyntax("file:/shared/rdzv").ok());
  EXPECT_TRUE(CheckRendezvousSyntax("redis:10.1.2.3:6379").ok());
  EXPECT_TRUE(CheckRendezvousSyntax("redis:redis.example.com:1").ok());
  EXPECT_FALSE(CheckRendezvousSyntax("redis::6379").ok());
  EXPECT_FALSE(CheckRendezvousSyntax("redis:h:0").ok());
  EXPECT_FALSE(CheckRendezvousSyntax("redis:h:65536").ok());
  EXPECT_FALSE(CheckRendezvousSyntax("local:x").ok());
  EXPECT_FALSE(CheckRendezvousSyntax("").ok());
}

}  // namespace
}  // namespace shardrec
