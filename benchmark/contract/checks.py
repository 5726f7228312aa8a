"""The generic algorithm contract checks: what every registered algorithm must pass, built-in or plugin.

Each check takes an algorithm's registered name and raises ``AssertionError`` (saying what broke) or
``NotApplicable`` (the algorithm declares itself out of the check's scope, e.g. not vectorizable). The
repository's tests run them on every built-in algorithm (``tests/test_hyper.py``,
``tests/test_executor_equivalence.py``, ``tests/test_batched.py``, ``tests/test_contract.py``); the pytest
plugin ``benchmark.pytest_plugin`` runs them on a plugin's algorithms: ``pytest --fedrepro-plugin my_alg.py``.

* ``hyperparameters``: every ``Hyper`` field declares a constraint (``algorithms.core.hyper.param``), the
  defaults satisfy it, and each value outside it is refused in the one error format;
* ``executors_agree``: the sequential and the vectorized (``torch.func.vmap``) executors give the same history
  (losses within 1e-4 relative, bits equal; README, "How runs are made reproducible");
* ``deterministic``: the same seed twice gives bit-identical histories and models, another seed another one;
* ``record_round_trip``: the run record survives JSON, its checksum and config hash recompute, every round
  sends bits up and down, and a plugin's record carries the plugin's sha256;
* ``batches``: two runs differing in seed, partition, lr and a batchable hyperparameter run as one batched job
  with the records of the runs alone (``benchmark.runs.batched``);
* ``resumes``: a run stopped after round 2 and resumed from its checkpoint (``benchmark.runs.checkpoint``) equals
  the run never stopped, bit for bit: everything carried between rounds lives in the server and client states.
"""
from __future__ import annotations

import dataclasses
import json
import tempfile

import torch

import algorithms
from algorithms.core import hyper, make_hyper, plugins
from algorithms.core.hyper import HyperparameterError

from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.runs import batched, checkpoint, plan, store
from benchmark.runs.experiment import Experiment, config_hash
from benchmark.runs.plan import run


class NotApplicable(Exception):
    """The algorithm declares itself outside this check's scope (the check is skipped, with this reason)."""


# --------------------------------------------------------------------------------------------------
# A tiny offline federated problem (also the tests' ``tests.helpers``)


