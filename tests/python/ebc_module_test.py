#!/usr/bin/python3
"""shardrec.torch.EmbeddingBagCollection against torch.nn.EmbeddingBag.

Forward (sum, mean, per-sample weights) equals EmbeddingBag's on the same
weights (loaded through load_state_dict with TorchRec's key names); after
several training steps the tables equal those EmbeddingBag(sparse=True)
reaches with torch.optim.SGD and torch.optim.Adagrad; eval and no_grad do
not train; state_dict round-trips; errors arrive as shardrec.Error /
ValueError with the C++ message; a plugin that fails to load is a warning.
When TorchRec is importable, the module also equals TorchRec's own
EmbeddingBagCollection.

usage: ebc_module_test.py   (PYTHONPATH must reach the built package)
Exit 77 (skip) when torch is missing."""
import os
import subprocess
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:
    print("SKIP: torch is not importable under", sys.executable)
    sys.exit(77)

import shardrec
import shardrec.torch as srt

TABLES = [
    {"name": "t0", "num_embeddings": 40, "embedding_dim": 8, "feature_names": ["f0"], "pooling": "sum"},
    {"name": "t1", "num_embeddings": 25, "embedding_dim": 5, "feature_names": ["f1"], "pooling": "mean"},
]


def random_batch(gen, batch=16, max_len=6, weighted=False, rows=(40, 25)):
    lengths = torch.randint(0, max_len + 1, (len(rows) * batch,), generator=gen)
    values = torch.cat([torch.randint(0, r, (int(lengths[i * batch:(i + 1) * batch].sum()),), generator=gen)
                        for i, r in enumerate(rows)])
    weights = torch.rand(values.numel(), generator=gen) if weighted else None
    return lengths, values, weights


def torch_bags(ebc, sparse=True):
    """torch.nn.EmbeddingBags holding ebc's current weights, in table order."""
    bags = []
    for c in TABLES:
        bag = torch.nn.EmbeddingBag(c["num_embeddings"], c["embedding_dim"], mode=c["pooling"], sparse=sparse)
        with torch.no_grad():
            bag.weight.copy_(ebc.weight(c["name"]))
        bags.append(bag)
    return bags


def torch_forward(bags, lengths, values, weights, batch=16):
    outs, start = [], 0
    for i, bag in enumerate(bags):
        lens = lengths[i * batch:(i + 1) * batch]
        n = int(lens.sum())
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(lens, 0)[:-1]])
        w = None if weights is None else weights[start:start + n]
        outs.append(bag(values[start:start + n], offsets, per_sample_weights=w))
        start += n
    return torch.cat(outs, dim=1)


