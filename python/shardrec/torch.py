"""shardrec's embedding modules as torch.nn.Modules (docs/python.md).

EmbeddingBagCollection (pooled tables) and EmbeddingCollection (sequence
tables, one row per id) take TorchRec's table configs (EmbeddingBagConfig /
EmbeddingConfig objects) or plain dicts with the same fields, look up a
KeyedJaggedTensor (shardrec's or TorchRec's) and return torch tensors: a
KeyedTensor, or one JaggedTensor per feature. Backward hands the outputs'
gradients to the kernel's fused optimizer, which updates the tables in
place: the tables are not torch.nn.Parameters and no torch.optim optimizer
touches them, as with TorchRec's fused embedding modules. state_dict() and
load_state_dict() use TorchRec's key names (`embedding_bags.<table>.weight`,
`embeddings.<table>.weight`); checkpoints (docs/checkpoints.md) load into
any module and are saved by the sharded ones.

ShardedEmbeddingBagCollection and ShardedEmbeddingCollection are the same
modules with their tables split across the ranks of a
shardrec.distributed.ProcessGroup by a sharder ("table_wise", "row_wise",
"column_wise", "table_row_wise", "data_parallel"), a plan, or the planner;
each rank passes its own batch and gets its own rows of the output, as with
TorchRec's DistributedModelParallel."""
import itertools
import json
import math

import torch
from torch.utils import dlpack

import shardrec

from . import _shardrec, distributed
from .sparse import JaggedTensor, KeyedJaggedTensor, KeyedTensor

_TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                 # Row-wise quantized tables show their weights dequantized.
                 "int8": torch.float32, "int4": torch.float32, "int2": torch.float32}
_QUANTIZED = ("int8", "int4", "int2")
_save_serial = itertools.count()


def _enum_name(value):
    """TorchRec's PoolingType.SUM / DataType.FP16 -> "sum" / "fp16"."""
    return getattr(value, "name", str(value)).lower()


def table_config(config, is_weighted=False):
    """A table config as shardrec's tables file has it (docs/file-formats.md),
    from a dict of those fields or a TorchRec EmbeddingBagConfig /
    EmbeddingConfig."""
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
            raise shardrec._error(shardrec.InvalidArgumentError, "INVALID_ARGUMENT",
                                  "optimizer dict needs a 'name' (sgd, adagrad, rowwise_adagrad, adam)")
        return ",".join([str(optimizer["name"])] + ["%s=%s" % (k, v) for k, v in rest.items()])
    return str(optimizer)


def _options(kernel_options):
    return [(str(k), str(v)) for k, v in (kernel_options or {}).items()]


class _FusedLookup(torch.autograd.Function):
    """Forward: the module's lookup, one tensor per output. Backward: the
    fused optimizer's step with their gradients; no gradient flows further
    (the ids have none)."""

    @staticmethod
    def forward(ctx, anchor, module, kjt):
        outputs = module._lookup(kjt)
        ctx.module, ctx.kjt, ctx.shapes = module, kjt, [t.shape for t in outputs]
        ctx.lookup = module._lookups  # which lookup this is (a sharded backward needs the last)
        ctx.features = getattr(module, "_last_lengths", None)  # sequence outputs: their features
        ctx.stepped = False
        ctx.versions = kjt._versions()
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grads):
        if ctx.stepped:
            raise shardrec._error(shardrec.Error, "FAILED_PRECONDITION",
                                  "backward through the same lookup twice (retain_graph): the fused optimizer "
                                  "already stepped for it")
        ctx.stepped = True
        if ctx.kjt._versions() != ctx.versions:
            raise shardrec._error(shardrec.Error, "FAILED_PRECONDITION",
                                  "the KeyedJaggedTensor's ids or weights were changed in place after the forward "
                                  "(it shares their memory); the backward would update other rows. Change a copy, "
                                  "or build a new KeyedJaggedTensor")
        grads = [torch.zeros(s) if g is None else g for g, s in zip(grads, ctx.shapes)]
        ctx.module._step(ctx.kjt, [g.detach().to("cpu", torch.float32).contiguous() for g in grads], ctx)
        return None, None, None


