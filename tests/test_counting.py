"""Host syncs, kernels and bytes counted on the CPU (benchmark.perf.counting, benchmark.perf.step_counts; issue 24)."""
import numpy as np
import pytest
import torch

from benchmark.sim import executors as ex
from benchmark.perf import step_counts as perf
from benchmark.perf.counting import counting

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
    sch = ex.client_schedule(np.arange(10), np.random.default_rng(0), 1, None, 4)
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


def _fused(x, w):
    y = torch.relu(x @ w) * 2 + 1
    return (y.sin() + y.cos()).sum()


def _broken(x, w):  # _fused with a planted graph break
    y = torch.relu(x @ w) * 2 + 1
    torch._dynamo.graph_break()
    return (y.sin() + y.cos()).sum()


def test_compiled_counting_counts_fused_kernels():
    """Inductor's kernels (one fused elementwise kernel) and the extern ``mm`` are counted, not the eager
    operations the dispatch counter sees (dynamo runs eagerly under a dispatch mode); a planted graph break
    adds a graph and a kernel. The profiler count of eager code equals the dispatch count."""
    from benchmark.perf.counting import compiled_counting, kernel_profile

    x, w = torch.randn(8, 4), torch.randn(4, 3)
    with counting() as eager:
        _fused(x, w)
    with compiled_counting() as by_profiler:
        _fused(x, w)
    assert eager.kernels == by_profiler.kernels == 8 and by_profiler.graphs == 0
    found = {}
    for fn in (_fused, _broken):
        compiled = torch.compile(fn, dynamic=False)
        with kernel_profile():
            compiled(x, w)  # compile
        with counting() as c:
            compiled(x, w)
        assert c.kernels == 8  # why the dispatch counter cannot count compiled code
        with compiled_counting() as c:
            compiled(x, w)
        found[fn.__name__] = c
    fused, broken = found["_fused"], found["_broken"]
    assert 0 < fused.kernels < eager.kernels and fused.graphs == 1 and fused.kernel_ops["mm"] == 1
    assert broken.graphs == 2 and broken.kernels == fused.kernels + 1


def test_compiled_counting_refuses_a_compilation_inside():
    from benchmark.perf.counting import compiled_counting

    def f(x):
        return (x * 3).cos()

    with pytest.raises(RuntimeError, match="compiled inside"):
        with compiled_counting():
            torch.compile(f)(torch.ones(3))


@pytest.mark.slow
def test_compiled_step_has_fewer_kernels():
    """The vectorized FedAvg step compiled (the smallest model: logreg): fewer kernels than uncompiled,
    still none syncing; bytes and FLOPs are not counted compiled."""
    s = perf.Setting("padded", "logreg", (1, 8, 8), 10, 2, 8, (5, 13), 1, None)
    plain = perf.step_counts(s, "fedavg", "vectorized")["per_step"]
    compiled = perf.step_counts(s, "fedavg", "vectorized", compile=True)["per_step"]
    assert 0 < compiled["kernels"] < plain["kernels"] / 3, (compiled["kernels"], plain["kernels"])
    assert compiled["syncs"] == 0 and compiled["bytes"] is None and compiled["flops"] is None


def test_compile_verdicts():
    def row(alg, compile, kernels):
        return {"setting": "padded", "algorithm": alg, "executor": "vectorized", "compile": compile,
                "per_step": {"kernels": kernels}}

    lines = perf.compile_verdicts({"rows": [row("fedavg", False, 355), row("fedavg", True, 100),
                                            row("gradma", False, 1664), row("gradma", True, 600)]})
    assert "| padded | fedavg | vectorized | 355 | 100.0 | 0.282 | met | 306 | 0.327 | met |" in lines
    assert "| padded | gradma | vectorized | 1664 | 600.0 | 0.361 | NOT met | 943 | 0.636 | NOT met |" in lines
    assert perf.compile_verdicts({"rows": [row("fedavg", False, 355)]}) == []


def test_bench_counts_flags(monkeypatch, capsys):
    """``fedrepro bench --counts --compile --settings --executors``: the cells asked for, compiled only on
    the vectorized path; a bad setting is a bad input (exit 2)."""
    from benchmark.cli.main import main

    asked = {}

    def table(algs, executors, settings, compiled, log=None):
        asked.update(algs=algs, executors=executors, settings=[s.name for s in settings], compiled=compiled)
        return {"gpu": "H100-SXM", "gpu_peaks": perf.GPUS["H100-SXM"], "load": [0.0] * 3, "rows": []}

    monkeypatch.setattr(perf, "count_table", table)
    assert main(["bench", "--counts", "--compile", "--settings", "padded", "--executors", "sequential,vectorized",
                 "--algorithms", "fedavg"]) == 0
    assert asked == {"algs": ("fedavg",), "executors": ("sequential", "vectorized"), "settings": ["padded"],
                     "compiled": (("padded", "fedavg", "vectorized"),)}
    assert main(["bench", "--counts", "--settings", "tidy"]) == 2


def test_function_counts():
    x, w = torch.randn(8, 4), torch.randn(4, 3)
    r = perf.function_counts(lambda x, w: _fused(x, w) * 1.0, x, w)
    assert r["eager"]["kernels"] == 9 and r["compiled"]["kernels"] == 2 and r["compiled"]["graphs"] == 1
    assert r["max_abs_diff"] < 1e-5 and r["compile_seconds"] > 0