class EbcMatchesTorch(unittest.TestCase):
    def test_forward_equals_embedding_bag(self):
        gen = torch.Generator().manual_seed(1)
        ebc = srt.EmbeddingBagCollection(TABLES, optimizer=None, init_seed=5)
        bags = torch_bags(ebc)
        for _ in range(3):
            lengths, values, _ = random_batch(gen)
            kt = ebc(shardrec.KeyedJaggedTensor(["f0", "f1"], values, lengths=lengths))
            self.assertEqual(kt.keys(), ["f0", "f1"])
            self.assertEqual(kt.length_per_key(), [8, 5])
            torch.testing.assert_close(kt.values(), torch_forward(bags, lengths, values, None), rtol=1e-6, atol=1e-6)
            torch.testing.assert_close(kt["f1"], kt.values()[:, 8:])

    def test_weighted_sum_equals_per_sample_weights(self):
        tables = [dict(TABLES[0]), dict(TABLES[1], pooling="sum")]
        gen = torch.Generator().manual_seed(2)
        ebc = srt.EmbeddingBagCollection(tables, is_weighted=True, optimizer=None, init_seed=6)
        bags = []
        for c in tables:
            bag = torch.nn.EmbeddingBag(c["num_embeddings"], c["embedding_dim"], mode="sum")
            with torch.no_grad():
                bag.weight.copy_(ebc.weight(c["name"]))
            bags.append(bag)
        lengths, values, weights = random_batch(gen, weighted=True)
        kt = ebc(shardrec.KeyedJaggedTensor(["f0", "f1"], values, lengths=lengths, weights=weights))
        torch.testing.assert_close(kt.values(), torch_forward(bags, lengths, values, weights), rtol=1e-6, atol=1e-6)

    def check_training(self, optimizer, make_torch_optimizer, steps=6):
        gen = torch.Generator().manual_seed(3)
        ebc = srt.EmbeddingBagCollection(TABLES, optimizer=optimizer, init_seed=7)
        bags = torch_bags(ebc)
        opt = make_torch_optimizer([b.weight for b in bags])
        for _ in range(steps):
            lengths, values, _ = random_batch(gen)
            target = torch.randn(16, 13, generator=gen)
            loss = (ebc(shardrec.KeyedJaggedTensor(["f0", "f1"], values, lengths=lengths)).values() * target).sum()
            loss.backward()
            opt.zero_grad()
            (torch_forward(bags, lengths, values, None) * target).sum().backward()
            opt.step()
        for c, bag in zip(TABLES, bags):
            torch.testing.assert_close(ebc.weight(c["name"]), bag.weight.detach(), rtol=1e-5, atol=1e-6,
                                       msg=lambda m: "%s, table %s: %s" % (optimizer, c["name"], m))

    def test_sgd_steps_equal_torch_optim_sgd(self):
        self.check_training("sgd,lr=0.1", lambda p: torch.optim.SGD(p, lr=0.1))

    def test_adagrad_steps_equal_torch_optim_adagrad(self):
        self.check_training({"name": "adagrad", "lr": 0.2, "eps": 1e-8, "initial_accumulator_value": 0.0},
                            lambda p: torch.optim.Adagrad(p, lr=0.2, eps=1e-8, initial_accumulator_value=0.0))

    def test_eval_and_no_grad_do_not_train(self):
        ebc = srt.EmbeddingBagCollection(TABLES, optimizer="sgd,lr=1.0", init_seed=8)
        before = ebc.weight("t0").clone()
        kjt = shardrec.KeyedJaggedTensor(["f0", "f1"], [1, 2, 3], lengths=[1, 1, 0, 1])
        with torch.no_grad():
            out = ebc(kjt).values()
        self.assertFalse(out.requires_grad)
        ebc.eval()
        self.assertFalse(ebc(kjt).values().requires_grad)
        torch.testing.assert_close(ebc.weight("t0"), before, rtol=0, atol=0)

    def test_state_dict_round_trip_with_torchrec_keys(self):
        a = srt.EmbeddingBagCollection(TABLES, init_seed=9)
        b = srt.EmbeddingBagCollection(TABLES, init_seed=10)
        sd = a.state_dict()
        self.assertEqual(sorted(sd), ["embedding_bags.t0.weight", "embedding_bags.t1.weight"])
        self.assertFalse(torch.equal(b.weight("t0"), sd["embedding_bags.t0.weight"]))
        b.load_state_dict(sd)
        for c in TABLES:
            torch.testing.assert_close(b.weight(c["name"]), a.weight(c["name"]), rtol=0, atol=0)
        # Inside a model: the prefix is the attribute's name.
        model = torch.nn.Module()
        model.sparse = b
        self.assertIn("sparse.embedding_bags.t0.weight", model.state_dict())
        bad = dict(sd)
        bad["embedding_bags.t0.weight"] = torch.zeros(3, 8)
        with self.assertRaisesRegex(RuntimeError, "size mismatch for embedding_bags.t0.weight"):
            b.load_state_dict(bad)
        missing = {"embedding_bags.t0.weight": sd["embedding_bags.t0.weight"], "extra": torch.zeros(1)}
        with self.assertRaisesRegex(RuntimeError, "Missing key.*embedding_bags.t1.weight"):
            b.load_state_dict(missing)
        with self.assertRaisesRegex(RuntimeError, "Unexpected key.*extra"):
            b.load_state_dict(dict(sd, extra=torch.zeros(1)))

    def test_fp16_table_state_dict(self):
        tables = [dict(TABLES[0], data_type="fp16")]
        ebc = srt.EmbeddingBagCollection(tables, init_seed=11)
        w = ebc.weight("t0")
        self.assertEqual(w.dtype, torch.float16)
        ebc.load_state_dict({"embedding_bags.t0.weight": torch.full((40, 8), 0.25)})
        torch.testing.assert_close(ebc.weight("t0"), torch.full((40, 8), 0.25, dtype=torch.float16))

    def test_errors_carry_the_core_message(self):
        ebc = srt.EmbeddingBagCollection(TABLES, init_seed=1)
        with self.assertRaises(shardrec.Error) as e:
            ebc(shardrec.KeyedJaggedTensor(["f0", "f1"], [1, 400], lengths=[1, 0, 1, 0]))
        self.assertEqual(e.exception.code, "OUT_OF_RANGE")
        self.assertIn("id 400 is out of range for table 't1' with 25 rows", str(e.exception))
        with self.assertRaisesRegex(ValueError, "unknown key 'dims'"):
            srt.EmbeddingBagCollection([dict(TABLES[0], dims=3)])
        with self.assertRaisesRegex(shardrec.Error, "f1"):
            ebc(shardrec.KeyedJaggedTensor(["f0"], [1], lengths=[1]))
        with self.assertRaisesRegex(ValueError, "exactly one of lengths and offsets"):
            shardrec.KeyedJaggedTensor(["f0"], [1])
        with self.assertRaisesRegex(ValueError, "values must be 1-D"):
            ebc(shardrec.KeyedJaggedTensor(["f0", "f1"], [[1]], lengths=[1, 0]))
        with self.assertRaisesRegex(ValueError, "optimizer"):
            srt.EmbeddingBagCollection(TABLES, optimizer="sgd_typo")
        with self.assertRaisesRegex(shardrec.Error, "kernel"):
            srt.EmbeddingBagCollection(TABLES, kernel="no_such_kernel")

    def test_torchrec_like_inputs(self):
        """A TorchRec KeyedJaggedTensor (duck-typed) and EmbeddingBagConfig-like objects."""
        class Kjt:
            def keys(self):
                return ["f0", "f1"]

            def values(self):
                return torch.tensor([3, 4, 5], dtype=torch.int32)

            def lengths(self):
                return torch.tensor([2, 0, 1, 0], dtype=torch.int32)

            def weights_or_none(self):
                return None

        class Pooling:
            name = "SUM"

        class Config:
            name, num_embeddings, embedding_dim, feature_names, pooling = "t0", 40, 8, ["f0"], Pooling()

        ebc = srt.EmbeddingBagCollection([Config(), TABLES[1]], optimizer=None, init_seed=2)
        self.assertEqual(ebc.embedding_bag_configs()[0]["pooling"], "sum")
        out = ebc(Kjt()).values()
        w = ebc.weight("t0")
        torch.testing.assert_close(out[0, :8], w[3] + w[4])
        torch.testing.assert_close(out[1, :8], torch.zeros(8))

    def test_ids_are_borrowed_not_copied(self):
        """int64 CPU ids and float32 weights cross by DLPack without a copy:
        the C++ KJT reads the tensor's own memory. Other dtypes are
        converted once (a copy the C++ side then owns)."""
        lengths, values, weights = random_batch(torch.Generator().manual_seed(7), weighted=True)
        kjt = shardrec.KeyedJaggedTensor(["f0", "f1"], values, lengths=lengths, weights=weights)
        self.assertEqual(kjt.impl().values_address, values.data_ptr())
        converted = shardrec.KeyedJaggedTensor(["f0", "f1"], values.to(torch.int32), lengths=lengths)
        self.assertNotEqual(converted.impl().values_address, values.data_ptr())
        # The borrowed ids stay valid after the caller drops its tensors.
        ebc = srt.EmbeddingBagCollection([dict(t, pooling="sum") for t in TABLES], is_weighted=True, init_seed=3)
        with torch.no_grad():
            expected = ebc(kjt).values()
            # Only the C++ KJT holds the ids now; new tensors would reuse
            # their memory if it had been freed.
            values_copy = values.clone()
            del values, weights
            kjt._values = kjt._weights = None
            kjt._shared = []
            scribble = [torch.full_like(values_copy, 10 ** 6) for _ in range(4)]
            torch.testing.assert_close(ebc(kjt).values(), expected)
            del scribble

    def test_ids_changed_in_place_before_backward_are_refused(self):
        """The C++ KJT shares the ids' memory, so an in-place change between
        forward and backward would send gradients to other rows: refused
        (as autograd refuses a saved tensor changed in place), nothing
        applied."""
        ebc = srt.EmbeddingBagCollection(TABLES, optimizer="sgd,lr=0.5", init_seed=4)
        lengths, values, _ = random_batch(torch.Generator().manual_seed(8))
        kjt = shardrec.KeyedJaggedTensor(["f0", "f1"], values, lengths=lengths)
        before = {k: v.clone() for k, v in ebc.state_dict().items()}
        out = ebc(kjt).values()
        values[0] = (values[0] + 1) % 25
        with self.assertRaisesRegex(shardrec.Error, "changed in place after the forward") as e:
            out.sum().backward()
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        for k, v in ebc.state_dict().items():
            torch.testing.assert_close(v, before[k])
        # A fresh forward on the changed ids trains as usual.
        ebc(kjt).values().sum().backward()
        # Ids made under inference_mode have no version counter; they train too.
        with torch.inference_mode():
            frozen = values.clone()
        ebc(shardrec.KeyedJaggedTensor(["f0", "f1"], frozen, lengths=lengths)).values().sum().backward()
        self.assertFalse(torch.equal(ebc.state_dict()["embedding_bags.t0.weight"],
                                     before["embedding_bags.t0.weight"]))

    def test_a_broken_plugin_is_a_warning(self):
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o755)
            with open(os.path.join(d, "libshardrec_kernel_broken.so"), "wb") as f:
                f.write(b"not an ELF file")
            code = ("import warnings, shardrec, shardrec.torch as srt\n"
                    "with warnings.catch_warnings(record=True) as w:\n"
                    "    warnings.simplefilter('always')\n"
                    "    srt.EmbeddingBagCollection([dict(name='t', num_embeddings=2, embedding_dim=2,"
                    " feature_names=['f'])])\n"
                    "print('WARNED' if any('libshardrec_kernel_broken.so' in str(x.message) for x in w) else 'SILENT')\n")
            env = dict(os.environ, SHARDREC_PLUGIN_PATH=d)
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("WARNED", r.stdout, r.stdout + r.stderr)


