"""Memory traffic of a local step (issue 24, item 3): what the vectorized step no longer moves, with the same
results bit for bit, and the counter's per-operator bytes (benchmark.sim.functional, benchmark.sim.executors,
benchmark.perf.counting, benchmark.perf.step_counts)."""
import numpy as np
import pytest
import torch

from algorithms.core.layout import ParamLayout
from benchmark.sim import executors as ex
from benchmark.sim import functional
from benchmark.perf import step_counts as perf
from benchmark.perf.counting import counting

# a BatchNorm model, 3 clients of unequal size, batch 8: partial batches and masked steps
SMALL = perf.Setting("padded", "gradma_mlp", (1, 8, 8), 10, 3, 8, (5, 13, 21), 1, None)


def _grad(fm, flat, x, y):
    def loss(p):
        out, _ = fm.forward_train(p, x, None, None, weighted=False)
        return torch.nn.functional.cross_entropy(out, y)
    return torch.func.grad(loss)(flat)


def test_unflatten_is_one_split(monkeypatch):
    """``ParamLayout.unflatten`` gives the parameters as views of one ``split``: the flat gradient is written once (a ``cat``), equal bit
    for bit to slicing tensor by tensor, whose backward made a zero-filled flat gradient per tensor
    (``slice_backward``) and added them up; planted (the per-tensor slicing back), the check sees it."""
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 4), torch.nn.ReLU(),
                                 torch.nn.Linear(4, 3))
    fm = functional.FunctionalModel(module, "classification")
    flat = torch.nn.utils.parameters_to_vector(module.parameters()).detach()
    x, y = torch.randn(7, 6), torch.randint(0, 3, (7,))
    parts = fm.layout.unflatten(flat)
    assert all(torch.equal(parts[s.name], flat[s.start:s.stop].view(s.shape)) for s in fm.layout.slices)

    def traffic():
        with counting() as c:
            g = _grad(fm, flat, x, y)
        return g, c

    g, c = traffic()
    assert "slice_backward" not in c.kernel_ops and c.kernel_ops["cat"] == 1
    with monkeypatch.context() as m:  # planted: the old unflatten, tensor by tensor
        m.setattr(ParamLayout, "unflatten", lambda self, flat: {s.name: flat[s.start:s.stop].view(s.shape)
                                                                for s in self.slices})
        g_old, c_old = traffic()
    assert torch.equal(g, g_old)
    assert c_old.kernel_ops["slice_backward"] == len(fm.layout) and c_old.bytes > c.bytes


def test_unflatten_falls_back_when_slices_do_not_tile():
    from algorithms.core.layout import ParamSlice

    gap = ParamLayout((ParamSlice("a", 0, 2, (2,), "other"), ParamSlice("b", 3, 5, (2,), "other")))
    parts = gap.unflatten(torch.arange(5.0))
    assert parts["a"].tolist() == [0.0, 1.0] and parts["b"].tolist() == [3.0, 4.0]
    tiled = ParamLayout((ParamSlice("a", 0, 2, (2,), "other"),))
    assert tiled.unflatten(torch.arange(3.0))["a"].tolist() == [0.0, 1.0]  # a longer vector: its first slice


def test_masked_steps():
    jobs = [ex.ClientJob(i, ex.client_schedule(np.arange(n), np.random.default_rng(0), 1, None, 4), {}, n)
            for i, n in enumerate((3, 9, 13))]  # 1, 3 and 4 steps
    assert ex.masked_steps(jobs) == (False, True, True, True)
    assert ex.masked_steps(jobs[1:2]) == (False, False, False)


def _round_and_wheres(monkeypatch, masked=None):
    """FedAvg's vectorized round on SMALL: (the uplinks, buffers and losses; ``where`` kernels per round),
    with ``executors.masked_steps`` replaced by ``masked`` when given."""
    if masked is not None:
        monkeypatch.setattr(ex, "masked_steps", masked)
    fr = perf._round(SMALL, "fedavg", "vectorized", 1, False, perf._data(SMALL))
    from benchmark.sim import engine

    with counting() as c:
        out = engine.local_training(fr.runs, fr.plans, fr.executor, fr.hypers, [()] * len(fr.runs))[0]
    return (out.uplinks, out.buffers, out.local_loss), c.kernel_ops["where"]


def test_steps_every_client_runs_are_not_masked(monkeypatch):
    """The masking ``where`` runs only at steps some client has no step at; the results equal masking every
    step bit for bit (a planted late mask is caught by the next test)."""
    got, wheres = _round_and_wheres(monkeypatch)
    every, wheres_every = _round_and_wheres(monkeypatch, lambda jobs: None)
    assert 0 < wheres < wheres_every
    flat = torch.utils._pytree.tree_leaves
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(flat(got), flat(every)))


def test_a_late_mask_is_caught(monkeypatch):
    """Planted: the first step that needs a mask left unmasked (a client past its steps trains on there): the
    results differ, so the comparison above can fail."""
    real = ex.masked_steps
    got, _ = _round_and_wheres(monkeypatch)
    late, _ = _round_and_wheres(monkeypatch, lambda jobs: (False, False) + real(jobs)[2:])
    flat = torch.utils._pytree.tree_leaves
    assert not all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(flat(got), flat(late)))


def test_unsafe_view_is_not_a_kernel():
    """``reshape`` of a non-contiguous tensor is a copy (``clone``) and a view of it (``_unsafe_view``): one
    kernel, the copy's bytes."""
    x = torch.randn(4, 6).t()
    with counting() as c:
        x.reshape(-1)
    assert c.kernels == 1 and c.kernel_ops == {"clone": 1} and c.bytes == 2 * 24 * 4
    assert c.op_bytes == {"clone": 2 * 24 * 4}


def test_counts_difference_keeps_negative_entries():
    from benchmark.perf.counting import Counts

    a, b = Counts(), Counts()
    a.op_bytes.update({"mul": 10}), b.op_bytes.update({"mul": 4, "where": 3})
    assert (a - b).op_bytes == {"mul": 6, "where": -3}


def test_bytes_verdicts():
    def row(setting, executor, b):
        return {"setting": setting, "algorithm": "fedavg", "executor": executor, "compile": False, "clients": 10,
                "per_step": {"bytes": b}}

    rows = [row("padded", "vectorized", 9e9), row("clean", "vectorized", 6.5e9), row("padded", "sequential", 3e8)]
    lines = perf.bytes_verdicts({"rows": rows})
    assert "| fedavg | 9.000 GB | 6.500 GB | 3.000 GB | 1.38 | met | 3.00 | NOT met |" in lines
    assert perf.bytes_verdicts({"rows": rows[:2]}) == []


@pytest.mark.slow
def test_per_step_op_bytes_add_up():
    r = perf.step_counts(SMALL, "fedavg", "vectorized")["per_step"]
    assert sum(r["op_bytes"].values()) == pytest.approx(r["bytes"])
    assert "slice_backward" not in r["op_bytes"]
