"""Checkpoints inside a run (``benchmark.runs.checkpoint``): a stopped run resumes at the round it had reached, with
the history and model of a run that never stopped; the runner resumes suites so and cleans up; checkpoints of
other code, or that do not line up in a batched job, are ignored with a message; a failed write does not stop
the run. Every registered algorithm passes ``contract.resumes`` (tests/test_contract.py)."""
import dataclasses
import json
import shutil
import subprocess

import pytest
import torch

from benchmark.runs import checkpoint, plan, record
from benchmark.contract import checks as contract
from benchmark.sim import engine
from benchmark.campaign import runner
from benchmark.contract.checks import tiny_experiment


def _strip(history):
    return [{k: v for k, v in e.items() if k != "wall_time"} for e in history]


def _params(res):
    return torch.nn.utils.parameters_to_vector(res.model.parameters()).detach()


def test_a_planted_defect_that_forgets_the_sampling_state_fails_the_check(monkeypatch):
    """The check can fail: restoring everything but the client-sampling generator changes which clients a
    resumed run samples (4 clients, 3 a round), and ``contract.resumes`` says so."""
    contract.resumes("fedavg")  # the real restore passes
    real = checkpoint.restore

    def forgets(run, st):
        real(run, {**st, "sample_rng": None})

    monkeypatch.setattr(checkpoint, "restore", forgets)
    with pytest.raises(AssertionError, match="resumed at round 2"):
        contract.resumes("fedavg")


def _stop_at(monkeypatch, rounds: int):
    """Ctrl-C in the middle of the run's round ``rounds`` + 1 (after ``rounds`` rounds were saved)."""
    real = engine.end_round

    def end_round(run, p, out, observers=()):
        if p.round == rounds:
            raise KeyboardInterrupt
        return real(run, p, out, observers)

    monkeypatch.setattr(engine, "end_round", end_round)
    return lambda: monkeypatch.setattr(engine, "end_round", real)


