#!/usr/bin/python3
"""One rank of tests/python/sharded_ebc_test.py, run by torchrun: the sharded
module (gloo plugin, rendezvous through torch.distributed's store) against
the unsharded module on the global batch, for one sharder. Prints
"RANK r OK" or raises."""
import os
import sys

import torch
import torch.distributed

import shardrec
import shardrec.torch as srt

sharder = sys.argv[1]
TABLES = [
    {"name": "t0", "num_embeddings": 60, "embedding_dim": 8, "feature_names": ["f0"], "pooling": "sum"},
    {"name": "t1", "num_embeddings": 30, "embedding_dim": 6, "feature_names": ["f1", "f2"], "pooling": "mean"},
]
FEATURES, ROWS, B = ["f0", "f1", "f2"], [60, 30, 30], 8  # B samples per rank

group = shardrec.distributed.ProcessGroup()  # from torchrun's environment
rank, world = group.rank(), group.world_size()
sharded = srt.ShardedEmbeddingBagCollection(TABLES, group=group, sharder=sharder, optimizer="rowwise_adagrad,lr=0.1",
                                            init_seed=3)
unsharded = srt.EmbeddingBagCollection(TABLES, optimizer="rowwise_adagrad,lr=0.1", init_seed=3)
plan = sharded.plan()
assert set(plan["plan"]) == {"t0", "t1"}, plan

gen = torch.Generator().manual_seed(11)  # the same global batches on every rank
for step in range(4):
    lengths = torch.randint(0, 5, (len(FEATURES), world * B), generator=gen)
    values = [torch.randint(0, ROWS[k], (int(lengths[k].sum()),), generator=gen) for k in range(len(FEATURES))]
    target = torch.randn(world * B, 20, generator=gen)
    # The global batch for the unsharded module, this rank's samples for the sharded one.
    full = shardrec.KeyedJaggedTensor(FEATURES, torch.cat(values), lengths=lengths.reshape(-1))
    mine_lengths = lengths[:, rank * B:(rank + 1) * B]
    mine_values = []
    for k in range(len(FEATURES)):
        start = int(lengths[k, :rank * B].sum())
        mine_values.append(values[k][start:start + int(mine_lengths[k].sum())])
    mine = shardrec.KeyedJaggedTensor(FEATURES, torch.cat(mine_values), lengths=mine_lengths.reshape(-1))
    out_full = unsharded(full).values()
    out_mine = sharded(mine).values()
    torch.testing.assert_close(out_mine, out_full[rank * B:(rank + 1) * B].detach(), rtol=1e-5, atol=1e-6,
                               msg=lambda m: "%s, step %d, rank %d: %s" % (sharder, step, rank, m))
    # Each rank's loss is its share of the global loss: the unsharded module
    # sees the gradient of the sum over ranks.
    (out_full * target).sum().backward()
    (out_mine * target[rank * B:(rank + 1) * B]).sum().backward()

sd = sharded.state_dict()  # collective: whole tables on every rank
for c in TABLES:
    torch.testing.assert_close(sd["embedding_bags.%s.weight" % c["name"]], unsharded.weight(c["name"]), rtol=1e-5,
                               atol=1e-6, msg=lambda m: "%s, table %s after 4 steps: %s" % (sharder, c["name"], m))
# load_state_dict sets each rank's part from whole tables.
fresh = srt.ShardedEmbeddingBagCollection(TABLES, group=group, sharder=sharder, init_seed=99)
fresh.load_state_dict(sd)
for c in TABLES:
    torch.testing.assert_close(fresh.weight(c["name"]), sd["embedding_bags.%s.weight" % c["name"]], rtol=0, atol=0)
# A checkpoint saved by the 2 ranks loads into the unsharded module.
root = os.environ["SHARDREC_TEST_CHECKPOINTS"]
path = sharded.save_checkpoint(root)
assert path.endswith("step-00000004"), path
plain = srt.EmbeddingBagCollection(TABLES, optimizer="rowwise_adagrad,lr=0.1", init_seed=5)
info = plain.load_checkpoint(path)
assert info["optimizer_iteration"] == 4 and info["optimizer_state_loaded"], info
for c in TABLES:
    torch.testing.assert_close(plain.weight(c["name"]), sd["embedding_bags.%s.weight" % c["name"]], rtol=0, atol=0)
    torch.testing.assert_close(plain.optimizer_state(c["name"]), unsharded.optimizer_state(c["name"]), rtol=1e-5,
                               atol=1e-6)

