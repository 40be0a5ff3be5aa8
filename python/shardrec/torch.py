"""shardrec's embedding modules as torch.nn.Modules (docs/python.md).

EmbeddingBagCollection takes TorchRec's table configs (EmbeddingBagConfig
objects) or plain dicts with the same fields, looks up a KeyedJaggedTensor
(shardrec's or TorchRec's) and returns a KeyedTensor whose values are a
torch tensor. Its backward hands the output's gradient to the kernel's fused
optimizer, which updates the tables in place: the tables are not
torch.nn.Parameters and no torch.optim optimizer touches them, as with
TorchRec's fused embedding modules. state_dict() and load_state_dict() use
TorchRec's key names, `embedding_bags.<table>.weight`.

ShardedEmbeddingBagCollection is the same module with its tables split
across the ranks of a shardrec.distributed.ProcessGroup by a sharder
("table_wise", "row_wise", "column_wise", "table_row_wise",
"data_parallel") or a plan; each rank passes its own batch and gets its own
rows of the output, as with TorchRec's DistributedModelParallel."""
import json
import math

import torch
from torch.utils import dlpack

import shardrec

from . import _shardrec, distributed
from .sparse import KeyedJaggedTensor, KeyedTensor

_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _enum_name(value):
    """TorchRec's PoolingType.SUM / DataType.FP16 -> "sum" / "fp16"."""
    return getattr(value, "name", str(value)).lower()


def table_config(config, is_weighted=False):
    """A table config as shardrec's tables file has it (docs/file-formats.md),
    from a dict of those fields or a TorchRec EmbeddingBagConfig."""
    if isinstance(config, dict):
        d = dict(config)
    else:
        d = {"name": config.name, "num_embeddings": int(config.num_embeddings),
             "embedding_dim": int(config.embedding_dim), "feature_names": list(config.feature_names)}
        if getattr(config, "pooling", None) is not None:
            d["pooling"] = _enum_name(config.pooling)
        if getattr(config, "data_type", None) is not None:
            d["data_type"] = _enum_name(config.data_type)
        for key in ("weight_init_min", "weight_init_max"):
            if getattr(config, key, None) is not None:
                d[key] = float(getattr(config, key))
    if is_weighted:
        d["is_weighted"] = True
    return d


def _optimizer_text(optimizer):
    """"sgd,lr=0.1", or a dict {"name": "sgd", "lr": 0.1, ...}, or None."""
    if optimizer is None:
        return "none"
    if isinstance(optimizer, dict):
        rest = {k: v for k, v in optimizer.items() if k != "name"}
        if "name" not in optimizer:
            raise shardrec.InvalidArgumentError("optimizer dict needs a 'name' (sgd, adagrad, rowwise_adagrad, adam)")
        return ",".join([str(optimizer["name"])] + ["%s=%r" % (k, v) for k, v in rest.items()])
    return str(optimizer)


class _FusedLookup(torch.autograd.Function):
    """Forward: the pooled lookup. Backward: the fused optimizer's step with
    the output's gradient; no gradient flows further (the ids have none)."""

    @staticmethod
    def forward(ctx, anchor, module, kjt):
        ctx.module, ctx.kjt = module, kjt
        return module._lookup(kjt)

    @staticmethod
    def backward(ctx, grad):
        ctx.module._step(ctx.kjt, grad)
        return None, None, None


class _FusedModule(torch.nn.Module):
    """What the unsharded and sharded modules share: configs, the forward
    through _FusedLookup while training, state_dict with TorchRec's keys.
    Subclasses provide _forward_impl(kjt) -> capsule, _backward_impl(kjt,
    grad capsule, iteration), _read_weights(name), _write_weights(name,
    tensor)."""

    def __init__(self, tables, is_weighted, optimizer):
        super().__init__()
        self._configs = [table_config(t, is_weighted) for t in tables]
        self._optimizer = _optimizer_text(optimizer)
        self._iteration = 0
        # Makes the output require grad, so that autograd calls backward.
        self._anchor = torch.zeros((), requires_grad=True)
        self._keys, self._dims = [], []
        for c in self._configs:
            for f in c["feature_names"]:
                self._keys.append(f)
                self._dims.append(int(c["embedding_dim"]))
        self.last_invalid_ids = 0

    def embedding_bag_configs(self):
        return [dict(c) for c in self._configs]

    def forward(self, features):
        kjt = KeyedJaggedTensor.of(features)
        if self.training and self._optimizer != "none" and torch.is_grad_enabled():
            values = _FusedLookup.apply(self._anchor, self, kjt)
        else:
            values = self._lookup(kjt)
        return KeyedTensor(self._keys, self._dims, values)

    def _lookup(self, kjt):
        capsule, _, _, invalid = self._forward_impl(kjt)
        self.last_invalid_ids = invalid
        return dlpack.from_dlpack(capsule)

    def _step(self, kjt, grad):
        self._iteration += 1
        grad = grad.detach().to("cpu", torch.float32).contiguous()
        self._backward_impl(kjt, dlpack.to_dlpack(grad), self._iteration)

    def weight(self, table):
        """Table `table`'s weights [num_embeddings, dim] in its dtype (a copy)."""
        return self._read_weights(table)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for c in self._configs:
            destination[prefix + "embedding_bags.%s.weight" % c["name"]] = self.weight(c["name"])

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        ours = set()
        for c in self._configs:
            key = prefix + "embedding_bags.%s.weight" % c["name"]
            ours.add(key)
            if key not in state_dict:
                missing_keys.append(key)
                continue
            value = torch.as_tensor(state_dict[key])
            want = (int(c["num_embeddings"]), int(c["embedding_dim"]))
            if tuple(value.shape) != want:
                error_msgs.append("size mismatch for %s: copying a param with shape %s, the table has %s"
                                  % (key, tuple(value.shape), want))
                continue
            dtype = _TORCH_DTYPES[c.get("data_type", "fp32")]
            self._write_weights(c["name"], value.detach().to("cpu", dtype).contiguous())
        if strict:
            unexpected_keys.extend(k for k in state_dict if k.startswith(prefix) and k not in ours)

    def extra_repr(self):
        return "tables=%s, optimizer=%r" % ([c["name"] for c in self._configs], self._optimizer)


