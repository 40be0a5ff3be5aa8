#!/usr/bin/python3
"""shardrec.torch.QuantEmbeddingBagCollection against a numpy reference of
the same quantization (issue 25).

The reference is written here from FBGEMM's definition, not from our code:
bias = fp16(min), scale = fp16((max - bias) / (2^bits - 1)) (1 when zero),
q = clamp(round_half_even((x - bias) / scale)), packed low bits first, rows
[scale][bias][values] padded to 4 bytes. For every bit width, dims 1 to 33
(odd included), sum and mean pooling, with and without per-id weights:
- the packed rows equal numpy's bytes exactly;
- forward equals numpy's pooling over the dequantized rows (to float32
  rounding of the sum);
- weight() is the dequantized table; state_dict round-trips the values;
- sequence lookups (EmbeddingCollection) return the dequantized rows exactly.
Also: quantize() of a trained EmbeddingBagCollection; fp16 per table;
ShardedQuantEmbeddingBagCollection on 2 ranks (threads) under every
inference sharder: the rank holding the batch gets the unsharded output,
the other None; errors for an unknown per_table name and for training.

usage: quant_ebc_test.py   (PYTHONPATH must reach the built package)
Exit 77 (skip) when torch or numpy is missing."""
import sys
import threading
import unittest

try:
    import numpy as np
    import torch
except ImportError:
    print("SKIP: torch or numpy is not importable under", sys.executable)
    sys.exit(77)

import shardrec
import shardrec.torch as srt

BITS = {"int8": 8, "int4": 4, "int2": 2}