@pytest.mark.parametrize("group", [1, 3])
def test_the_runner_resumes_a_stopped_suite_where_it_was(tmp_path, monkeypatch, group):
    """A suite stopped by Ctrl-C in round 4 of 5 (alone, or as a batched job of 3 seeds) resumes at round 3 on the
    next call: the records equal those of runs never stopped (bit for bit), say where they resumed, and no
    checkpoint is left once the records are written."""
    exps = [contract._digits(algorithm="scaffold", rounds=5, seed=s) for s in (0, 1, 2)]
    whole = [plan.run(e) for e in exps]
    undo = _stop_at(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        runner.run_experiments(exps, tmp_path, progress=False, group_runs=group, checkpoint_every_s=0.0)
    undo()
    saved = list((tmp_path / checkpoint.FOLDER).glob("*.pt"))
    assert len(saved) == (3 if group == 3 else 1)
    counts = runner.run_experiments(exps, tmp_path, progress=False, group_runs=group, checkpoint_every_s=0.0)
    assert counts["ok"] == 3
    recs = {r["config_hash"]: r for r in (json.loads(p.read_text()) for p in tmp_path.glob("*.json"))}
    for e, w in zip(exps, whole):
        rec = recs[e.config_hash()]
        assert _strip(rec["history"]) == _strip(w.history)
        assert rec["final"]["test_loss"] == w.final["test_loss"]
    resumed = [recs[e.config_hash()]["execution"].get("resumed_from_round") for e in exps]
    assert resumed == ([3, 3, 3] if group == 3 else [3, None, None])
    assert not list((tmp_path / checkpoint.FOLDER).glob("*"))


def _stopped_job(folder, exps, rounds: int):
    job = dataclasses.replace(plan.group_job(exps) if len(exps) > 1 else plan.plan_one(exps[0]),
                              checkpoints=str(folder), checkpoint_every_s=0.0)
    with pytest.raises(contract._Stop):
        list(plan.execute(job, observers=[[contract._StopAfter(rounds + 1)]] * len(exps)))
    return job


def test_a_batched_job_resumes_only_as_a_whole(tmp_path, capsys):
    exps = [contract._digits(algorithm="fedavg", rounds=4, seed=s) for s in (0, 1)]
    job = _stopped_job(tmp_path, exps, 2)
    checkpoint.path(tmp_path, exps[1].config_hash()).unlink()
    results = dict(plan.execute(job))
    assert "not one round" in capsys.readouterr().err
    assert all("resumed_from_round" not in r.execution for r in results.values())
    for i, e in enumerate(exps):
        assert _strip(results[i].history) == _strip(plan.run(e).history)


def test_a_checkpoint_of_other_code_is_ignored(tmp_path, capsys):
    exp = tiny_experiment("fedavg", rounds=4)
    job = _stopped_job(tmp_path, [exp], 2)
    f = checkpoint.path(tmp_path, exp.config_hash())
    st = torch.load(f, weights_only=False)
    checkpoint.write(f, {**st, "code_version": {**st["code_version"], "git_commit": "0" * 40}})
    [(_, res)] = list(plan.execute(job))
    assert "written by other code" in capsys.readouterr().err
    assert "resumed_from_round" not in res.execution and len(res.history) == 4


def test_a_checkpoint_of_a_commit_that_changed_no_code_is_resumed(tmp_path, capsys, monkeypatch):
    """A commit between that touched no code folder (``record.same_run_code``) keeps the checkpoint: the run
    resumes and ends as one that never stopped."""
    exp = tiny_experiment("fedavg", rounds=4)
    job = _stopped_job(tmp_path, [exp], 2)
    f = checkpoint.path(tmp_path, exp.config_hash())
    st = torch.load(f, weights_only=False)
    checkpoint.write(f, {**st, "code_version": {**st["code_version"], "git_commit": "e" * 40}})
    monkeypatch.setattr(record, "same_run_code", lambda a, b: a["git_commit"] == "e" * 40)
    [(_, res)] = list(plan.execute(job))
    assert "whose algorithms, benchmark, theory are those of" in capsys.readouterr().err
    assert res.execution["resumed_from_round"] == 2
    assert _strip(res.history) == _strip(plan.run(exp).history)


def _git(root, *args):
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_same_run_code_reads_only_the_code_folders(tmp_path):
    """Commits that differ outside ``record.CODE_DIRS``, or in ``record.NOT_RUN_CODE`` under them (a report's code, a
    document), compute the same runs; one that changed a file a run reads (the planted defect), an unknown commit,
    a dirty tree or another package version do not."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    _git(tmp_path, "init", "-q")
    (tmp_path / "algorithms").mkdir()
    (tmp_path / "algorithms" / "a.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("one\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "a")
    a = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "README.md").write_text("two\n")
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text("{}\n")
    (tmp_path / "benchmark" / "reports").mkdir(parents=True)
    (tmp_path / "benchmark" / "reports" / "plots.py").write_text("x = 1\n")
    (tmp_path / "benchmark" / "suites").mkdir()
    (tmp_path / "benchmark" / "suites" / "FORMAT.md").write_text("one\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "docs")
    b = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "algorithms" / "a.py").write_text("x = 2\n")
    _git(tmp_path, "commit", "-qam", "code")
    c = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "benchmark" / "suites" / "grid.toml").write_text("x = 1\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "a suite: read by runs")
    d = _git(tmp_path, "rev-parse", "HEAD")
    v = lambda commit, **kw: {"package": "0.4.0", "git_commit": commit, "git_dirty": False, **kw}  # noqa: E731
    same = lambda x, y: record.same_run_code(x, y, root=str(tmp_path))  # noqa: E731
    assert same(v(a), v(b)) and same(v(b), v(a))
    assert not same(v(a), v(c)) and not same(v(b), v(c)) and not same(v(c), v(d))
    assert not same(v(a), v("0" * 40))
    assert not same(v(a, git_dirty=True), v(b)) and not same(v(a), v(b, package="0.5.0"))
    assert not same(v(a, plugins=[{"sha256": "1"}]), v(b, plugins=[{"sha256": "2"}]))
    assert not same(None, v(b)) and not same(v(None), v(b))


def test_an_unwritable_checkpoint_folder_does_not_stop_the_run(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    exp = tiny_experiment("fedavg", rounds=3)
    job = dataclasses.replace(plan.plan_one(exp), checkpoints=str(blocker / "ckpt"), checkpoint_every_s=0.0)
    [(_, res)] = list(plan.execute(job))
    assert res.status == "ok" and len(res.history) == 3
    err = capsys.readouterr().err
    assert err.count("could not write a checkpoint") == 1


def test_saves_are_spaced_by_the_interval(tmp_path, monkeypatch):
    """With the default interval no round of a short run is saved (a save costs a write of every state)."""
    writes = []
    monkeypatch.setattr(checkpoint, "write", lambda f, st: writes.append(st["round"]))
    exp = tiny_experiment("fedavg", rounds=4)
    list(plan.execute(dataclasses.replace(plan.plan_one(exp), checkpoints=str(tmp_path))))
    assert writes == []
    list(plan.execute(dataclasses.replace(plan.plan_one(exp), checkpoints=str(tmp_path), checkpoint_every_s=0.0)))
    assert writes == [1, 2, 3]  # never after the last round: the record follows at once


def test_status_lists_the_resumable_runs_and_counts_only_their_rounds_left(tmp_path, monkeypatch):
    """`fedrepro status` names each unfinished run with a checkpoint and its round, and the time left counts only
    the rounds a checkpoint does not hold."""
    from benchmark.runs import cost
    from benchmark.campaign import status

    import shutil

    from benchmark.campaign import cell_claims

    exps = [contract._digits(algorithm="fedavg", rounds=5, seed=s) for s in (0, 1)]
    folder = tmp_path / "mine" / "0.3.0"
    undo = _stop_at(monkeypatch, 3)
    with pytest.raises(KeyboardInterrupt):
        runner.run_experiments(exps, folder, progress=False, group_runs=1, checkpoint_every_s=0.0)
    undo()
    shutil.rmtree(cell_claims.claims_dir(folder), ignore_errors=True)
    assert not list(folder.glob("*.json"))  # a folder with checkpoints alone is listed all the same
    assert status.version_folders(tmp_path) == [folder]
    st = status.folder_status(folder)
    assert [(c["cell"], c["round"]) for c in st["checkpointed"]] == [(exps[0].config_hash(), 3)]
    text = status._render_folder(st, {"device": "cpu", "cost_model": None})
    assert f"resumable: 1 unfinished run(s) with a checkpoint: {exps[0].config_hash()} at round 3" in text
    model = cost.CostModel({"sequential": 1e-3, "vectorized": 1e-3}, {"sequential": 1e-12, "vectorized": 1e-12},
                           0.0, "test")
    full = status._seconds_left(exps, [], [], model, "cpu")
    one = status._seconds_left(exps[:1], [], [], model, "cpu")
    assert status._seconds_left(exps, [], [], model, "cpu", [0.6, 0.0]) == pytest.approx(full - 0.6 * one)


def test_a_batched_runs_checkpoint_holds_its_own_states_only(tmp_path):
    """In a batched job the states are views into the job's stacked tensors; a checkpoint of one run must not
    carry the others' (torch.save writes a view's whole storage: 2.7x for SCAFFOLD in a group of 3 before)."""
    import os

    exps = [contract._digits(algorithm="scaffold", model="mlp", rounds=4, seed=s, num_clients=10,
                             clients_per_round=10) for s in (0, 1, 2)]
    sizes = {}
    for label, job in (("alone", plan.plan_one(exps[0])), ("group", plan.group_job(exps))):
        folder = tmp_path / label
        j = dataclasses.replace(job, checkpoints=str(folder), checkpoint_every_s=0.0)
        with pytest.raises(contract._Stop):
            list(plan.execute(j, observers=[[contract._StopAfter(3)]] * len(j)))
        sizes[label] = os.path.getsize(checkpoint.path(folder, exps[0].config_hash()))
    assert sizes["group"] <= 1.05 * sizes["alone"], sizes
