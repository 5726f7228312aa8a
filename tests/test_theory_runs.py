"""theory/runs.py: the claims run the benchmark's own path (benchmark.runs.plan.run: experiment.prepare + the engine's round loop) with
observers, and nothing in theory/ patches the code it checks."""
import ast
import pathlib

import numpy as np
import pytest
import torch

from benchmark import Experiment, run
from theory import problems
from theory.runs import Diagnostics, InverseTimeSGD, StepGradSq, run_problem, trace


def _exp(**kw):
    p = problems.quadratic(num_clients=4, d=5, samples_per_client=10, seed=3)
    base = dict(algorithm="gradma", dataset=p.data, num_clients=None, model=p.model, clients_per_round=2, rounds=4,
                local_steps=2, batch_size=None, lr=0.05, seed=1, device="cpu", executor="sequential")
    base.update(kw)
    return Experiment(**base), p


def test_trace_is_the_benchmark_run_and_records_every_round():
    exp, _ = _exp()
    tr = trace(exp, server_keys=("qp_g_correction",))
    assert tr.params.shape == (5, 5) and len(tr.server["qp_g_correction"]) == 4 and tr.client_ids.shape == (4, 2)
    ref = torch.nn.utils.parameters_to_vector(run(exp).model.parameters()).double()
    assert torch.equal(tr.params[-1], ref)
    # a given initial vector replaces the seeded initialisation
    init = torch.arange(5, dtype=torch.float64)
    assert torch.equal(trace(exp, init=init).params[0], init)


def test_run_problem_with_a_schedule_by_hand():
    # one client, full batch, tau = 2: w <- w - eta_r,s grad F with eta_r,s = 1/(1/lr(r) + c s)
    p = problems.quadratic(num_clients=1, d=3, sigma_g=0.0, samples_per_client=6, seed=2)
    theta0 = p.optimum + 1.0
    g = StepGradSq()
    tr = run_problem(p, "lossless", {}, rounds=3, local_steps=2, batch_size=None, lr=lambda r: 1.0 / (r + 2),
                     step_decay=0.5, seed=0, theta0=theta0, observers=[g])
    X, y = p.data.x_train.double(), p.data.y_train.double()
    w, sq = theta0.float().double().clone(), []
    for r in range(3):
        for s in range(2):
            grad = 2 * X.T @ (X @ w - y) / len(y)
            sq.append(float(grad @ grad))
            w = w - grad / (r + 2.0 + 0.5 * s)
    assert tr.params[-1].numpy() == pytest.approx(w.numpy(), rel=1e-5, abs=1e-6)
    assert tr.executor == "sequential"  # per-step observation
    assert g.array(tr.client_ids).reshape(-1) == pytest.approx(sq, rel=1e-4)


def test_inverse_time_sgd_is_plain_sgd_without_decay():
    opt = InverseTimeSGD(0.0)
    p, st = torch.ones(3), opt.init(torch.ones(3))
    for _ in range(3):
        p, st = opt.step(p, torch.full((3,), 2.0), st, 0.25)
    assert torch.allclose(p, torch.full((3,), -0.5))


def test_bherd_diagnostics_are_the_stored_steps():
    # BHerd's diagnostics: the stored steps z_l add up to w_t - w_K, the kept rows are round(alpha tau)
    exp, p = _exp(algorithm="bherd", algorithm_args={"alpha": 0.5}, local_steps=None, local_epochs=1, batch_size=4,
                  clients_per_round=None, rounds=2)
    d = Diagnostics()
    tr = trace(exp, observers=[d])
    assert len(d.rounds) == 2 and all(len(r) == 4 for r in d.rounds)
    for cid, diag in d.rounds[0]:
        v, sel = diag["herd_valid"][0], diag["herd_selected"][0]
        tau = int(v.sum())
        assert tau == int(np.ceil(len(p.data.clients[cid]) / 4)) and int(sel.sum()) == int(np.floor(0.5 * tau + 0.5))
        assert not sel[~v].any()
    # the server applies the weighted mean of -(1/alpha) * (kept steps)
    w = np.array([len(p.data.clients[c]) for c, _ in d.rounds[0]], dtype=float)
    w /= w.sum()
    upd = sum(wi * (diag["herd_steps"][0][diag["herd_selected"][0]].double().sum(0) / 0.5)
              for wi, (_, diag) in zip(w, d.rounds[0]))
    assert torch.allclose(tr.params[1], tr.params[0] - upd, atol=1e-5)


PATCH_TARGETS = {"aggregate", "select", "encode", "decode", "local_update", "broadcast", "init", "project_small",
                 "project_large", "step"}


def test_theory_patches_nothing():
    # no assignment to an attribute named like a method of the checked code (alg.aggregate = ..., qp.project_small
    # = ...), and no proxy classes forwarding __getattr__ to an algorithm
    root = pathlib.Path(__file__).resolve().parents[1] / "theory"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    assert not (isinstance(t, ast.Attribute) and t.attr in PATCH_TARGETS), (path, t.attr)
            if isinstance(node, ast.FunctionDef):
                assert node.name != "__getattr__", path