class EcMatchesTorch(unittest.TestCase):
    """EmbeddingCollection (sequence tables) against torch.nn.Embedding."""

    SEQ = [{"name": "s0", "num_embeddings": 30, "embedding_dim": 6, "feature_names": ["a", "b"]},
           {"name": "s1", "num_embeddings": 12, "embedding_dim": 3, "feature_names": ["c"]}]

    def test_rows_and_sgd_steps_equal_embedding(self):
        gen = torch.Generator().manual_seed(21)
        ec = srt.EmbeddingCollection(self.SEQ, optimizer="sgd,lr=0.2", init_seed=4)
        embs = {}
        for c in self.SEQ:
            emb = torch.nn.Embedding(c["num_embeddings"], c["embedding_dim"], sparse=True)
            with torch.no_grad():
                emb.weight.copy_(ec.weight(c["name"]))
            embs[c["name"]] = emb
        table_of = {"a": "s0", "b": "s0", "c": "s1"}
        opt = torch.optim.SGD([e.weight for e in embs.values()], lr=0.2)
        for _ in range(4):
            lengths = torch.randint(0, 4, (3 * 5,), generator=gen)
            rows = [30, 30, 12]
            values = torch.cat([torch.randint(0, rows[k], (int(lengths[k * 5:(k + 1) * 5].sum()),), generator=gen)
                                for k in range(3)])
            out = ec(shardrec.KeyedJaggedTensor(["a", "b", "c"], values, lengths=lengths))
            self.assertEqual(sorted(out), ["a", "b", "c"])
            start, loss, ref_loss = 0, 0, 0
            opt.zero_grad()
            for k, f in enumerate(["a", "b", "c"]):
                n = int(lengths[k * 5:(k + 1) * 5].sum())
                ids = values[start:start + n]
                start += n
                jt = out[f]
                self.assertEqual(jt.lengths().tolist(), lengths[k * 5:(k + 1) * 5].tolist())
                ref = embs[table_of[f]](ids)
                torch.testing.assert_close(jt.values(), ref.detach(), rtol=1e-6, atol=1e-7)  # sums in another order
                w = torch.randn(ref.shape, generator=gen)
                loss = loss + (jt.values() * w).sum()
                ref_loss = ref_loss + (ref * w).sum()
            loss.backward()
            ref_loss.backward()
            opt.step()
        for c in self.SEQ:
            torch.testing.assert_close(ec.weight(c["name"]), embs[c["name"]].weight.detach(), rtol=1e-5, atol=1e-6)
        self.assertEqual(sorted(ec.state_dict()), ["embeddings.s0.weight", "embeddings.s1.weight"])


