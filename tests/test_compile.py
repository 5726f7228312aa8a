"""``--compile`` (Experiment.compile): the vectorized local update through torch.compile (issue 24)."""
import dataclasses

import pytest

from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import run

BASE = dict(dataset="digits", partition="dirichlet:0.5", num_clients=4, rounds=2, local_epochs=1, batch_size=64,
            lr=0.05, eval_train_samples=100, executor="vectorized", device="cpu", model="logreg")


def test_compile_is_hash_neutral_by_default():
    e = Experiment(**BASE)
    assert e.config_hash() == dataclasses.replace(e, compile=False).config_hash()
    assert e.config_hash() != dataclasses.replace(e, compile=True).config_hash()  # equal to tolerance only


@pytest.mark.slow
def test_compiled_step_equals_the_uncompiled_one():
    """Partial batches and unequal step counts (padding rows, masked steps), two rounds: one compiled
    shape reused in round 2 (the learning rate and downlink are arguments, not constants)."""
    from torch._dynamo.utils import counters

    a = run(Experiment(**BASE))
    graphs = counters["stats"]["unique_graphs"]
    b = run(Experiment(**BASE, compile=True))
    assert counters["stats"]["unique_graphs"] - graphs == 1  # compiled once, not once per round
    assert b.execution["compile_seconds"] > 0 and "compile_seconds" not in a.execution
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ("local_loss", "train_loss", "test_loss"):
            assert hb[k] == pytest.approx(ha[k], rel=1e-5, abs=1e-6), (k, ha["round"])


def test_compile_rule(monkeypatch):
    """``executor="auto"`` compiles only where measured to pay (benchmark.runs.cost.COMPILE_MEASURED); a named
    vectorized executor compiles as asked; the sequential executor never does."""
    from benchmark.runs import cost

    assert cost.choose_compile(False, "auto", "vectorized", "cpu", "logreg", 10) == (False, None)
    assert cost.choose_compile(True, "auto", "sequential", "cpu", "logreg", 10)[0] is False
    assert cost.choose_compile(True, "vectorized", "vectorized", "cpu", "unmeasured", 10) == (True, "asked for")
    done, why = cost.choose_compile(True, "auto", "vectorized", "cpu", "unmeasured", 10**6)
    assert not done and "not measured" in why
    # the measured table: the FedBAT CNN compiled is faster than uncompiled on this CPU and (barely) than
    # sequential, which auto picks for it: auto with compile takes the compiled vectorized executor once
    # the compile time is paid back, else stays sequential, uncompiled
    assert cost.compiled_beats_sequential("cpu", "fedbat_cnn", 100) is None
    assert "1.02x the sequential speed" in cost.compiled_beats_sequential("cpu", "fedbat_cnn", 10**4)
    assert cost.choose_compile(True, "auto", "sequential", "cpu", "fedbat_cnn", 100)[1].endswith(
        f"1.02x the sequential speed on cpu, {cost.COMPILE_SOURCE})")
    monkeypatch.setattr(cost, "COMPILE_MEASURED", {("cpu", "slow"): (0.8, 0.5, None), ("cpu", "fast"): (2.0, 3.0, 50.0)})
    done, why = cost.choose_compile(True, "auto", "vectorized", "cpu", "slow", 10**6)
    assert not done and "0.80x the uncompiled speed" in why
    done, why = cost.choose_compile(True, "auto", "vectorized", "cpu", "fast", 10)
    assert not done and "after 50 rounds > 10" in why
    assert cost.choose_compile(True, "auto", "vectorized", "cpu", "fast", 50)[0] is True
    assert cost.choose_compile(True, "auto", "vectorized", "cuda", "fast", 50)[0] is False  # measured per device