# Sequence tables: the sharded EmbeddingCollection against the unsharded one.
SEQ = [{"name": "s0", "num_embeddings": 40, "embedding_dim": 4, "feature_names": ["q0", "q1"]}]
sharded_ec = srt.ShardedEmbeddingCollection(SEQ, group=group, sharder=sharder, optimizer="sgd,lr=0.3", init_seed=8)
unsharded_ec = srt.EmbeddingCollection(SEQ, optimizer="sgd,lr=0.3", init_seed=8)
for step in range(3):
    lengths = torch.randint(0, 4, (2, world * B), generator=gen)
    values = [torch.randint(0, 40, (int(lengths[k].sum()),), generator=gen) for k in range(2)]
    full = shardrec.KeyedJaggedTensor(["q0", "q1"], torch.cat(values), lengths=lengths.reshape(-1))
    mine_lengths = lengths[:, rank * B:(rank + 1) * B]
    mine_values = []
    for k in range(2):
        start = int(lengths[k, :rank * B].sum())
        mine_values.append(values[k][start:start + int(mine_lengths[k].sum())])
    mine = shardrec.KeyedJaggedTensor(["q0", "q1"], torch.cat(mine_values), lengths=mine_lengths.reshape(-1))
    out_full, out_mine = unsharded_ec(full), sharded_ec(mine)
    loss_full, loss_mine = 0, 0
    for k, f in enumerate(["q0", "q1"]):
        first = int(lengths[k, :rank * B].sum())
        n = int(mine_lengths[k].sum())
        torch.testing.assert_close(out_mine[f].values(), out_full[f].values()[first:first + n].detach(), rtol=1e-6,
                                   atol=1e-6, msg=lambda m: "EC %s, step %d, %s: %s" % (sharder, step, f, m))
        w = torch.randn(out_full[f].values().shape, generator=gen)
        loss_full = loss_full + (out_full[f].values() * w).sum()
        loss_mine = loss_mine + (out_mine[f].values() * w[first:first + n]).sum()
    loss_full.backward()
    loss_mine.backward()
torch.testing.assert_close(sharded_ec.state_dict()["embeddings.s0.weight"], unsharded_ec.weight("s0"), rtol=1e-5,
                           atol=1e-6, msg=lambda m: "EC %s after 3 steps: %s" % (sharder, m))

if sharder == "table_wise":
    # The planner, for this batch size, then the same numbers.
    # Rank 0's sample batch says how many ids each table sees; rank 1's
    # differs and is ignored, so both ranks get rank 0's plan.
    sample_lengths = torch.full((len(FEATURES) * B,), 6 if rank == 0 else 1)
    sample = shardrec.KeyedJaggedTensor(FEATURES, torch.zeros(int(sample_lengths.sum()), dtype=torch.int64),
                                        lengths=sample_lengths)
    planned = srt.ShardedEmbeddingBagCollection(TABLES, group=group, planner=True, batch_size=B, samples=[sample],
                                                init_seed=3, optimizer=None)
    plans = [None, None]
    torch.distributed.all_gather_object(plans, planned.plan())
    assert plans[0] == plans[1], plans
    assert set(planned.plan()["plan"]) == {"t0", "t1"} and "t0" in planned.planner_report(), planned.planner_report()
    fresh_unsharded = srt.EmbeddingBagCollection(TABLES, optimizer=None, init_seed=3)
    one_id_each = [1] + [0] * (B - 1)  # the first sample of each feature has one id
    probe = shardrec.KeyedJaggedTensor(FEATURES, [1, 2, 3], lengths=one_id_each * 3)  # every rank's batch
    torch.testing.assert_close(planned(probe).values(), fresh_unsharded(probe).values(), rtol=1e-6, atol=1e-6)
    try:
        srt.ShardedEmbeddingBagCollection(TABLES, group=group, planner=True, sharder="row_wise", batch_size=B)
        raise AssertionError("planner and sharder together were accepted")
    except ValueError as e:
        assert "at most one of sharder, plan and planner" in str(e), e
print("RANK %d OK (%s, output dist %s)" % (rank, sharder, sharded._impl.output_dist()), flush=True)