class Checkpoints(unittest.TestCase):
    def test_a_sharded_modules_checkpoint_loads_into_an_unsharded_one(self):
        """World of one (ranks as threads, comm local): save, then load into
        the unsharded module; the optimizer's state and iteration come too."""
        group = shardrec.distributed.ProcessGroup(comm="local", rendezvous="local:ckpt-test", rank=0, world_size=1)
        sharded = srt.ShardedEmbeddingBagCollection(TABLES, group=group, sharder="row_wise",
                                                    optimizer="rowwise_adagrad,lr=0.1", init_seed=12)
        kjt = shardrec.KeyedJaggedTensor(["f0", "f1"], [1, 2, 3, 4], lengths=[2, 1, 1, 0])
        for _ in range(3):
            sharded(kjt).values().sum().backward()
        with tempfile.TemporaryDirectory() as d:
            path = sharded.save_checkpoint(d)
            self.assertTrue(path.endswith("step-00000003"), path)
            plain = srt.EmbeddingBagCollection(TABLES, optimizer="rowwise_adagrad,lr=0.1", init_seed=99)
            info = plain.load_checkpoint(d)  # the run's directory: its newest checkpoint
            self.assertEqual((info["step"], info["optimizer_iteration"], info["optimizer_state_loaded"]), (3, 3, True))
            for c in TABLES:
                torch.testing.assert_close(plain.weight(c["name"]), sharded.weight(c["name"]), rtol=0, atol=0)
            with self.assertRaisesRegex(shardrec.Error, "t1"):
                srt.EmbeddingBagCollection([TABLES[0], dict(TABLES[1], num_embeddings=26)]).load_checkpoint(d)
            with self.assertRaises(shardrec.Error):
                plain.load_checkpoint(os.path.join(d, "no-such-checkpoint"))
        sharded.close()
        group.close()


    def test_a_sharded_backward_must_follow_its_own_lookup(self):
        group = shardrec.distributed.ProcessGroup(comm="local", rendezvous="local:order-test", rank=0, world_size=1)
        m = srt.ShardedEmbeddingBagCollection(TABLES, group=group, optimizer="sgd,lr=0.1", init_seed=3)
        kjt = shardrec.KeyedJaggedTensor(["f0", "f1"], [1, 2], lengths=[1, 0, 1, 0])
        before = m.weight("t0").clone()
        out = m(kjt).values()
        with torch.no_grad():
            m(kjt)  # another lookup: the core now holds its routing, not out's
        with self.assertRaisesRegex(shardrec.Error, "run backward before the next forward") as e:
            out.sum().backward()
        self.assertEqual(e.exception.code, "FAILED_PRECONDITION")
        torch.testing.assert_close(m.weight("t0"), before, rtol=0, atol=0)  # nothing was applied
        out = m(kjt).values()
        out.sum().backward(retain_graph=True)
        with self.assertRaisesRegex(shardrec.Error, "twice"):
            out.sum().backward()
        self.assertFalse(torch.equal(m.weight("t0"), before))
        m.close()
        group.close()
        self.assertEqual(repr(group), "ProcessGroup(closed)")

    def test_fp16_sharded_tables_state_dict(self):
        group = shardrec.distributed.ProcessGroup(comm="local", rendezvous="local:fp16-test", rank=0, world_size=1)
        m = srt.ShardedEmbeddingBagCollection([dict(TABLES[0], data_type="fp16")], group=group, init_seed=3)
        self.assertEqual(m.weight("t0").dtype, torch.float16)
        m.load_state_dict({"embedding_bags.t0.weight": torch.full((40, 8), 0.5)})
        torch.testing.assert_close(m.weight("t0"), torch.full((40, 8), 0.5, dtype=torch.float16))
        m.close()
        group.close()

    def test_an_unsharded_module_saves_and_loads(self):
        for cls, tables in [(srt.EmbeddingBagCollection, TABLES), (srt.EmbeddingCollection, EcMatchesTorch.SEQ),
                            (srt.EmbeddingBagCollection, [dict(TABLES[0], data_type="fp16")])]:
            a = cls(tables, optimizer="adagrad,lr=0.1", init_seed=13)
            keys = [f for c in tables for f in c["feature_names"]]
            kjt = shardrec.KeyedJaggedTensor(keys, [1] * len(keys), lengths=[1, 0] * len(keys))
            for _ in range(2):
                out = a(kjt)
                loss = sum(j.values().sum() for j in out.values()) if isinstance(out, dict) else out.values().sum()
                loss.backward()
            with tempfile.TemporaryDirectory() as d:
                path = a.save_checkpoint(d, keep_last=1)
                self.assertTrue(path.endswith("step-00000002"), path)
                b = cls(tables, optimizer="adagrad,lr=0.1", init_seed=14)
                self.assertEqual(b.load_checkpoint(path)["optimizer_iteration"], 2)
                for c in tables:
                    torch.testing.assert_close(b.weight(c["name"]), a.weight(c["name"]), rtol=0, atol=0)
                    torch.testing.assert_close(b.optimizer_state(c["name"]), a.optimizer_state(c["name"]), rtol=0,
                                               atol=0)
                with self.assertRaisesRegex(shardrec.Error, "exists already"):
                    a.save_checkpoint(d)


