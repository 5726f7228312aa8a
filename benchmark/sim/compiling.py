"""How the vectorized executor compiles its local update (``Experiment.compile``): ``torch.compile``'s default
mode (issue 24), or compiled whole and replayed as a CUDA graph (``"graph"``, issue 48; see
``benchmark.sim.executors.VectorizedExecutor``), and the error of a step that cannot be captured whole."""
from __future__ import annotations

import torch

from algorithms.core import tree_map

from benchmark.sim.vmap_contract import torch_says


class GraphCaptureError(ValueError):
    """``compile="graph"`` on a local update that ``torch.compile`` cannot trace whole (a graph break)."""

    def __init__(self, name: str, cause: BaseException):
        super().__init__(f"algorithm {name!r}: compile='graph' needs its vmapped local update traced as one graph "
                         f"(no graph break, where a host sync or a Python branch on a value would sit), and torch "
                         f"found a break (torch says: {torch_says(cause)}). Use --compile (graph breaks allowed) or leave "
                         "compiling off")


def compile_local(local, graph: bool):
    """``local`` (the executor's vmapped local update) through ``torch.compile``: the default mode, or whole and
    graph-replayed (``graph``)."""
    if not graph:
        return torch.compile(local, dynamic=False)
    fn = torch.compile(local, dynamic=False, fullgraph=True, mode="reduce-overhead")

    def replayed(*args):
        torch.compiler.cudagraph_mark_step_begin()  # a new step: the previous replay's outputs may be reused
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, fn(*args))

    return replayed