class _FusedModule(torch.nn.Module):
    """What every module shares: configs, the forward through _FusedLookup
    while training, state_dict with TorchRec's keys, checkpoints. A subclass
    sets _STATE_KEY and provides _lookup(kjt) -> [tensor], _outputs(kjt,
    tensors), _backward(kjt, [grad]), _read_weights(name),
    _write_weights(name, tensor)."""

    _STATE_KEY = "embedding_bags"

    def __init__(self, tables, is_weighted, optimizer, pooled):
        super().__init__()
        self._configs = [table_config(t, is_weighted) for t in tables]
        if not pooled:  # EmbeddingConfig has no pooling: one row per id
            for c in self._configs:
                c["pooling"] = "none"
        self._optimizer = _optimizer_text(optimizer)
        self._iteration = 0
        # Makes the outputs require grad, so that autograd calls backward.
        self._anchor = torch.zeros((), requires_grad=True)
        self._lookups = 0  # lookups so far (training or not)
        self._keys, self._dims = [], []
        for c in self._configs:
            for f in c["feature_names"]:
                self._keys.append(f)
                self._dims.append(int(c["embedding_dim"]))
        self.last_invalid_ids = 0

    def embedding_configs(self):
        return [dict(c) for c in self._configs]

    def forward(self, features):
        kjt = KeyedJaggedTensor.of(features)
        self._lookups += 1
        if self.training and self._optimizer != "none" and torch.is_grad_enabled():
            outputs = _FusedLookup.apply(self._anchor, self, kjt)
        else:
            outputs = self._lookup(kjt)
        return self._outputs(kjt, outputs)

    # A sharded module's backward applies the gradient to its last lookup's
    # input (the core keeps only that one's routing).
    _BACKWARD_OF_LAST_LOOKUP_ONLY = False

    def _step(self, kjt, grads, ctx):
        if self._BACKWARD_OF_LAST_LOOKUP_ONLY and ctx.lookup != self._lookups:
            raise shardrec._error(shardrec.Error, "FAILED_PRECONDITION",
                                  "%s: backward of lookup %d after lookup %d: a sharded module applies the gradient "
                                  "to its last lookup's input, so run backward before the next forward (no "
                                  "gradient accumulation over several forwards)"
                                  % (type(self).__name__, ctx.lookup, self._lookups))
        self._iteration += 1
        self._backward(kjt, grads, ctx.features)

    def weight(self, table):
        """Table `table`'s weights [num_embeddings, dim] in its dtype (a copy)."""
        return self._read_weights(table)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for c in self._configs:
            destination[prefix + "%s.%s.weight" % (self._STATE_KEY, c["name"])] = self.weight(c["name"])

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        ours = set()
        for c in self._configs:
            key = prefix + "%s.%s.weight" % (self._STATE_KEY, c["name"])
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

    def load_checkpoint(self, path, reset_optimizer=False):
        """Loads a shardrec checkpoint (a step-N directory, or a run's
        directory: its newest) saved under any plan and world size, by
        `shardrec train` or a sharded module; collective for a sharded
        module. reset_optimizer: the weights only. Afterwards the fused
        optimizer continues from the checkpoint's iteration. Returns
        {"dir", "step", "optimizer_iteration", "optimizer_state_loaded"}."""
        directory, step, iteration, state_loaded = self._impl.load_checkpoint(str(path), bool(reset_optimizer))
        if state_loaded:
            self._iteration = int(iteration)
        return {"dir": directory, "step": step, "optimizer_iteration": iteration,
                "optimizer_state_loaded": state_loaded}

    def extra_repr(self):
        return "tables=%s, optimizer=%r" % ([c["name"] for c in self._configs], self._optimizer)


class _Pooled:
    """Pooled tables: one output, a KeyedTensor [B, sum of dims]."""

    def embedding_bag_configs(self):
        return self.embedding_configs()

    def _lookup(self, kjt):
        capsule, self.last_invalid_ids = self._impl.forward(kjt.impl())
        return [dlpack.from_dlpack(capsule)]

    def _outputs(self, kjt, outputs):
        return KeyedTensor(self._keys, self._dims, outputs[0])