class EmbeddingBagCollection(_FusedModule):
    """Pooled embedding tables (sum or mean) on one process.

    tables: TorchRec EmbeddingBagConfigs or dicts; is_weighted: every
    feature carries per-id weights (TorchRec's flag); optimizer: the fused
    optimizer, "sgd,lr=0.01" (the default), "rowwise_adagrad,lr=0.05",
    {"name": "adam", "lr": 1e-3}, or None for inference only; kernel: the
    compute-kernel plugin ("cpu"; "cuda" on a GPU machine); kernel_options:
    that plugin's options, e.g. {"threads": 4}; init_seed: the initial
    weights (the same on every kernel, as `shardrec train`); bounds_check:
    ids outside their table are "fatal" (an error), "warning", "ignore".
    """

    def __init__(self, tables, is_weighted=False, optimizer="sgd,lr=0.01", kernel="cpu", kernel_options=None,
                 init_seed=0, bounds_check="fatal", device=-1):
        super().__init__(tables, is_weighted, optimizer)
        self._impl = _shardrec.EmbeddingBagCollectionImpl(
            shardrec.plugins(), json.dumps({"tables": self._configs}), kernel,
            [(str(k), str(v)) for k, v in (kernel_options or {}).items()], self._optimizer, int(init_seed),
            bounds_check, int(device))

    def _forward_impl(self, kjt):
        return self._impl.forward(kjt.impl())

    def _backward_impl(self, kjt, grad, iteration):
        self._impl.backward(kjt.impl(), grad, iteration, math.nan)

    def _read_weights(self, table):
        return dlpack.from_dlpack(self._impl.read_weights(table))

    def _write_weights(self, table, weights):
        self._impl.write_weights(table, dlpack.to_dlpack(weights))

    def optimizer_state(self, table):
        """A copy of its fused optimizer's state, float32 [num_embeddings, state columns]."""
        return dlpack.from_dlpack(self._impl.read_state(table))

    def load_optimizer_state(self, table, state):
        self._impl.write_state(table, dlpack.to_dlpack(torch.as_tensor(state, dtype=torch.float32).contiguous()))


class ShardedEmbeddingBagCollection(_FusedModule):
    """The tables of an EmbeddingBagCollection split across the ranks of
    `group` (default: shardrec.distributed.ProcessGroup() from torchrun's
    environment). sharder: one sharder for every table ("table_wise",
    "row_wise", "column_wise", "table_row_wise", "data_parallel"; default:
    the balanced table-wise plan); plan: a plan file's contents as a dict
    ({"plan": {table: {...}}}, docs/sharding.md) or its path. Forward and
    backward are collective: every rank calls them, each with its own batch
    (the same batch size on every rank). state_dict() is collective too and
    gives every rank the whole tables; load_state_dict() sets each rank's
    part from whole tables. Other arguments as EmbeddingBagCollection's.
    """

    def __init__(self, tables, group=None, sharder="", plan=None, is_weighted=False, optimizer="sgd,lr=0.01",
                 kernel="cpu", kernel_options=None, init_seed=0, bounds_check="fatal"):
        super().__init__(tables, is_weighted, optimizer)
        self.group = group if group is not None else distributed.ProcessGroup()
        if plan is None:
            plan_json = ""
        elif isinstance(plan, dict):
            plan_json = json.dumps(plan)
        else:
            with open(plan) as f:
                plan_json = f.read()
        self._impl = _shardrec.ShardedEmbeddingBagCollectionImpl(
            shardrec.plugins(), self.group._impl, json.dumps({"tables": self._configs}), sharder or "", plan_json,
            kernel, [(str(k), str(v)) for k, v in (kernel_options or {}).items()], self._optimizer, int(init_seed),
            bounds_check)
        distributed._register_module(self)

    def plan(self):
        """The plan in use, as a plan file's contents (a dict)."""
        return json.loads(self._impl.plan_json())

    def _forward_impl(self, kjt):
        return self._impl.forward(kjt.impl())

    def _backward_impl(self, kjt, grad, iteration):
        self._impl.backward(grad, iteration)

    def _read_weights(self, table):
        weights, _ = self._impl.read_table(table)
        return dlpack.from_dlpack(weights)

    def _write_weights(self, table, weights):
        self._impl.write_table(table, dlpack.to_dlpack(weights))

    def close(self):
        """Frees this rank's shards; the module cannot be used after."""
        self._impl.close()