def quantize_rows(x, bits):
    """FBGEMM's FloatToFusedNBitRowwiseQuantizedSBHalf, in numpy."""
    rows, dim = x.shape
    levels = np.float32((1 << bits) - 1)
    lo = x.min(axis=1).astype(np.float32)
    hi = x.max(axis=1).astype(np.float32)
    bias = lo.astype(np.float16)
    scale = ((hi - bias.astype(np.float32)) / levels).astype(np.float16)
    s32 = scale.astype(np.float32)
    bad = (s32 == 0) | np.isinf(np.float32(1) / np.where(s32 == 0, np.float32(1), s32))
    scale[bad] = np.float16(1)
    s32 = scale.astype(np.float32)
    inv = np.float32(1) / s32
    q = np.rint((x - bias.astype(np.float32)[:, None]) * inv[:, None])
    q = np.clip(q, 0, levels).astype(np.uint8)
    per_byte = 8 // bits
    packed_bytes = (dim * bits + 7) // 8
    row_bytes = (4 + packed_bytes + 3) // 4 * 4
    out = np.zeros((rows, row_bytes), dtype=np.uint8)
    out[:, 0:2] = scale.view(np.uint8).reshape(rows, 2)
    out[:, 2:4] = bias.view(np.uint8).reshape(rows, 2)
    for i in range(dim):
        out[:, 4 + i // per_byte] |= (q[:, i] << ((i % per_byte) * bits)).astype(np.uint8)
    return out


def dequantize_rows(packed, dim, bits):
    scale = packed[:, 0:2].copy().view(np.float16).astype(np.float32)
    bias = packed[:, 2:4].copy().view(np.float16).astype(np.float32)
    per_byte = 8 // bits
    q = np.zeros((packed.shape[0], dim), dtype=np.float32)
    for i in range(dim):
        q[:, i] = (packed[:, 4 + i // per_byte] >> ((i % per_byte) * bits)) & ((1 << bits) - 1)
    return scale * q + bias


def pooled(deq, ids, lengths, weights, mean):
    out, at = [], 0
    for n in lengths:
        rows = deq[ids[at:at + n]].astype(np.float64)
        if weights is not None:
            rows = rows * weights[at:at + n, None]
        s = rows.sum(axis=0) if n else np.zeros(deq.shape[1])
        out.append(s / n if mean and n else s)
        at += n
    return np.array(out, dtype=np.float64)


class QuantEbcTest(unittest.TestCase):
    def check(self, dtype, dim, pooling, weighted):
        bits = BITS[dtype]
        gen = torch.Generator().manual_seed(dim * 31 + bits)
        rows = 50
        tables = [{"name": "t0", "num_embeddings": rows, "embedding_dim": dim, "feature_names": ["f0"],
                   "pooling": pooling}]
        m = srt.QuantEmbeddingBagCollection(tables, data_type=dtype, is_weighted=weighted)
        trained = (torch.rand(rows, dim, generator=gen) * 2 - 1).numpy().astype(np.float32)
        trained[3] = 0.25  # a constant row: scale 1
        m.load_state_dict({"embedding_bags.t0.weight": torch.from_numpy(trained)})
        want = quantize_rows(trained, bits)
        got = m.packed_weight("t0").numpy()
        self.assertEqual(got.shape, want.shape)
        self.assertTrue(np.array_equal(got, want), f"{dtype} dim {dim}: packed rows differ from numpy's")
        deq = dequantize_rows(want, dim, bits)
        self.assertTrue(np.array_equal(m.weight("t0").numpy(), deq))
        batch = 12
        lengths = torch.randint(0, 6, (batch,), generator=gen)
        ids = torch.randint(0, rows, (int(lengths.sum()),), generator=gen)
        w = torch.rand(ids.numel(), generator=gen) if weighted else None
        kjt = srt.KeyedJaggedTensor(keys=["f0"], values=ids, lengths=lengths, weights=w)
        out = m(kjt).values().numpy()
        ref = pooled(deq, ids.numpy(), lengths.numpy(), None if w is None else w.numpy().astype(np.float64),
                     pooling == "mean")
        np.testing.assert_allclose(out, ref, rtol=2e-6, atol=2e-6 * max(1.0, float(np.abs(deq).max())) * 6,
                                   err_msg=f"{dtype} dim {dim} {pooling} weighted={weighted}")

    def test_every_width_dim_pooling_weighting(self):
        for dtype in BITS:
            for dim in (1, 3, 5, 8, 17, 33):
                for pooling in ("sum", "mean"):
                    for weighted in (False, True):
                        with self.subTest(dtype=dtype, dim=dim, pooling=pooling, weighted=weighted):
                            self.check(dtype, dim, pooling, weighted)

    def test_sequence_lookups_are_the_dequantized_rows(self):
        for dtype, bits in BITS.items():
            for dim in (3, 8, 17):
                with self.subTest(dtype=dtype, dim=dim):
                    tables = [{"name": "s0", "num_embeddings": 40, "embedding_dim": dim, "feature_names": ["g0"],
                               "data_type": dtype}]
                    ec = srt.EmbeddingCollection(tables, optimizer=None)
                    trained = (torch.rand(40, dim, generator=torch.Generator().manual_seed(dim)) - 0.5).numpy()
                    ec.load_state_dict({"embeddings.s0.weight": torch.from_numpy(trained)})
                    deq = dequantize_rows(quantize_rows(trained, bits), dim, bits)
                    ids = torch.tensor([5, 0, 39, 5, 17])
                    out = ec(srt.KeyedJaggedTensor(keys=["g0"], values=ids, lengths=torch.tensor([2, 0, 3])))
                    self.assertTrue(np.array_equal(out["g0"].values().numpy(), deq[ids.numpy()]))

    def test_quantize_a_trained_collection(self):
        tables = [{"name": "a", "num_embeddings": 30, "embedding_dim": 8, "feature_names": ["fa"]},
                  {"name": "b", "num_embeddings": 20, "embedding_dim": 6, "feature_names": ["fb"]}]
        ebc = srt.EmbeddingBagCollection(tables, optimizer="sgd,lr=0.5")
        kjt = srt.KeyedJaggedTensor(keys=["fa", "fb"], values=torch.tensor([1, 2, 3, 4, 5]),
                                    lengths=torch.tensor([2, 1, 1, 1]))
        ebc(kjt).values().sum().backward()  # trained: the rows moved
        q = srt.QuantEmbeddingBagCollection.quantize(ebc, data_type="int4", per_table={"b": "fp16"})
        types = {c["name"]: c["data_type"] for c in q.embedding_configs()}
        self.assertEqual(types, {"a": "int4", "b": "fp16"})
        a = ebc.weight("a").numpy()
        self.assertTrue(np.array_equal(q.packed_weight("a").numpy(), quantize_rows(a, 4)))
        self.assertTrue(torch.equal(q.weight("b"), ebc.weight("b").to(torch.float16)))
        deq = dequantize_rows(quantize_rows(a, 4), 8, 4)
        out = q(kjt).values().numpy()
        np.testing.assert_allclose(out[:, :8], pooled(deq, np.array([1, 2, 3]), [2, 1], None, False), rtol=1e-6,
                                   atol=1e-6)

    def test_sharded_gives_the_caller_the_unsharded_output(self):
        tables = [{"name": "t0", "num_embeddings": 40, "embedding_dim": 8, "feature_names": ["f0", "f1"]},
                  {"name": "t1", "num_embeddings": 23, "embedding_dim": 5, "feature_names": ["f2"]},
                  {"name": "t2", "num_embeddings": 3, "embedding_dim": 17, "feature_names": ["f3"]}]
        types = {"t0": "int8", "t1": "int4", "t2": "int2"}
        gen = torch.Generator().manual_seed(5)
        trained = srt.EmbeddingBagCollection(tables, optimizer=None)
        trained.load_state_dict({"embedding_bags.%s.weight" % t["name"]:
                                 torch.rand(t["num_embeddings"], t["embedding_dim"], generator=gen) - 0.5
                                 for t in tables})
        ref = srt.QuantEmbeddingBagCollection.quantize(trained, per_table=types)
        lengths = torch.randint(0, 4, (4 * 7,), generator=gen)
        rows = [40, 40, 23, 3]
        values = torch.cat([torch.randint(0, rows[k], (int(lengths[k * 7:(k + 1) * 7].sum()),), generator=gen)
                            for k in range(4)])
        kjt = srt.KeyedJaggedTensor(keys=["f0", "f1", "f2", "f3"], values=values, lengths=lengths)
        want = ref(kjt).values()
        serial = iter(range(1000))
        for sharder in ("table_wise", "row_wise", "table_row_wise", "data_parallel"):
            with self.subTest(sharder=sharder):
                results, errors = {}, []
                name = "local:quant-test-%d" % next(serial)

                def rank(r):
                    try:
                        group = shardrec.distributed.ProcessGroup(comm="local", rendezvous=name, rank=r, world_size=2)
                        m = srt.ShardedQuantEmbeddingBagCollection.quantize(trained, group=group, sharder=sharder,
                                                                            per_table=types)
                        results[r] = m(kjt if r == 1 else None)  # rank 1 holds the batch
                        m.close()
                        group.close()
                    except Exception as e:  # noqa: BLE001 (reported below)
                        errors.append("rank %d: %r" % (r, e))

                threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(120)
                self.assertEqual(errors, [])
                self.assertIsNone(results[0])
                torch.testing.assert_close(results[1].values(), want, rtol=1e-5, atol=1e-6)
                self.assertEqual(results[1].keys(), ["f0", "f1", "f2", "f3"])

    def test_errors(self):
        tables = [{"name": "t0", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f0"]}]
        with self.assertRaisesRegex(shardrec.InvalidArgumentError, "per_table names no table"):
            srt.QuantEmbeddingBagCollection(tables, per_table={"nope": "int4"})
        with self.assertRaisesRegex(shardrec.InvalidArgumentError, "int8.*cannot train"):
            srt.EmbeddingBagCollection([dict(tables[0], data_type="int8")], optimizer="sgd,lr=0.1")
        m = srt.QuantEmbeddingBagCollection(tables, data_type="int2")
        bad = torch.full((10, 4), float("nan"))
        with self.assertRaisesRegex(shardrec.InvalidArgumentError, "row 0 column 0 is nan"):
            m.load_state_dict({"embedding_bags.t0.weight": bad})


if __name__ == "__main__":
    unittest.main()