class _Sequence:
    """Sequence tables: one output per feature, {feature: JaggedTensor}."""

    _STATE_KEY = "embeddings"

    def _lookup(self, kjt):
        out, self.last_invalid_ids = self._impl.forward(kjt.impl())
        self._last_lengths = [(f, lengths) for f, _, lengths in out]
        return [dlpack.from_dlpack(capsule) for _, capsule, _ in out]

    def _outputs(self, kjt, outputs):
        return {f: JaggedTensor(v, lengths) for (f, lengths), v in zip(self._last_lengths, outputs)}

    @staticmethod
    def _grad_capsules(grads, features):
        return {f: dlpack.to_dlpack(g) for (f, _), g in zip(features, grads)}


class _Unsharded(_FusedModule):
    """The modules on one process: tables in this process's kernel."""

    def __init__(self, impl_class, tables, is_weighted, optimizer, kernel, kernel_options, init_seed, bounds_check,
                 device, pooled):
        super().__init__(tables, is_weighted, optimizer, pooled)
        self._impl = impl_class(shardrec.plugins(), json.dumps({"tables": self._configs}), kernel,
                                _options(kernel_options), self._optimizer, int(init_seed), bounds_check, int(device))

    def _quantized(self, table):
        return any(c["name"] == table and c.get("data_type") in _QUANTIZED for c in self._configs)

    def _read_weights(self, table):
        if self._quantized(table):
            return dlpack.from_dlpack(self._impl.read_float_weights(table))
        return dlpack.from_dlpack(self._impl.read_weights(table))

    def _write_weights(self, table, weights):
        if self._quantized(table):
            self._impl.write_float_weights(table, dlpack.to_dlpack(weights))
        else:
            self._impl.write_weights(table, dlpack.to_dlpack(weights))

    def optimizer_state(self, table):
        """A copy of its fused optimizer's state, float32 [num_embeddings, state columns]."""
        return dlpack.from_dlpack(self._impl.read_state(table))

    def load_optimizer_state(self, table, state):
        state = torch.as_tensor(state).detach().to("cpu", torch.float32).contiguous()
        self._impl.write_state(table, dlpack.to_dlpack(state))

    def save_checkpoint(self, root, step=None, keep_last=0):
        """Saves root/step-NNNNNNNN as a sharded module does (step: the
        optimizer's iteration by default). It goes through a sharded twin
        in a world of one, so the tables are copied once in memory while it
        saves. Returns the checkpoint's path."""
        group = distributed.ProcessGroup(comm="local", rendezvous="local:shardrec-save-%d" % next(_save_serial),
                                         rank=0, world_size=1, prefix="save")
        try:
            twin = self._SHARDED(self._configs, group=group, sharder="table_wise", optimizer=self._optimizer)
            try:
                for c in self._configs:
                    state = self.optimizer_state(c["name"]) if self._optimizer != "none" else None
                    twin._impl.write_table(c["name"], dlpack.to_dlpack(self.weight(c["name"]).float()),
                                           None if state is None else dlpack.to_dlpack(state))
                twin._iteration = self._iteration
                return twin.save_checkpoint(root, step, keep_last)
            finally:
                twin.close()
        finally:
            group.close()


