"""benchmark/runs/plan.py: the how of a list of experiments decided once, with reasons in every record, and the
dry run planning exactly what the run runs."""
import dataclasses

import pytest
import torch

from benchmark import Experiment
from benchmark.runs import plan, store
from benchmark.campaign import runner, suite as campaign_suite


def _digits(**kw):
    base = dict(dataset="digits", model="logreg", num_clients=5, rounds=2, batch_size=64, eval_every=1)
    return Experiment(**{**base, **kw})


def test_device_resolved_once_with_its_reason():
    dev, why = plan.resolve_device("auto")
    assert dev.type == ("cuda" if torch.cuda.is_available() else "cpu") and why.startswith("auto:")
    assert plan.resolve_device("cpu") == (torch.device("cpu"), "asked for")
    with pytest.raises(ValueError, match="device must be auto, cpu or cuda"):
        plan.resolve_device("gpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees no CUDA device; use --device cpu"):
            plan.plan([_digits()], device="cuda")
    with pytest.raises(ValueError, match="got 'tpu'"):  # checked even when no cell is left to run
        plan.plan([], device="tpu")
    [job] = plan.plan([_digits(device="auto")], device="cpu")  # an override replaces the experiment's own
    assert job.device == "cpu" and job.experiments[0].device == "cpu" and job.reasons["device"] == "asked for"


def test_groups_by_default_and_says_why():
    exps = [_digits(seed=s, lr=lr) for lr in (0.1, 0.05) for s in range(3)] + [_digits(algorithm="fedbat")]
    jobs = plan.plan(exps)
    assert [len(j) for j in jobs] == [6, 1]
    g = jobs[0]
    assert g.executor == "vectorized" and g.batched == ("lr",) and "cpu default" in g.reasons["group"]
    assert all(e.executor == "vectorized" for e in g.experiments)
    rec = g.execution(2)
    assert rec["group_runs"] == 6 and rec["group_index"] == 2 and rec["batched_hyperparameters"] == ["lr"]
    assert {"device", "device_reason", "threads", "threads_reason", "group_reason", "reason"} <= set(rec)
    assert [list(j.indices) for j in plan.plan(exps, group_runs=4)] == [[0, 1, 2, 3], [4, 5], [6]]
    assert all(len(j) == 1 and j.reasons["group"] == "group_runs=1" for j in plan.plan(exps, group_runs=1))
    # the process backend's workers batch only the runs that differ in their seeds alone (one job per learning rate)
    by_seed = plan.plan(exps, backend="process", workers=2)
    assert [list(j.indices) for j in by_seed] == [[0, 1, 2], [3, 4, 5], [6]]
    assert all("backend process" in j.reasons["group"] for j in by_seed) and by_seed[0].batched == ()
    assert "only in their seeds" in by_seed[0].reasons["group"]
    with pytest.raises(ValueError, match="group_runs must be an integer >= 1"):
        plan.plan(exps, group_runs=0)


def test_what_runs_alone_and_why():
    # a sequential executor asked for: batching does not pay; a run watched step by step: sequential
    jobs = plan.plan([_digits(seed=s, executor="sequential") for s in range(3)])
    assert all(len(j) == 1 and j.executor == "sequential" for j in jobs)
    assert "batching does not pay" in jobs[0].reasons["group"]
    [job] = plan.plan([_digits()], observe_steps=True)
    assert job.executor == "sequential" and "every local step" in job.reasons["executor"]
    # an invalid cell is planned alone and fails when it runs (recorded, not raised by the plan)
    bad = dataclasses.replace(_digits(), algorithm="no_such_algorithm")
    jobs = plan.plan([_digits(), bad, _digits(seed=1)])
    assert [len(j) for j in jobs] == [2, 1] and "not planned" in jobs[1].reasons["executor"]


def test_threads_rule():
    assert plan.plan([_digits()], threads=None)[0].threads is None
    assert plan.plan([_digits()], threads=3)[0].threads == plan.Threads(3, "3 (asked for)")
    t = plan.plan([_digits()], backend="ray")[0].threads
    assert t.n == 1 and "Ray" in t.rule


def test_executor_planned_from_the_experiment_matches_the_run():
    """The planner decides the executor before any data is read; the run uses exactly that executor (the
    dry run and the run cannot disagree)."""
    from benchmark.perf import workloads

    cfg = workloads.Config("t", "fedbat_cnn", (1, 28, 28), 10, 2, 64, 1, samples_per_client=64)
    cnn = Experiment(dataset=workloads.synthetic_data(cfg), model="fedbat_cnn", num_clients=None, rounds=1,
                     local_steps=1, batch_size=64, eval_train_samples=64)
    for exp, executor in ((_digits(), "vectorized"), (cnn, "sequential")):  # the CPU rule: 1e8 FLOPs per step
        job = plan.plan_one(exp)
        assert job.executor == executor or plan.device_type() == "cuda"
        res = plan.run(dataclasses.replace(exp, rounds=1))
        assert res.config["executor_used"] == job.executor == res.execution["executor"]
        assert res.execution["reason"] == job.reasons["executor"]


