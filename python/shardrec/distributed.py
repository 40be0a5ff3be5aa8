"""Process groups for shardrec's sharded modules (docs/python.md).

Under torchrun a group needs no arguments: the rank and world come from
torch's environment variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE), and the ranks meet through torch.distributed's own store
(MASTER_ADDR, MASTER_PORT). If torch.distributed is not initialized yet,
shardrec initializes it with the gloo backend from those variables, as
TorchRec's users do before DistributedModelParallel. The collectives
themselves run in shardrec's comm plugin (gloo by default), not in torch.

Or give the rendezvous explicitly: "file:DIR" (one host, or a shared file
system), "redis:HOST:PORT", or "local:NAME" (ranks as threads of one
process, with comm="local").
"""
import atexit
import datetime
import itertools
import os
import warnings
import weakref

import shardrec

from . import _shardrec

_groups = weakref.WeakSet()
_modules = weakref.WeakSet()
_serial = itertools.count()


def _env_int(name, default=None):
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise shardrec._error(shardrec.InvalidArgumentError, "INVALID_ARGUMENT",
                              "environment variable %s=%r is not an integer" % (name, value))


def _torch_dist(timeout_s):
    """torch.distributed, initialized (gloo, from torchrun's variables) if it was not."""
    import torch.distributed as dist
    if not dist.is_available():
        raise shardrec._error(shardrec.Error, "FAILED_PRECONDITION",
                              "torch.distributed is not available in this PyTorch; pass rendezvous='file:DIR'")
    if not dist.is_initialized():
        missing = [v for v in ("MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
        if missing:
            raise shardrec._error(shardrec.Error, "FAILED_PRECONDITION",
                                  "shardrec.distributed: no rendezvous: run under torchrun, call "
                                  "torch.distributed.init_process_group() first, or pass rendezvous='file:DIR' "
                                  "(%s not set)" % ", ".join(missing))
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return dist


class ProcessGroup:
    """The ranks of a job as shardrec's comm plugin `comm` sees them.

    rank, world_size, local_rank, local_world_size default to torchrun's
    variables (one process: rank 0 of 1). rendezvous: None to use
    torch.distributed's store, or a rendezvous string. prefix: the group's
    namespace in the store (default: one per group, in creation order, the
    same on every rank when every rank creates its groups in the same
    order). timeout_s: how long a collective or a missing rank is waited for.
    """

    def __init__(self, comm="gloo", rendezvous=None, rank=None, world_size=None, local_rank=None,
                 local_world_size=None, timeout_s=60.0, prefix=None):
        explicit = rank is not None or world_size is not None  # then one host unless told otherwise
        store = None
        if rendezvous is None:
            dist = _torch_dist(timeout_s)
            store = dist.distributed_c10d._get_default_store()
            # torch's own ranks, which init_process_group may have been given
            # without the environment variables.
            if not explicit:
                rank, world_size = dist.get_rank(), dist.get_world_size()
            if prefix is None:  # one per group, in the order every rank creates them
                prefix = "shardrec/group%d" % next(_serial)
        rank = _env_int("RANK", 0) if rank is None else int(rank)
        world_size = _env_int("WORLD_SIZE", 1) if world_size is None else int(world_size)
        if explicit:
            local_rank = rank if local_rank is None else int(local_rank)
            local_world_size = world_size if local_world_size is None else int(local_world_size)
        else:
            local_rank = _env_int("LOCAL_RANK", rank) if local_rank is None else int(local_rank)
            local_world_size = _env_int("LOCAL_WORLD_SIZE", world_size) if local_world_size is None \
                else int(local_world_size)
        prefix = "shardrec" if prefix is None else str(prefix)
        self._impl = _shardrec.ProcessGroupImpl(shardrec.plugins(), comm, rendezvous or "", store, prefix, rank,
                                                world_size, local_rank, local_world_size, int(timeout_s * 1000))
        self._closed = False
        _groups.add(self)

    def rank(self):
        return self._impl.rank()

    def world_size(self):
        return self._impl.world_size()

    def backend(self):
        return self._impl.backend()

    def close(self):
        """Leaves the job (modules on this group must be closed first)."""
        self._impl.close()
        self._closed = True

    def __repr__(self):
        if self._closed:
            return "ProcessGroup(closed)"
        return "ProcessGroup(%s, rank %d of %d)" % (self.backend(), self.rank(), self.world_size())


def _register_module(module):
    _modules.add(module)


@atexit.register
def _close_all():
    # The comm plugins' heartbeat threads call back into Python through the
    # store: stop them while the interpreter can still answer.
    for m in list(_modules):
        try:
            m.close()
        except Exception as e:
            warnings.warn("shardrec: closing %r at exit failed: %s" % (m, e), RuntimeWarning)
    for g in list(_groups):
        try:
            g.close()
        except Exception as e:
            warnings.warn("shardrec: closing %r at exit failed: %s" % (g, e), RuntimeWarning)
    _shardrec.shut_down_stores()


def _forget_in_child():
    # A forked child has none of the parent's comm threads: it must not
    # close (and announce leaving) the parent's groups at its exit.
    _modules.clear()
    _groups.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