class EmbeddingBagCollection(_Pooled, _Unsharded):
    """Pooled embedding tables (sum or mean) on one process.

    tables: TorchRec EmbeddingBagConfigs or dicts; is_weighted: every
    feature carries per-id weights (TorchRec's flag); optimizer: the fused
    optimizer, "sgd,lr=0.01" (the default), "rowwise_adagrad,lr=0.05",
    {"name": "adam", "lr": 1e-3}, or None for inference only; kernel: the
    compute-kernel plugin ("cpu"; "cuda" on a GPU machine); kernel_options:
    that plugin's options, e.g. {"threads": 4}; init_seed: the initial
    weights (the same on every kernel, as `shardrec train`); bounds_check:
    ids outside their table are "fatal" (an error), "warning", "ignore".
    forward(kjt) -> KeyedTensor [B, sum of dims].
    """

    def __init__(self, tables, is_weighted=False, optimizer="sgd,lr=0.01", kernel="cpu", kernel_options=None,
                 init_seed=0, bounds_check="fatal", device=-1):
        super().__init__(_shardrec.EmbeddingBagCollectionImpl, tables, is_weighted, optimizer, kernel, kernel_options,
                         init_seed, bounds_check, device, pooled=True)

    def _backward(self, kjt, grads, features):
        self._impl.backward(kjt.impl(), dlpack.to_dlpack(grads[0]), self._iteration, math.nan)


def _quant_configs(tables, data_type, per_table, is_weighted):
    """The tables' configs, each in its serving type (per_table overrides data_type)."""
    configs = [table_config(t, is_weighted) for t in tables]
    per_table = dict(per_table or {})
    names = {c["name"] for c in configs}
    unknown = sorted(set(per_table) - names)
    if unknown:
        raise shardrec._error(shardrec.InvalidArgumentError, "INVALID_ARGUMENT",
                              "per_table names no table %s (tables: %s)" % (unknown, ", ".join(sorted(names))))
    for c in configs:
        c["data_type"] = _enum_name(per_table.get(c["name"], data_type))
    return configs


class QuantEmbeddingBagCollection(EmbeddingBagCollection):
    """TorchRec's QuantEmbeddingBagCollection: pooled tables served from
    row-wise quantized rows, for inference only (no optimizer, no backward).

    data_type: every table's type, "int8", "int4" or "int2" (a fp16 scale
    and bias per row beside the packed values, FBGEMM's IntN layout), or
    "fp16"; per_table: {table: type} overrides. forward(kjt) -> KeyedTensor
    [B, sum of dims], each value dequantized as scale * q + bias.
    weight(table) is the dequantized float32 table; packed_weight(table) its
    raw rows, uint8 [num_embeddings, row bytes]. quantize(trained) makes one
    from a trained EmbeddingBagCollection (or any module with
    embedding_configs() and weight()). Unlike TorchRec's, state_dict() holds
    the dequantized float32 tables (loading them quantizes again).
    """

    def __init__(self, tables, data_type="int8", per_table=None, is_weighted=False, kernel="cpu",
                 kernel_options=None, bounds_check="fatal", device=-1):
        configs = _quant_configs(tables, data_type, per_table, is_weighted)
        super().__init__(configs, is_weighted=is_weighted, optimizer=None, kernel=kernel,
                         kernel_options=kernel_options, bounds_check=bounds_check, device=device)

    @classmethod
    def quantize(cls, trained, data_type="int8", per_table=None, kernel="cpu", kernel_options=None):
        """The trained module's tables in `data_type` (per_table: overrides)."""
        configs = trained.embedding_configs()
        weighted = any(c.get("is_weighted") for c in configs)
        made = cls(configs, data_type=data_type, per_table=per_table, is_weighted=weighted, kernel=kernel,
                   kernel_options=kernel_options)
        for c in configs:
            weights = trained.weight(c["name"]).detach().to("cpu", torch.float32).contiguous()
            made._impl.write_float_weights(c["name"], dlpack.to_dlpack(weights))  # quantized or cast by the core
        return made

    def packed_weight(self, table):
        """The raw rows of a quantized table, uint8 [num_embeddings, row bytes]."""
        return dlpack.from_dlpack(self._impl.read_weights(table))


