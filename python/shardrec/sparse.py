"""KeyedJaggedTensor and KeyedTensor as TorchRec's
(torchrec.sparse.jagged_tensor), holding torch tensors.

A KeyedJaggedTensor is keys plus, key-major, one length per (key, sample)
and the ids those lengths count, with optional per-id weights. A
KeyedTensor is a [B, sum of dims] tensor whose columns are the keys' pooled
embeddings side by side."""
import torch
from torch.utils import dlpack

import shardrec

from . import _shardrec


def _invalid(message):
    return shardrec._error(_shardrec.InvalidArgumentError, "INVALID_ARGUMENT", message)


def _exported(t, dtype, what):
    """`t` as the C++ side reads it: CPU, `dtype`, contiguous. That is `t`'s
    own storage when it already is (the C++ KJT then borrows it, no copy),
    else a converted copy."""
    if not isinstance(t, torch.Tensor):
        t = torch.as_tensor(t)
    if t.dim() != 1:
        raise _invalid("%s must be 1-D, got shape %s" % (what, tuple(t.shape)))
    if dtype == torch.int64 and (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool):
        raise _invalid("%s must be integers, got %s" % (what, t.dtype))
    return t.detach().to("cpu", dtype).contiguous()


class KeyedJaggedTensor:
    """keys: list of feature names; values: int64 ids; lengths (or offsets,
    one more than lengths): ids per (key, sample), key-major; weights:
    optional float32 per id; stride_per_key: samples per key when they
    differ (variable batch). Tensors of other integer types are converted."""

    def __init__(self, keys, values, lengths=None, offsets=None, weights=None, stride_per_key=None):
        if (lengths is None) == (offsets is None):
            raise _invalid("KeyedJaggedTensor: give exactly one of lengths and offsets")
        self._keys = [str(k) for k in keys]
        self._values = torch.as_tensor(values)
        if lengths is None:
            offsets = torch.as_tensor(offsets)
            if offsets.dim() != 1 or offsets.numel() == 0 or int(offsets[0]) != 0:
                raise _invalid("KeyedJaggedTensor: offsets must be 1-D, start at 0 and have one more entry than "
                               "lengths")
            lengths = offsets[1:] - offsets[:-1]
        self._lengths = torch.as_tensor(lengths)
        self._weights = None if weights is None else torch.as_tensor(weights)
        self._stride_per_key = [int(s) for s in stride_per_key] if stride_per_key else []
        self._impl = None

    @staticmethod
    def from_torchrec(kjt):
        """From a torchrec.sparse.jagged_tensor.KeyedJaggedTensor."""
        stride_per_key = kjt.stride_per_key() if getattr(kjt, "variable_stride_per_key", lambda: False)() else None
        return KeyedJaggedTensor(kjt.keys(), kjt.values(), lengths=kjt.lengths(), weights=kjt.weights_or_none(),
                                 stride_per_key=stride_per_key)

    @staticmethod
    def of(features):
        """`features` itself, or a TorchRec KeyedJaggedTensor converted."""
        if isinstance(features, KeyedJaggedTensor):
            return features
        if hasattr(features, "weights_or_none") and hasattr(features, "lengths"):
            return KeyedJaggedTensor.from_torchrec(features)
        raise _invalid("expected a shardrec or TorchRec KeyedJaggedTensor, got %s" % type(features).__name__)

    def keys(self):
        return list(self._keys)

    def values(self):
        return self._values

    def lengths(self):
        return self._lengths

    def offsets(self):
        return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(self._lengths.to(torch.int64), 0)])

    def weights_or_none(self):
        return self._weights

    def impl(self):
        """The C++ KeyedJaggedTensor (checked and built once). It borrows the
        ids and weights through DLPack: no copy when they are CPU int64 and
        float32 and contiguous, and then they must not be changed in place
        while a lookup on them awaits its backward (_versions() tells)."""
        if self._impl is None:
            self._shared = [_exported(self._values, torch.int64, "values")]
            if self._weights is not None:
                self._shared.append(_exported(self._weights, torch.float32, "weights"))
            weights = None if self._weights is None else dlpack.to_dlpack(self._shared[1])
            self._impl = _shardrec.KeyedJaggedTensorImpl(
                self._keys, dlpack.to_dlpack(self._shared[0]),
                dlpack.to_dlpack(_exported(self._lengths, torch.int64, "lengths")), weights, self._stride_per_key)
        return self._impl

    def _versions(self):
        """In-place changes so far to the tensors the C++ KJT borrows."""
        self.impl()
        # Inference tensors have no version counter; they cannot be changed
        # in place outside inference mode either.
        return [0 if t.is_inference() else t._version for t in self._shared]

    def __repr__(self):
        return "KeyedJaggedTensor(keys=%s, values=%d ids%s)" % (
            self._keys, self._values.numel(), ", weighted" if self._weights is not None else "")


class KeyedTensor:
    """keys, the dim of each (length_per_key) and values [B, sum of dims]."""

    def __init__(self, keys, length_per_key, values):
        self._keys = list(keys)
        self._length_per_key = [int(n) for n in length_per_key]
        self._values = values
        self._offset_per_key = [0]
        for n in self._length_per_key:
            self._offset_per_key.append(self._offset_per_key[-1] + n)

    def keys(self):
        return list(self._keys)

    def values(self):
        return self._values

    def length_per_key(self):
        return list(self._length_per_key)

    def offset_per_key(self):
        return list(self._offset_per_key)

    def __getitem__(self, key):
        i = self._keys.index(key)
        return self._values[:, self._offset_per_key[i]:self._offset_per_key[i + 1]]

    def to_dict(self):
        return {k: self[k] for k in self._keys}

    def __repr__(self):
        return "KeyedTensor(keys=%s, values=%s)" % (self._keys, tuple(self._values.shape))


class JaggedTensor:
    """One feature's output of an EmbeddingCollection: values [N, D], one
    row per id, and lengths [B], ids per sample (TorchRec's JaggedTensor)."""

    def __init__(self, values, lengths):
        self._values = values
        self._lengths = torch.as_tensor(lengths, dtype=torch.int64)

    def values(self):
        return self._values

    def lengths(self):
        return self._lengths

    def offsets(self):
        return torch.cat([torch.zeros(1, dtype=torch.int64), torch.cumsum(self._lengths, 0)])

    def to_dense(self):
        """The samples' rows as a list of [length, D] tensors."""
        return list(torch.split(self._values, self._lengths.tolist()))

    def __repr__(self):
        return "JaggedTensor(values=%s, batch=%d)" % (tuple(self._values.shape), self._lengths.numel())