SUITE = """
name = "planned"
description = "two batched jobs and two cells alone"
[defaults]
dataset = "digits"
model = "logreg"
num_clients = 5
rounds = 2
batch_size = 64
eval_every = 1
[matrix]
algorithm = ["fedavg", "fedbat"]
partition = ["iid", "labelcnt:2"]
seed = [0, 1]
[[override]]
match = { algorithm = "fedbat" }
set = { executor = "sequential" }
"""


def test_dry_run_plans_what_the_run_runs(tmp_path):
    path = tmp_path / "planned.toml"
    path.write_text(SUITE)
    suite = campaign_suite.load_suite(str(path))
    dry = runner.plan_suite(suite, str(tmp_path))
    assert dry["jobs"] == 5  # fedavg: 4 cells in one job; fedbat asked sequential: 4 cells alone
    assert dry["reasons"]["device"] == {"cpu: auto: torch sees no CUDA device": 5} or torch.cuda.is_available()
    assert dry["reasons"]["executor"]["sequential: asked for"] == 4  # the dry run says why, per job
    assert [why for why in dry["reasons"]["executor"] if why.startswith("vectorized: batched: 4 runs")]
    assert {"batching does not pay" in why for r in dry["rows"].values() for why in r["reason"]} == {True, False}
    with pytest.raises(campaign_suite.SuiteError, match="backend"):  # checked before anything is planned
        runner.plan_suite(suite, str(tmp_path), backend="slurm")
    # the process backend's workers batch only runs that differ in their seeds: fedavg's two partitions, 2 seeds each
    by_seed = runner.plan_suite(suite, str(tmp_path), backend="process")
    assert by_seed["jobs"] == 6 and all("backend process" in why for r in by_seed["rows"].values()
                                        for why in r["reason"])
    counts = runner.run_suite(suite, results_root=str(tmp_path), progress=False)  # the default: batched
    assert counts["ok"] == 8
    recs = store.read_records(runner.results_dir(tmp_path, "planned"))
    sizes = sorted(r["execution"].get("group_runs", 1) for r in recs)
    assert sizes == [1, 1, 1, 1, 4, 4, 4, 4]
    assert all(r["execution"]["device_reason"] and r["execution"]["group_reason"] for r in recs)
    fedbat = [r for r in recs if r["config"]["algorithm"] == "fedbat"]
    assert all(r["config"]["executor_used"] == "sequential" and "batching does not pay" in
               r["execution"]["group_reason"] for r in fedbat)


def test_a_failed_batched_job_runs_its_cells_alone(tmp_path, monkeypatch, capsys):
    exps = [_digits(seed=s) for s in range(3)]
    real = plan.execute

    def fails_when_batched(job, **kw):
        if len(job) > 1:
            raise RuntimeError("a planted failure (not a memory one: those are halved, tests/test_shared_runs.py)")
        yield from real(job, **kw)

    monkeypatch.setattr(plan, "execute", fails_when_batched)
    counts = runner.run_experiments(exps, tmp_path, progress=False)
    assert counts["ok"] == 3 and "running its unfinished cells one by one" in capsys.readouterr().err
    assert all("group_runs" not in r["execution"] for r in store.read_records(tmp_path))


def test_the_cli_dry_run_plans_with_its_backend_and_executor(tmp_path, capsys):
    """``fedrepro run --suite ... --dry-run`` plans as the run would: the process backend batches only the runs that
    differ in their seeds, an explicit ``--executor sequential`` runs every cell alone, each with its reason printed
    (planted defect: the CLI not passing ``--backend`` to the planner would batch the 4 fedavg cells as one job)."""
    from benchmark.cli.main import main

    path = tmp_path / "planned.toml"
    path.write_text(SUITE)
    base = ["run", "--suite", str(path), "--dry-run", "--results", str(tmp_path)]
    assert main(base) == 0
    out = capsys.readouterr().out
    assert "5 job(s)" in out and "executor (1 job): vectorized: batched: 4 runs" in out
    assert main(base + ["--backend", "process"]) == 0
    out = capsys.readouterr().out
    assert "6 job(s)" in out and "backend process: runs that differ only in their seeds" in out
    assert main(base + ["--executor", "sequential"]) == 0
    out = capsys.readouterr().out
    assert "8 job(s)" in out and "executor (8 jobs): sequential: asked for" in out