def test_plan_applies_and_records_the_compile_rule(monkeypatch):
    """The planner's decision reaches the round loop (``plan.start``'s LoopConfig) and the record, and the
    config hash stays the experiment's; a run that does not ask to compile records nothing new."""
    from benchmark.runs import cost, plan

    monkeypatch.setattr(cost, "COMPILE_MEASURED", {("cpu", "logreg"): (0.5, 0.5, None)})
    exp = Experiment(**{**BASE, "executor": "auto"}, compile=True)
    job = plan.plan_one(exp)
    assert job.executor == "vectorized" and job.compile is False
    assert job.execution()["compile"] is False and "0.50x" in job.execution()["compile_reason"]
    assert plan.start(job)[1][0].cfg.compile is False
    asked = plan.plan_one(Experiment(**BASE, compile=True))  # executor="vectorized": as asked
    assert asked.compile is True and plan.start(asked)[1][0].cfg.compile is True
    assert "compile" not in plan.plan_one(Experiment(**BASE)).execution()
    group = plan.group_job([exp, dataclasses.replace(exp, lr=0.1)])
    assert group.compile is False and "compile_reason" in group.execution()


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["fedavg", "scaffold"])
def test_compiled_batched_group_equals_uncompiled(algorithm):
    """A batched group (two learning rates in one vmap over (run, client) pairs, partial batches and
    unequal step counts) compiled equals the same group uncompiled to float tolerance, run by run, with
    client state (SCAFFOLD's control variates) carried across rounds; one graph for both rounds."""
    from torch._dynamo.utils import counters

    from benchmark.runs.plan import run_group

    exps = [Experiment(**{**BASE, "lr": lr}, algorithm=algorithm) for lr in (0.05, 0.1)]
    plain = run_group(exps)
    graphs = counters["stats"]["unique_graphs"]
    compiled = run_group([dataclasses.replace(e, compile=True) for e in exps])
    assert counters["stats"]["unique_graphs"] - graphs == 1
    for a, b in zip(plain, compiled, strict=True):
        assert b.execution["compile"] is True and b.execution["group_runs"] == 2 and b.execution["compile_seconds"] > 0
        for ha, hb in zip(a.history, b.history, strict=True):
            for k in ("local_loss", "train_loss", "test_loss"):
                assert hb[k] == pytest.approx(ha[k], rel=1e-5, abs=1e-6), (algorithm, k, ha["round"])
    assert plain[0].history[-1]["train_loss"] != plain[1].history[-1]["train_loss"]  # the runs differ


@pytest.mark.slow
def test_compile_bench_times_and_agrees():
    """``fedrepro bench --compile``'s measurement: every method timed, compile time apart, and the compiled
    round's result equal to the uncompiled one from the same starting state (each call moves the server
    state on: compared after unequal numbers of calls they differ by a round's update)."""
    import torch

    from benchmark.perf import compile_bench
    from benchmark.perf.workloads import Config

    r = compile_bench.measure_compile(Config("digits", "logreg", (1, 8, 8), 10, 2, 8, 1, 16), torch.device("cpu"), 1)
    assert r["compile_seconds"] > 0 and all(len(v) == 1 for v in r["seconds"].values())
    assert r["compiled_over_vectorized"] > 0 and r["max_abs_diff_vs_vectorized"] < 1e-6
    md = compile_bench.markdown({"device": "cpu", "device_name": "x", "torch": "t", "threads": 1, "repeats": 1,
                                 "load_average_before": [1], "load_average_after": [1], "models": [r]})
    assert "| logreg | 2x8x1 |" in md


def test_auto_with_compile_takes_the_faster_measured_executor(monkeypatch):
    """Where the compiled vectorized round is measured faster than the sequential one (and pays back its
    compile time), auto with compile takes it against the FLOPs rule; where it is slower, it does not."""
    from benchmark.runs import cost, plan

    big = {**BASE, "executor": "auto", "batch_size": 64, "rounds": 100}
    monkeypatch.setattr(cost, "CPU_VECTORIZE_MAX_FLOPS", 0.0)  # the FLOPs rule alone: sequential
    monkeypatch.setitem(cost.VECTORIZE_MAX_FLOPS, "cpu", 0.0)
    assert plan.plan_one(Experiment(**big)).executor == "sequential"
    monkeypatch.setattr(cost, "COMPILE_MEASURED", {("cpu", "logreg"): (1.5, 1.2, 50.0)})
    job = plan.plan_one(Experiment(**big, compile=True))
    assert job.executor == "vectorized" and job.compile is True and "1.20x the sequential" in job.reasons["executor"]
    monkeypatch.setattr(cost, "COMPILE_MEASURED", {("cpu", "logreg"): (1.5, 0.9, 50.0)})
    job = plan.plan_one(Experiment(**big, compile=True))
    assert job.executor == "sequential" and job.compile is False and "0.90x the sequential" in job.reasons["compile"]


def test_compile_bench_records_are_not_bench_records(tmp_path):
    """``fedrepro bench --compile`` JSON in results/perf must not feed the cost model (it read one's
    "configs" as executor timings and failed)."""
    import json

    from benchmark.runs import cost

    (tmp_path / "compile.json").write_text(json.dumps({"device": "cpu", "kind": "compile", "models": [{"model": "x"}]}))
    assert cost.latest_bench("cpu", [tmp_path]) is None


