"""The numerics policy (benchmark.sim.numerics): applied by one function to runs and to validate, recorded."""
import torch

from benchmark.sim import numerics
from benchmark.perf import validate
from benchmark.runs.experiment import Experiment
from benchmark.runs.plan import run

TINY = dict(dataset="digits", num_clients=3, rounds=1, local_steps=1, batch_size=16, eval_train_samples=50,
            executor="vectorized", device="cpu")


def test_applied_sets_and_restores_the_flags():
    before = numerics._flags()
    with numerics.applied(numerics.Numerics(tf32=True, deterministic=True)):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert torch.are_deterministic_algorithms_enabled() and torch.backends.cudnn.deterministic
    assert numerics._flags() == before


def test_determinism_is_switched_only_when_it_changes(monkeypatch):
    """torch.use_deterministic_algorithms costs 5-20 ms a call on a CPU: a run under an unchanged policy must not
    pay it twice per job (it made batched digits jobs ~15% slower than at 9a676fb)."""
    calls = []
    real = torch.use_deterministic_algorithms
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda mode, **kw: (calls.append(mode), real(mode, **kw)))
    torch.use_deterministic_algorithms(False)
    calls.clear()
    with numerics.applied(numerics.Numerics(deterministic=False)):
        pass
    assert calls == []
    with numerics.applied(numerics.Numerics(deterministic=True)):
        assert torch.are_deterministic_algorithms_enabled()
    assert calls == [True, False] and not torch.are_deterministic_algorithms_enabled()


def test_a_run_applies_and_records_the_process_policy():
    torch.backends.cudnn.allow_tf32 = True  # torch's own default: what runs used to leave on
    r = run(Experiment(**TINY))
    n = r.environment["numerics"]
    assert n["policy"] == {"tf32": False, "deterministic": False} and not n["tf32_cudnn"] and not n["tf32_matmul"]
    with numerics.using(numerics.Numerics(tf32=True)):
        n = run(Experiment(**TINY)).environment["numerics"]
    assert n["policy"]["tf32"] and n["tf32_cudnn"] and n["tf32_matmul"]
    assert torch.backends.cudnn.allow_tf32  # restored after the run


def test_validate_runs_under_the_policy_it_reports(monkeypatch):
    """validate sets the policy with ``numerics.using`` and every run it compares applies and records it; a
    validate that switched TF32 by hand (the old ``_tf32``) would show another policy in its runs."""
    r = validate.validate("cpu", ("fedavg",), rounds=1, problem_names=("digits/mlp",), tf32=True)
    assert r["numerics"] == {"tf32": True, "deterministic": False}
    assert r["numerics_in_runs"] == ['{"deterministic": false, "tf32": true}']


def test_run_deterministic_reaches_single_runs_and_suite_workers_and_is_recorded(tmp_path, capsys):
    """`fedrepro run --deterministic`: the records of a single run and of a suite's cells in worker processes
    state deterministic algorithms on (the policy travels with each job, not in the parent's torch flags); the
    parent's flags are left as they were; without the flag, off."""
    import json

    from benchmark.cli import main

    before = numerics._flags()
    assert main(["run", "--rounds", "1", "--num-clients", "3", "--local-steps", "1", "--json", "--no-progress",
                 "--deterministic", "--out", str(tmp_path / "single")]) == 0
    [rec] = json.loads(capsys.readouterr().out)
    n = rec["environment"]["numerics"]
    assert n["policy"]["deterministic"] and n["deterministic_algorithms"]
    assert numerics._flags() == before and not numerics.policy().deterministic
    suite = tmp_path / "mine.toml"
    suite.write_text('name = "mine"\n[defaults]\ndataset = "digits"\nmodel = "logreg"\nnum_clients = 3\nrounds = 1\n'
                     'local_steps = 1\n[matrix]\nseed = [0, 1]\n')
    for flag, on in ((["--deterministic"], True), ([], False)):
        out = tmp_path / f"out{on}"
        assert main(["run", "--suite", str(suite), "--out", str(out), "--backend", "process", "--jobs", "2",
                     "--no-progress"] + flag) == 0
        recs = [json.loads(p.read_text()) for p in out.glob("*.json")]
        assert len(recs) == 2
        for r in recs:
            assert r["environment"]["numerics"]["deterministic_algorithms"] is on
            assert r["environment"]["numerics"]["policy"]["deterministic"] is on
