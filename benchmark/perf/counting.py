"""Count what bounds a step on a GPU, on any device: host syncs, kernels, bytes moved, FLOPs (issue 24).

:func:`counting` is a context manager that watches every ATen operation dispatched inside it (a
``TorchDispatchMode``, so operations issued from C++ inside composite operators are seen too) and the
Python-level reads that bypass the dispatcher (``Tensor.tolist``, ``Tensor.numpy``):

* **host syncs**: operations that make the host wait for the device on CUDA: a scalar read
  (``aten._local_scalar_dense``: ``.item()``, ``float(t)``, ``bool(t)``, ``if t:``), a read of a whole
  tensor (``tolist``, ``numpy``), operators whose output shape depends on values (``nonzero``, boolean
  indexing, ``masked_select``, ``unique``), and LAPACK-style operators whose error check reads an info
  tensor (``_linalg_check_errors``; the SVD and eigh kernels check inside, see :data:`SYNC_OPS`);
* **host tensors**: tensors made from Python values inside the block (``torch.tensor``:
  ``aten.lift_fresh``), each a host-to-device copy on a GPU and something a CUDA graph cannot replay;
* **kernels**: operations that compute (views, ``detach`` and allocations excluded), one launch each
  when nothing is fused;
* **bytes**: for each kernel, the bytes of its tensor inputs and outputs (an unfused count: what the
  kernels would read and write if each went to memory);
* **FLOPs**: ``torch.utils.flop_counter``'s count (matmuls and convolutions, forward and backward).

On a CPU every tensor is on the host, so a read of a tensor that was built on the host counts as a sync
too: code measured here keeps host-side values (schedules, step counts) as Python/numpy values.

Compiled code cannot be counted this way: dynamo runs a frame eagerly while a dispatch mode is active (so
:func:`counting` of a ``torch.compile``d function counts the uncompiled operations), and inductor's fused
kernels never pass through the dispatcher. :func:`compiled_counting` counts them with ``torch.profiler``
instead, from code compiled under :func:`kernel_profile` (inductor then wraps every generated kernel in a
``RECORD_FUNCTION``): kernels = inductor's generated kernels run + ATen operations dispatched at the top
level (the extern ``mm``/convolution calls of a compiled graph, and whatever runs eagerly: graph breaks).
It counts launches, syncs and host tensors, not bytes or FLOPs (left 0: a fused kernel's traffic is not
seen).
"""
from __future__ import annotations

import collections
import contextlib
import functools
import re
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from algorithms.core import qp
from benchmark.sim import vmap_layers

#: ATen operators that read the device on CUDA, and why (PyTorch 2.x sources: ``native/LinearAlgebra*``
#: call ``at::_linalg_check_errors`` (an ``info.item()``) inside the SVD and eigh kernels; value-dependent
#: output shapes need the count on the host).
SYNC_OPS = {
    "_local_scalar_dense": "a scalar read (.item(), float(), bool(), if t:)",
    "_linalg_check_errors": "a solver's error check (info.item())",
    "_linalg_svd": "torch.linalg.svd checks its info tensor on the host",
    "_linalg_eigh": "torch.linalg.eigh checks its info tensor on the host",
    "linalg_eigvalsh": "torch.linalg.eigvalsh checks its info tensor on the host",
    "nonzero": "output shape depends on values",
    "masked_select": "output shape depends on values",
    "_unique2": "output shape depends on values",
    "unique_dim": "output shape depends on values",
    "unique_consecutive": "output shape depends on values",
    "equal": "a boolean read",
    "is_nonzero": "a boolean read",
}
_NOT_KERNELS = {"detach", "lift_fresh", "lift_fresh_copy", "empty", "empty_like", "empty_strided",
                "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "alias",
                "_to_copy_noop",
                "_unsafe_view"}  # a view without autograd's view tracking (what reshape returns after a copy): no data moved


@dataclass
class Counts:
    syncs: int = 0
    host_tensors: int = 0
    kernels: int = 0
    bytes: int = 0
    flops: int = 0
    graphs: int = 0  # compiled graphs run (compiled_counting only)
    sync_ops: collections.Counter = field(default_factory=collections.Counter)  # op -> syncs
    kernel_ops: collections.Counter = field(default_factory=collections.Counter)
    op_bytes: collections.Counter = field(default_factory=collections.Counter)  # op -> bytes (unfused)

    def __sub__(self, other: "Counts") -> "Counts":
        return Counts(self.syncs - other.syncs, self.host_tensors - other.host_tensors,
                      self.kernels - other.kernels, self.bytes - other.bytes, self.flops - other.flops,
                      self.graphs - other.graphs, _diff(self.sync_ops, other.sync_ops),
                      _diff(self.kernel_ops, other.kernel_ops), _diff(self.op_bytes, other.op_bytes))

    def as_dict(self) -> dict:
        return {"syncs": self.syncs, "host_tensors": self.host_tensors, "kernels": self.kernels,
                "bytes": self.bytes, "flops": self.flops, "graphs": self.graphs, "sync_ops": dict(self.sync_ops)}


def _diff(a: collections.Counter, b: collections.Counter) -> collections.Counter:
    """``a - b`` per key, negative differences kept (``Counter``'s ``-`` drops them: an operation that runs
    less often at 2E than at E would vanish from a per-step breakdown)."""
    out = collections.Counter(a)
    out.subtract(b)
    return collections.Counter({k: v for k, v in out.items() if v})


