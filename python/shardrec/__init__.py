"""shardrec from Python: sharded embedding tables behind a C++ core and
plugins (docs/python.md).

    import shardrec.torch as srt
    ebc = srt.EmbeddingBagCollection(
        [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 16, "feature_names": ["f0"]}],
        optimizer="rowwise_adagrad,lr=0.05")
    kt = ebc(shardrec.KeyedJaggedTensor(["f0"], values, lengths=lengths))
    kt.values()  # torch.Tensor [B, 16]; backward runs the fused optimizer

The plugins come from this package's plugins/ directory and
SHARDREC_PLUGIN_PATH; one that cannot be loaded is a warning naming it and
why, not an error.
"""
import os
import warnings

from . import _paths
from ._shardrec import Error, InvalidArgumentError, Plugins, __version__
from .sparse import JaggedTensor, KeyedJaggedTensor, KeyedTensor

__all__ = ["Error", "InvalidArgumentError", "JaggedTensor", "KeyedJaggedTensor", "KeyedTensor", "plugins", "__version__"]

_plugins = None


def _error(cls, code, message):
    """An error raised on the Python side, shaped as the core's: the message
    and .code, the status name."""
    e = cls(message)
    e.code = code
    return e


def plugins():
    """The process's plugins, loaded on first use: this package's own
    directory, then SHARDREC_PLUGIN_PATH (colon-separated)."""
    global _plugins
    if _plugins is None:
        dirs = [_paths.PLUGIN_DIR] if os.path.isdir(_paths.PLUGIN_DIR) else []
        _plugins = Plugins(dirs)
        for path, why in _plugins.skipped():
            warnings.warn("shardrec: plugin %s was not loaded: %s" % (path, why), RuntimeWarning, stacklevel=2)
        if not dirs:
            warnings.warn("shardrec: the package's plugin directory %s is missing" % _paths.PLUGIN_DIR,
                          RuntimeWarning, stacklevel=2)
    return _plugins


from . import distributed  # noqa: E402  (shardrec.distributed.ProcessGroup after a plain `import shardrec`)
