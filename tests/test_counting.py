"""Host syncs, kernels and bytes counted on the CPU (benchmark.counting, benchmark.perf; issue 24)."""
import pytest
import torch

from benchmark import executors as ex
from benchmark import perf
from benchmark.counting import counting

SEEDS = ("fedavg", "scaffold", "fedbat", "fedswa", "fedmoswa", "gradma", "bherd", "lfl")
TINY = perf.Setting("padded", "gradma_mlp", (1, 8, 8), 10, 2, 8, (5, 13), 1, None)  # BatchNorm, partial batches


def test_counter_sees_every_kind_of_read():
    t = torch.arange(4.0)
    for read, op in [(lambda: t[0].item(), "_local_scalar_dense"), (lambda: float(t.sum()), "_local_scalar_dense"),
                     (lambda: bool(t[1] > 0), "_local_scalar_dense"), (lambda: t.tolist(), "tolist"),
                     (lambda: t[t > 1], "index"), (lambda: t.nonzero(), "nonzero"),
                     (lambda: torch.linalg.svd(torch.eye(3)), "_linalg_svd")]:
        with counting() as c:
            read()
        assert c.syncs == 1 and c.sync_ops[op] == 1, (op, c.sync_ops)
    with counting() as c:
        (t * 2 + 1).sum()
        torch.tensor([1.0])
    assert c.syncs == 0 and c.kernels == 3 and c.host_tensors == 1
    assert c.bytes == (16 + 16) + (16 + 16) + (16 + 4)  # mul, add, sum: inputs and outputs
    with counting() as c:
        torch.ones(4, 5) @ torch.ones(5, 3)
    assert c.flops == 2 * 4 * 5 * 3


def test_qp_small_is_sync_free():
    from algorithms.core import qp

    g = torch.Generator().manual_seed(0)
    p, M = torch.randn(50, generator=g), torch.randn(3, 50, generator=g)
    with counting() as c:
        qp.project_small(p, M)
    assert c.syncs == 0 and c.host_tensors == 0, c.sync_ops


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["sequential", "vectorized", "batched"])
def test_no_host_sync_inside_a_local_step(executor):
    """0 syncs per local step for every seed algorithm, padded path (partial batches, unequal steps)."""
    for alg in SEEDS:
        r = perf.step_counts(TINY, alg, executor)
        assert r["per_step"]["syncs"] == 0, (alg, executor, r["per_step"]["sync_ops"])
        assert r["per_step"]["host_tensors"] == 0, (alg, executor)
        assert r["per_step"]["kernels"] > 0


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_round_reads_do_not_grow_with_clients(executor):
    """FedAvg on a BatchNorm model: one read per round (the local losses), whatever the clients; the
    BatchNorm averaging reads nothing (it read one float per client and buffer)."""
    for setting in (TINY, perf.with_setting(TINY, clients=3, sizes=(5, 13, 9))):
        r = perf.step_counts(setting, "fedavg", executor)
        assert r["round_sync_ops"] == {"tolist": 1} and r["per_step"]["syncs"] == 0, r["round_sync_ops"]


def test_a_planted_item_in_the_step_is_counted(monkeypatch):
    """The old sequential trim (``int(w.sum().item())`` every batch) is caught: one sync per step."""
    real = ex.ClientContext.batch

    def batch(self, s):
        int(self._w[s].sum().item())
        return real(self, s)

    monkeypatch.setattr(ex.ClientContext, "batch", batch)
    r = perf.step_counts(TINY, "fedavg", "sequential")
    assert r["per_step"]["syncs"] == 1 and r["per_step"]["sync_ops"] == {"_local_scalar_dense": 1}


def test_sequential_trims_with_host_lengths():
    sch = ex.client_schedule(ex.np.arange(10), ex.np.random.default_rng(0), 1, None, 4)
    assert sch.lengths == (4, 4, 2)
    assert ex.Schedule(sch.idx, sch.w).lengths == (4, 4, 2)  # made from the weights when not given


def test_bound_and_table():
    b = perf.bound({"kernels": 1000, "bytes": 3.35e9, "flops": 6.7e9}, "H100-SXM")
    assert b["launch_s"] == pytest.approx(7e-3) and b["memory_s"] == pytest.approx(1e-3)
    assert b["compute_s"] == pytest.approx(1e-4) and b["bound"] == "launch"
    row = {"setting": "padded", "algorithm": "fedavg", "executor": "vectorized", "compile": False,
           "per_step": {"kernels": 1000, "syncs": 0, "host_tensors": 0, "bytes": 3.35e9, "flops": 6.7e9},
           "per_round": {"syncs": 1}, "bound": b}
    md = perf.markdown({"gpu": "H100-SXM", "gpu_peaks": perf.GPUS["H100-SXM"], "load": [1.0, 2.0, 3.0], "rows": [row]})
    assert "| padded | fedavg | vectorized | no | 1000 | 0 | 0 | 3.35 GB | 6.70 | 7.00 | 1.00 | 0.100 | launch | 1 |" in md