def _nbytes(x) -> int:
    return x.numel() * x.element_size() if isinstance(x, torch.Tensor) else 0


def _bool_index(args) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in indices)


class _Mode(TorchDispatchMode):
    def __init__(self, counts: Counts):
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        c = self.counts
        if name in SYNC_OPS or (name in ("index", "index_put", "index_put_") and _bool_index(args)):
            c.syncs += 1
            c.sync_ops[name] += 1
        if name in ("lift_fresh", "lift_fresh_copy"):
            c.host_tensors += 1
        if name in _NOT_KERNELS or func.is_view:
            return out
        c.kernels += 1
        c.kernel_ops[name] += 1
        moved = sum(_nbytes(a) for a in tree_flatten((args, kwargs))[0]) + sum(_nbytes(o) for o in tree_flatten(out)[0])
        c.bytes += moved
        c.op_bytes[name] += moved
        return out


@contextlib.contextmanager
def _host_reads(counts: Counts):
    """Count ``Tensor.tolist``/``Tensor.numpy`` (reads that bypass the dispatcher) as syncs."""
    saved = {n: getattr(torch.Tensor, n) for n in ("tolist", "numpy")}

    def reader(name):
        orig = saved[name]

        def read(self, *a, **k):
            counts.syncs += 1
            counts.sync_ops[name] += 1
            return orig(self, *a, **k)
        return read

    try:
        for n in saved:
            setattr(torch.Tensor, n, reader(n))
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


@contextlib.contextmanager
def counting():
    """Count host syncs, host tensors, kernels, bytes and FLOPs of everything run inside (module docstring).

    Yields a :class:`Counts`, filled when the block exits."""
    counts = Counts()

    flops = FlopCounterMode(display=False)
    # the device's kernels are counted: the CPU's own choices off (pooling layout, QP_l's LAPACK SVD)
    cpu_kernels, vmap_layers.CPU_KERNELS, qp.CPU_KERNELS = vmap_layers.CPU_KERNELS, False, False
    try:
        with _host_reads(counts), flops, _Mode(counts):
            yield counts
    finally:
        vmap_layers.CPU_KERNELS = qp.CPU_KERNELS = cpu_kernels
        counts.flops = int(flops.get_total_flops())


#: profiler events of inductor's generated kernels (``graph_<i>_cpp_fused_<ops>_<j>`` on a CPU, ``triton_``
#: kernels on a GPU)
_INDUCTOR_KERNEL = re.compile(r"(^|_)(cpp_fused|triton_)")
_COMPILED_GRAPH = "## Call CompiledFxGraph"
_NO_OPS = {"resolve_conj", "resolve_neg"}  # return their input unless it is conjugated/negated


def kernel_profile():
    """Inductor's setting under which a compiled graph's kernels show in ``torch.profiler`` (compile, and
    run, under it for :func:`compiled_counting`)."""
    import torch._inductor.config as inductor_config  # lazy: torch's compiler adds 1.5 s CPU to a start (measured)

    return inductor_config.patch({"cpp.enable_kernel_profile": True})


@functools.lru_cache(maxsize=None)
def _is_view(name: str) -> bool:
    packet = getattr(torch.ops.aten, name, None)
    try:
        overloads = [getattr(packet, o) for o in packet.overloads()] if packet is not None else []
    except AttributeError:
        return False
    return bool(overloads) and all(o.is_view for o in overloads)


def _count_events(events, counts: Counts) -> None:
    """Kernels, syncs, host tensors and compiled graphs of a profiler trace (:func:`compiled_counting`)."""
    for e in events:
        name = e.name
        if name.startswith(_COMPILED_GRAPH):
            counts.graphs += 1
            continue
        if _INDUCTOR_KERNEL.search(name):
            counts.kernels += 1
            counts.kernel_ops["inductor:" + re.sub(r"^graph_\d+_|_\d+$", "", name)] += 1
            continue
        if not name.startswith("aten::"):
            continue
        op = name.removeprefix("aten::")
        if op in SYNC_OPS:
            counts.syncs += 1
            counts.sync_ops[op] += 1
        if op in ("lift_fresh", "lift_fresh_copy"):
            counts.host_tensors += 1
        parent = e.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None and op not in _NOT_KERNELS and op not in _NO_OPS and not _is_view(op):
            counts.kernels += 1  # dispatched at the top level: an extern call of a graph, or eager code
            counts.kernel_ops[op] += 1


@contextlib.contextmanager
def compiled_counting():
    """Count the kernels, host syncs and host tensors of compiled code run inside (module docstring);
    compile it first, under :func:`kernel_profile`: a compilation inside the block is an error (the
    compiler's own operations would be counted).

    Yields a :class:`Counts` (bytes and FLOPs 0), filled when the block exits."""
    from torch._dynamo.utils import counters  # lazy: 1.5 s CPU at start-up (measured), compiled counts only

    counts = Counts()

    graphs = counters["stats"]["unique_graphs"]
    prof = profile(activities=[ProfilerActivity.CPU])
    with _host_reads(counts), kernel_profile(), prof:
        yield counts
    if counters["stats"]["unique_graphs"] != graphs:
        raise RuntimeError("compiled_counting: code was compiled inside the block; run it once before "
                           "counting (under counting.kernel_profile()) so that only the compiled code is counted")
    _count_events(prof.events(), counts)