@pytest.mark.slow
def test_compiled_round_replays_one_graph_with_rng_and_dropout():
    """What a CUDA graph needs of a round (issue 24, item 2), checked on the CPU: everything that changes from
    round to round (the round, each client's RNG key for FedBAT's stochastic binarization and for the dropout
    masks, the learning rate, the downlink) enters the compiled local update as a tensor, and the draws'
    counters restart each round, so rounds 2 and 3 reuse the graph compiled in round 1 (one graph: a value
    baked in as a constant would recompile); max-pooling and dropout of LFL's CNN included. Results equal
    the uncompiled rounds to float tolerance."""
    from torch._dynamo.utils import counters

    exp = Experiment(**{**BASE, "rounds": 3, "model": "lfl_cnn_mnist"}, algorithm="fedbat")
    a = run(exp)
    graphs = counters["stats"]["unique_graphs"]
    b = run(dataclasses.replace(exp, compile=True))
    assert counters["stats"]["unique_graphs"] - graphs == 1
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ("local_loss", "train_loss", "test_loss"):
            assert hb[k] == pytest.approx(ha[k], rel=1e-4, abs=1e-6), (k, ha["round"])
    assert len({h["local_loss"] for h in a.history}) == 3  # the rounds differ: not one round replayed


def test_graph_mode_is_validated_hashed_and_never_chosen_unmeasured():
    """``compile="graph"`` (issue 48): a value of its own in the hash, refused misspelt, compiled as asked for a
    named vectorized executor, and never chosen by ``executor="auto"`` until a measurement of its own says so
    (the default mode's measured rows do not count for it)."""
    from benchmark.runs import cost

    e = Experiment(**BASE)
    assert len({e.config_hash(), dataclasses.replace(e, compile=True).config_hash(),
                dataclasses.replace(e, compile="graph").config_hash()}) == 3
    for bad in ("cudagraph", 1, "True"):
        with pytest.raises(ValueError, match="compile must be False, True or 'graph'"):
            dataclasses.replace(e, compile=bad).validate()
    assert cost.choose_compile("graph", "vectorized", "vectorized", "cuda", "fedbat_cnn", 10) == ("graph", "asked for")
    assert ("cpu", "logreg") in cost.COMPILE_MEASURED
    done, why = cost.choose_compile("graph", "auto", "vectorized", "cpu", "logreg", 10**6)
    assert done is False and "logreg (graph) on cpu not measured" in why
    assert cost.compiled_beats_sequential("cpu", "fedbat_cnn", 10**4, "graph") is None


def test_graph_mode_flag():
    """``--compile`` alone is the default mode, ``--compile graph`` the graph-replayed one, anything else refused."""
    from benchmark.cli.main import build_parser

    p = build_parser()
    assert p.parse_args(["run", "--compile"]).compile is True
    assert p.parse_args(["run", "--compile", "graph"]).compile == "graph"
    assert p.parse_args(["run"]).compile is None
    with pytest.raises(SystemExit):
        p.parse_args(["run", "--compile", "fast"])


def test_graph_mode_refuses_a_graph_break(monkeypatch):
    """A planted graph break in the local update (where a host sync would sit) stops a ``compile="graph"`` run
    with a message saying what to do, before any round finishes (``fullgraph=True``); without the plant the
    same run compiles (the slow test below)."""
    import torch

    from benchmark.sim import compiling, executors

    plain = executors._vmapped_local

    def broken(*args):
        torch._dynamo.graph_break()
        return plain(*args)

    monkeypatch.setattr(executors, "_vmapped_local", broken)
    torch._dynamo.reset()
    with pytest.raises(compiling.GraphCaptureError, match="compile='graph' needs its vmapped local update traced"):
        run(Experiment(**BASE, compile="graph"))


@pytest.mark.slow
def test_graph_mode_equals_the_uncompiled_step():
    """The graph-replayed step (on a CPU: inductor's code without a CUDA graph, traced whole) equals the
    uncompiled step to float tolerance over two rounds with partial batches and masked steps, compiled once;
    its outputs are copies (a replay reuses its output memory), so round 1's uplinks survive round 2."""
    from torch._dynamo.utils import counters

    a = run(Experiment(**BASE))
    graphs = counters["stats"]["unique_graphs"]
    b = run(Experiment(**BASE, compile="graph"))
    assert counters["stats"]["unique_graphs"] - graphs == 1
    assert b.execution["compile"] == "graph" and b.execution["compile_seconds"] > 0
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ("local_loss", "train_loss", "test_loss"):
            assert hb[k] == pytest.approx(ha[k], rel=1e-5, abs=1e-6), (k, ha["round"])