class Docs(unittest.TestCase):
    def test_the_first_example_of_docs_python_md_runs(self):
        import re
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "..", "..", "docs", "python.md")) as f:
            code = re.search(r"```python\n(.*?)```", f.read(), re.S).group(1)
        namespace = {}
        exec(compile(code, "docs/python.md", "exec"), namespace)
        self.assertEqual(tuple(namespace["ebc"](namespace["kjt"]).values().shape), (2, 128))


class EbcMatchesTorchRec(unittest.TestCase):
    def test_equals_torchrec_embedding_bag_collection(self):
        try:
            from torchrec.modules.embedding_configs import EmbeddingBagConfig, PoolingType
            from torchrec.modules.embedding_modules import EmbeddingBagCollection
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        except Exception as e:  # not installed, or not for this torch
            self.skipTest("TorchRec is not importable here: %s" % e)
        configs = [EmbeddingBagConfig(name=c["name"], num_embeddings=c["num_embeddings"],
                                      embedding_dim=c["embedding_dim"], feature_names=c["feature_names"],
                                      pooling=PoolingType[c["pooling"].upper()]) for c in TABLES]
        theirs = EmbeddingBagCollection(tables=configs)
        ours = srt.EmbeddingBagCollection(configs, optimizer=None)
        ours.load_state_dict(theirs.state_dict())
        gen = torch.Generator().manual_seed(4)
        lengths, values, _ = random_batch(gen)
        kjt = KeyedJaggedTensor(keys=["f0", "f1"], values=values, lengths=lengths)
        torch.testing.assert_close(ours(kjt).values(), theirs(kjt).values().detach(), rtol=1e-6, atol=1e-6)

    def test_equals_torchrec_embedding_collection(self):
        try:
            from torchrec.modules.embedding_configs import EmbeddingConfig
            from torchrec.modules.embedding_modules import EmbeddingCollection
            from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        except Exception as e:  # not installed, or not for this torch
            self.skipTest("TorchRec is not importable here: %s" % e)
        configs = [EmbeddingConfig(name="s0", num_embeddings=30, embedding_dim=4, feature_names=["a", "b"])]
        theirs = EmbeddingCollection(tables=configs)
        ours = srt.EmbeddingCollection(configs, optimizer=None)
        ours.load_state_dict(theirs.state_dict())
        kjt = KeyedJaggedTensor(keys=["a", "b"], values=torch.tensor([3, 4, 5, 29, 0]),
                                lengths=torch.tensor([2, 0, 1, 2]))
        got, want = ours(kjt), theirs(kjt)
        for f in ["a", "b"]:
            torch.testing.assert_close(got[f].values(), want[f].values().detach(), rtol=0, atol=0)
            self.assertEqual(got[f].lengths().tolist(), want[f].lengths().tolist())


if __name__ == "__main__":
    unittest.main(verbosity=2)