class EmbeddingCollection(_Sequence, _Unsharded):
    """Sequence embedding tables on one process: forward(kjt) -> {feature:
    JaggedTensor} whose values are [N, dim], one row per id, with the
    input's lengths. Tables may differ in dim. Arguments as
    EmbeddingBagCollection's (TorchRec EmbeddingConfigs or dicts)."""

    def __init__(self, tables, optimizer="sgd,lr=0.01", kernel="cpu", kernel_options=None, init_seed=0,
                 bounds_check="fatal", device=-1):
        super().__init__(_shardrec.EmbeddingCollectionImpl, tables, False, optimizer, kernel, kernel_options,
                         init_seed, bounds_check, device, pooled=False)

    def _backward(self, kjt, grads, features):
        self._impl.backward(kjt.impl(), self._grad_capsules(grads, features), self._iteration)


class _Sharded(_FusedModule):
    """The modules split across the ranks of `group`."""

    def __init__(self, impl_class, tables, group, sharder, plan, planner, batch_size, samples, is_weighted, optimizer,
                 kernel, kernel_options, init_seed, bounds_check, pooled):
        super().__init__(tables, is_weighted, optimizer, pooled)
        self._dtypes = {c["name"]: _TORCH_DTYPES[c.get("data_type", "fp32")] for c in self._configs}
        self._own_group = group is None
        self.group = group if group is not None else distributed.ProcessGroup()
        if plan is None:
            plan_json = ""
        elif isinstance(plan, dict):
            plan_json = json.dumps(plan)
        else:
            with open(plan) as f:
                plan_json = f.read()
        if planner and batch_size is None:
            raise shardrec._error(shardrec.InvalidArgumentError, "INVALID_ARGUMENT",
                                  "planner=True needs batch_size (samples per rank per step)")
        samples = [KeyedJaggedTensor.of(k).impl() for k in (samples or [])]
        self._impl = impl_class(shardrec.plugins(), self.group._impl, json.dumps({"tables": self._configs}),
                                sharder or "", plan_json, bool(planner), int(batch_size or 0), samples, kernel,
                                _options(kernel_options), self._optimizer, int(init_seed), bounds_check)
        distributed._register_module(self)

    def plan(self):
        """The plan in use, as a plan file's contents (a dict)."""
        return json.loads(self._impl.plan_json())

    def planner_report(self):
        """The planner's table of its choices and estimates ("" without planner=True)."""
        return self._impl.planner_report()

    def _read_weights(self, table):
        weights, _ = self._impl.read_table(table)  # float32 whatever the table's dtype
        return dlpack.from_dlpack(weights).to(self._dtypes[table])

    def _write_weights(self, table, weights):
        self._impl.write_table(table, dlpack.to_dlpack(weights.float().contiguous()))

    def save_checkpoint(self, root, step=None, keep_last=0):
        """Collective: saves root/step-NNNNNNNN (step: the optimizer's
        iteration by default), published atomically; keep_last > 0 removes
        all but the newest keep_last. A checkpoint loads under any plan or
        world size, into any module with these tables. Returns its path."""
        step = self._iteration if step is None else int(step)
        directory, _ = self._impl.save_checkpoint(str(root), step, self._iteration, int(keep_last))
        return directory

    _BACKWARD_OF_LAST_LOOKUP_ONLY = True

    def close(self):
        """Frees this rank's shards (and leaves the group the module made
        itself); the module cannot be used after."""
        self._impl.close()
        if self._own_group:
            self.group.close()


class ShardedEmbeddingBagCollection(_Pooled, _Sharded):
    """The tables of an EmbeddingBagCollection split across the ranks of
    `group` (default: shardrec.distributed.ProcessGroup() from torchrun's
    environment). sharder: one sharder for every table ("table_wise",
    "row_wise", "column_wise", "table_row_wise", "data_parallel"); plan: a
    plan file's contents as a dict ({"plan": {table: {...}}},
    docs/sharding.md) or its path; planner=True: the planner chooses
    (docs/planner.md) for batch_size samples per rank, from the ids per
    sample and row skew of samples (KJTs; rank 0's are used; none: one id
    per feature, uniform rows); none of these: the balanced table-wise plan. Forward and backward are collective: every
    rank calls them, each with its own batch (the same batch size on every
    rank). state_dict() is collective too and gives every rank the whole
    tables; load_state_dict() sets each rank's part from whole tables.
    Other arguments as EmbeddingBagCollection's.
    """

    def __init__(self, tables, group=None, sharder="", plan=None, planner=False, batch_size=None, samples=None,
                 is_weighted=False, optimizer="sgd,lr=0.01", kernel="cpu", kernel_options=None, init_seed=0,
                 bounds_check="fatal"):
        super().__init__(_shardrec.ShardedEmbeddingBagCollectionImpl, tables, group, sharder, plan, planner,
                         batch_size, samples, is_weighted, optimizer, kernel, kernel_options, init_seed, bounds_check,
                         pooled=True)

    def _backward(self, kjt, grads, features):
        self._impl.backward(dlpack.to_dlpack(grads[0]), self._iteration)