def tiny_dataset(num_clients: int = 4, d: int = 6, classes: int = 3, seed: int = 0,
                 uneven: bool = True) -> FederatedDataset:
    """Gaussian blobs split into clients of different sizes (so local step counts differ)."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, d, generator=g) * 2
    clients = []
    for i in range(num_clients):
        n = 20 + (7 * i if uneven else 0)
        y = torch.randint(0, classes, (n,), generator=g)
        x = centers[y] + torch.randn(n, d, generator=g)
        clients.append((x, y))
    yt = torch.randint(0, classes, (60,), generator=g)
    xt = centers[yt] + torch.randn(60, d, generator=g)
    return FederatedDataset.from_tensors(clients, (xt, yt), name=f"tiny{seed}", num_classes=classes)


def tiny_model(input_shape, num_classes):
    d = input_shape[0]
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.Tanh(), torch.nn.Linear(8, num_classes))


def tiny_experiment(algorithm: str = "fedavg", executor: str = "sequential", rounds: int = 3, seed: int = 0,
                    model=tiny_model, data: FederatedDataset | None = None, **kw) -> Experiment:
    """``algorithm`` on the tiny problem; keyword arguments go to ``Experiment``."""
    kw.setdefault("batch_size", 8)
    kw.setdefault("lr", 0.05)
    kw.setdefault("clients_per_round", 3)
    kw.setdefault("eval_every", 1)
    return Experiment(algorithm=algorithm, dataset=data or tiny_dataset(), num_clients=None, model=model,
                      rounds=rounds, executor=executor, seed=seed, **kw)


def run_tiny(algorithm: str = "fedavg", executor: str = "sequential", rounds: int = 3, seed: int = 0,
             model=tiny_model, data: FederatedDataset | None = None, **kw):
    """Run ``algorithm`` on the tiny problem (:func:`tiny_experiment`)."""
    return run(tiny_experiment(algorithm, executor, rounds, seed, model, data, **kw))


def assert_same_history(a, b, rtol: float = 1e-4, atol: float = 1e-5, keys=("test_loss", "train_loss")):
    """Two runs agree round by round (float tolerance) on losses and bits."""
    assert len(a.history) == len(b.history)
    for ha, hb in zip(a.history, b.history):
        assert ha["bits_up"] == hb["bits_up"] and ha["bits_down"] == hb["bits_down"], (ha, hb)
        for k in keys:
            if ha[k] is None:
                assert hb[k] is None
                continue
            assert abs(ha[k] - hb[k]) <= atol + rtol * abs(hb[k]), (k, ha["round"], ha[k], hb[k])


def _staged(name: str) -> bool:
    return name.startswith(("moon", "fedmlb"))  # MOON and FedMLB need a model of two stages


# --------------------------------------------------------------------------------------------------
# The checks


def _message(name, field, constraint, value):
    return f"{name}: {field} must be {constraint.describe()}, got {value!r}"


def hyperparameters(name: str) -> None:
    cls = algorithms.get_class(name)
    declared = hyper.fields(cls.Hyper)  # TypeError if a field declares no constraint
    defaults = make_hyper(cls, {})  # the paper's defaults pass
    for f, c in declared:
        assert c.accepts(getattr(defaults, f.name)), (name, f.name)
        outside = c.outside()
        assert outside, (name, f.name)
        for bad in outside:
            try:
                make_hyper(cls, {f.name: bad})
            except HyperparameterError as e:
                assert str(e).startswith(_message(name, f.name, c, bad)), str(e)
                assert (e.algorithm, e.name) == (name, f.name)
            else:
                raise AssertionError(f"{name}: {f.name}={bad!r} lies outside {c.describe()} but was accepted")


def executors_agree(name: str) -> None:
    if not algorithms.get_class(name).vectorizable:
        raise NotApplicable(f"{name} declares itself not vectorizable (runs sequentially under both)")
    a = run_tiny(name, "sequential", rounds=3)
    b = run_tiny(name, "vectorized", rounds=3)
    assert a.status == b.status == "ok", (a.message, b.message)
    assert b.config["executor_used"] == "vectorized"
    assert_same_history(a, b)


def _params(res) -> torch.Tensor:
    return torch.nn.utils.parameters_to_vector(res.model.parameters()).detach()


def deterministic(name: str) -> None:
    a, b = run_tiny(name, rounds=3), run_tiny(name, rounds=3)
    assert a.status == b.status == "ok", (a.message, b.message)
    keys = ("test_loss", "train_loss", "test_accuracy", "bits_up", "bits_down")
    for ha, hb in zip(a.history, b.history):
        assert [ha[k] for k in keys] == [hb[k] for k in keys], \
            f"{name}: the same seed gave another history in round {ha['round']}: {ha} vs {hb}"
    assert torch.equal(_params(a), _params(b)), f"{name}: the same seed gave another model"
    c = run_tiny(name, rounds=3, seed=1)
    assert not torch.equal(_params(a), _params(c)), f"{name}: seeds 0 and 1 gave the same model"


def record_round_trip(name: str) -> None:
    res = run_tiny(name, rounds=2)
    assert res.status == "ok", res.message
    rec = store.seal(json.loads(res.to_json()))
    again = json.loads(json.dumps(rec))
    assert store.problem(again, f"{again['config_hash']}.json") is None, store.problem(again)
    assert config_hash(again["config"]) == again["config_hash"] == res.config_hash
    for h in again["history"]:
        assert h["bits_up"] > 0 and h["bits_down"] > 0, f"{name}: round {h['round']} sends no bits: {h}"
    sha = plugins.source_sha256(name)
    if sha is not None:
        assert again["config"]["algorithm_source"] == f"sha256:{sha}"
        assert any(p.get("sha256") == sha and name in p.get("algorithms", []) for p in
                   again["code_version"]["plugins"]), again["code_version"]


def _digits(**kw):
    base = dict(dataset="digits", model="logreg", num_clients=6, clients_per_round=3, rounds=3, local_steps=2,
                batch_size=16, eval_every=1, eval_train_samples=300)
    return Experiment(**{**base, **kw})


def check_group(exps):
    """``plan.run_group(exps)`` equals each run alone (records, histories, models)."""
    grouped = plan.run_group(exps)
    for e, g in zip(exps, grouped):
        alone = run(e)
        assert g.config_hash == alone.config_hash == e.config_hash()
        assert g.status == alone.status == "ok", (g.message, alone.message)
        assert g.execution["group_runs"] == len(exps)
        # the stated tolerance: losses within 1e-4 relative + 1e-5 absolute, bits equal, every round
        assert_same_history(alone, g, keys=("test_loss", "train_loss", "local_loss"))
        assert torch.allclose(_params(alone), _params(g), rtol=1e-4, atol=1e-5)
    return grouped


def batches(name: str) -> None:
    """Two runs differing in seed, partition, lr (if batchable) and one batchable hyperparameter (the
    probe answers for every registered algorithm; non-float fields never enter its answer) equal their runs alone
    to the stated tolerance; three runs differing only in their seeds equal theirs bit for bit (to the stated
    tolerance on a machine whose batched matrix product is not batch-invariant: ``batch_invariant_matmul``)."""
    cls = algorithms.get_class(name)
    if not cls.vectorizable:
        raise NotApplicable(f"{name} declares itself not vectorizable (it is never batched)")
    free = batched.tensor_fields(name)
    assert free <= set(batched._float_fields(cls)) | {"lr"}
    other = {}
    for f in sorted(free - {"lr"}):
        values = batched._probe_values(cls, f)
        if values is not None:
            other = {f: values[1]}
            break
    lr2 = 0.05 if "lr" in free else 0.1
    kw = dict(algorithm=name, rounds=2, model="mlp" if _staged(name) else "logreg")
    exps = [_digits(seed=0, lr=0.1, **kw),
            _digits(seed=1, lr=lr2, partition="dirichlet:0.5", algorithm_args=other, **kw)]
    assert batched.group_key(exps[0]) == batched.group_key(exps[1])
    check_group(exps)
    # runs that differ only in their seeds (a look's paired seeds, which the claims batch): bit for bit alone where
    # this machine's batched matrix product is batch-invariant, else to the stated tolerance
    seeds = [_digits(seed=s, lr=0.1, partition="dirichlet:0.5", **kw) for s in (0, 1, 2)]
    if not batch_invariant_matmul():
        check_group(seeds)
        return
    for e, g in zip(seeds, plan.run_group(seeds)):
        alone = run(e)
        assert g.status == alone.status, (g.message, alone.message)
        assert _bits(g.history) == _bits(alone.history), f"seed {e.seed}: its history in a group of seeds is not " \
            "its history alone, bit for bit"
        assert torch.equal(_params(g), _params(alone)), f"seed {e.seed}: its model in a group of seeds"


def batch_invariant_matmul() -> bool:
    """Whether this machine's batched matrix product (``torch.bmm``, which the vectorized executor's layers become
    under vmap) gives each matrix the bits it gets in a smaller batch, at one thread and at the current count: what
    a group of seeds needs to equal its runs alone bit for bit. Probed on products of 7-, 13- and 16-row matrices (a
    minibatch's rows). Seen 2026-11-29: True on the sessions' Intel Xeons; False on an AMD EPYC (AVX-512, torch
    2.14.1), where 7- and 13-row products change their last bits with the batch, so that there a seed group
    equals its runs alone only to float32 rounding."""
    threads = torch.get_num_threads()
    try:
        for n in sorted({1, threads}):
            torch.set_num_threads(n)
            g = torch.Generator().manual_seed(0)
            for m in (7, 13, 16):
                a, w = torch.randn(6, m, 64, generator=g), torch.randn(6, 64, 10, generator=g)
                if not torch.equal(torch.bmm(a, w)[3:], torch.bmm(a[3:], w[3:])):
                    return False
        return True
    finally:
        torch.set_num_threads(threads)


def _bits(history: list) -> list:
    return [{k: v for k, v in h.items() if k != "wall_time"} for h in history]


class _Stop(Exception):
    """Stops a run from an observer, as Ctrl-C or the end of a machine's time would."""


class _StopAfter:
    def __init__(self, rounds: int):
        self.rounds = rounds

    def on_round_end(self, run, event):
        if event.round + 1 == self.rounds:
            raise _Stop


def resumes(name: str, rounds: int = 4, stop_after: int = 2) -> None:
    """A run stopped after ``stop_after`` rounds and resumed from its checkpoint (``benchmark.runs.checkpoint``) has
    the history and model of the same run never stopped, bit for bit: the algorithm keeps everything it carries
    between rounds in its server and client states."""
    exp = tiny_experiment(name, rounds=rounds)
    whole = run(exp)
    assert whole.status == "ok", whole.message
    with tempfile.TemporaryDirectory() as folder:
        job = dataclasses.replace(plan.plan_one(exp), checkpoints=folder, checkpoint_every_s=0.0)
        try:
            list(plan.execute(job, observers=[[_StopAfter(stop_after + 1)]]))
        except _Stop:
            pass
        else:
            raise AssertionError(f"{name}: the run was not stopped")
        saved = checkpoint.saved_round(checkpoint.path(folder, exp.config_hash()))
        assert saved == stop_after, saved
        [(_, again)] = list(plan.execute(job))
    assert again.execution.get("resumed_from_round") == stop_after, again.execution
    strip = lambda h: [{k: v for k, v in e.items() if k != "wall_time"} for e in h]  # noqa: E731
    hint = ("; keep everything a run carries from round to round in the server state (init/aggregate) or the "
            "client states (client_init/local_update), never on the algorithm object")
    for a, b in zip(strip(whole.history), strip(again.history)):
        assert a == b, f"{name}: resumed at round {stop_after}, round {a['round']} differs: {b} vs {a}{hint}"
    assert len(whole.history) == len(again.history)
    assert torch.equal(_params(whole), _params(again)), f"{name}: resumed at round {stop_after}, another model{hint}"


CHECKS = {"hyperparameters": hyperparameters, "executors_agree": executors_agree, "deterministic": deterministic,
          "record_round_trip": record_round_trip, "batches": batches, "resumes": resumes}
