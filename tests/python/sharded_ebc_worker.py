#!/usr/bin/python3
"""One rank of tests/python/sharded_ebc_test.py, run by torchrun: the sharded
module (gloo plugin, rendezvous through torch.distributed's store) against
the unsharded module on the global batch, for one sharder. Prints
"RANK r OK" or raises."""
import sys

import torch

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
print("RANK %d OK (%s, output dist %s)" % (rank, sharder, sharded._impl.output_dist()), flush=True)