class ShardedEmbeddingCollection(_Sequence, _Sharded):
    """The tables of an EmbeddingCollection split across the ranks of
    `group`; arguments as ShardedEmbeddingBagCollection's."""

    def __init__(self, tables, group=None, sharder="", plan=None, planner=False, batch_size=None, samples=None,
                 optimizer="sgd,lr=0.01", kernel="cpu", kernel_options=None, init_seed=0, bounds_check="fatal"):
        super().__init__(_shardrec.ShardedEmbeddingCollectionImpl, tables, group, sharder, plan, planner, batch_size,
                         samples, False, optimizer, kernel, kernel_options, init_seed, bounds_check, pooled=False)

    def _backward(self, kjt, grads, features):
        self._impl.backward(self._grad_capsules(grads, features), self._iteration)


class ShardedQuantEmbeddingBagCollection(_Pooled, _Sharded):
    """TorchRec's ShardedQuantEmbeddingBagCollection: a
    QuantEmbeddingBagCollection's tables sharded over the ranks of `group`
    for inference. One rank holds the batch: forward(kjt) there sends its
    ids to the shards, every rank looks up its own, and the pooled
    KeyedTensor comes back to that rank alone; every other rank calls
    forward(None) at the same time and gets None. sharder: "table_wise",
    "row_wise", "table_row_wise" or "data_parallel" (a quantized row is
    never split by column), or a plan. quantize(trained, ...) takes the
    weights of a trained (sharded or not) collection; collective when the
    trained one is sharded. Other arguments as QuantEmbeddingBagCollection's.
    """

    def __init__(self, tables, group=None, sharder="", plan=None, data_type="int8", per_table=None,
                 is_weighted=False, kernel="cpu", kernel_options=None, bounds_check="fatal"):
        configs = _quant_configs(tables, data_type, per_table, is_weighted)
        super().__init__(_shardrec.ShardedQuantEmbeddingBagCollectionImpl, configs, group, sharder, plan, False, None,
                         None, is_weighted, None, kernel, kernel_options, 0, bounds_check, pooled=True)

    @classmethod
    def quantize(cls, trained, group=None, sharder="", plan=None, data_type="int8", per_table=None, kernel="cpu",
                 kernel_options=None):
        configs = trained.embedding_configs()
        weighted = any(c.get("is_weighted") for c in configs)
        made = cls(configs, group=group, sharder=sharder, plan=plan, data_type=data_type, per_table=per_table,
                   is_weighted=weighted, kernel=kernel, kernel_options=kernel_options)
        for c in configs:
            made._write_weights(c["name"], trained.weight(c["name"]).detach().to("cpu", torch.float32).contiguous())
        return made

    def forward(self, features=None):
        self._lookups += 1
        if features is None:
            _, self.last_invalid_ids = self._impl.forward(None)
            return None
        kjt = KeyedJaggedTensor.of(features)
        capsule, self.last_invalid_ids = self._impl.forward(kjt.impl())
        return KeyedTensor(self._keys, self._dims, dlpack.from_dlpack(capsule))

    def _backward(self, kjt, grads, features):
        raise shardrec._error(shardrec.Error, "FAILED_PRECONDITION", "a quantized module serves only: no backward")


EmbeddingBagCollection._SHARDED = ShardedEmbeddingBagCollection
EmbeddingCollection._SHARDED = ShardedEmbeddingCollection
