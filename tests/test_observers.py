"""The engine's observers (benchmark/sim/engine.py): they see every round, client and step, change no number,
and both executors give them the same diagnostics."""
import math

import numpy as np
import pytest
import torch

import algorithms
from algorithms.core import Algorithm, Message, diagnose
from benchmark import Experiment, run
from benchmark.sim import engine
from benchmark.sim import executors as ex
from benchmark.runs.build import prepare
from tests.helpers import run_tiny, tiny_dataset, tiny_model


def _strip(history):
    return [{k: v for k, v in h.items() if k != "wall_time"} for h in history]


class Everything(engine.Observer):
    """Records every event (diagnostics on)."""

    diagnostics = True

    def __init__(self):
        self.events = []
        self.params = []
        self.clients = []
        self.diags = []

    def on_start(self, run):
        self.events.append("start")
        self.params.append(run.alg.global_params(run.server).clone())

    def on_round_start(self, run, e):
        self.events.append(("round_start", e.round, tuple(e.client_ids.tolist())))

    def on_client(self, run, e):
        self.clients.append((e.round, e.client_id, e.uplink.bits, e.local_loss))
        self.diags.append((e.round, e.client_id, e.diagnostics))

    def on_round_end(self, run, e):
        self.events.append(("round_end", e.round))
        self.params.append(e.params.clone())
        assert e.server_before is not e.server

    def on_end(self, run, result):
        self.events.append("end")


@pytest.mark.parametrize("executor", ["sequential", "vectorized"])
def test_observers_change_no_number_and_see_every_round_and_client(executor):
    plain = run_tiny("scaffold", executor, rounds=3, seed=2)
    obs = Everything()
    watched = run(Experiment(algorithm="scaffold", dataset=tiny_dataset(), num_clients=None, model=tiny_model,
                             rounds=3, executor=executor, seed=2, batch_size=8, lr=0.05, clients_per_round=3),
                  observers=[obs])
    assert _strip(plain.history) == _strip(watched.history)
    assert obs.events[0] == "start" and obs.events[-1] == "end"
    starts = [e for e in obs.events if e[0] == "round_start"]
    assert [e[1] for e in starts] == [0, 1, 2] and all(len(e[2]) == 3 for e in starts)
    assert len(obs.clients) == 9
    for r, h in enumerate(watched.history):  # the per-client uplinks add up to the round's bits
        assert sum(b for rr, _, b, _ in obs.clients if rr == r) == h["bits_up"]
        assert np.mean([v for rr, _, _, v in obs.clients if rr == r]) == pytest.approx(h["local_loss"])
    final = torch.nn.utils.parameters_to_vector(watched.model.parameters())
    assert len(obs.params) == 4 and torch.equal(obs.params[-1], final)


class _Recording(Algorithm):
    """FedAvg that sends diagnostics: the loss at every local step and the update norm once."""

    name = "recording_fedavg_test_only"

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        opt = ctx.optimizer

        def step(carry, batch, s):
            p, st = carry
            loss, g = ctx.loss_and_grad(p, batch)
            diagnose(ctx, "loss", lambda: torch.stack([loss.detach(), torch.linalg.vector_norm(g)]))
            return opt.step(p, g, st, ctx.lr)

        w, _ = ctx.loop(step, (w0, opt.init(w0)))
        diagnose(ctx, "update_norm", lambda: torch.linalg.vector_norm(w - w0))
        return Message.dense(w - w0, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        return {**server_state, "params": server_state["params"] + self.weighted_mean(uplinks["delta"], weights)}


def _simulate(executor, observers, rounds=2, **cfg_kw):
    exp = Experiment(dataset=tiny_dataset(), num_clients=None, model=tiny_model, rounds=rounds, seed=1,
                     batch_size=8, lr=0.05, clients_per_round=3)
    p = prepare(exp, "cpu")
    alg = _Recording(algorithms.core.NoHyperparameters(), p.fmodel.layout, len(p.parts))
    cfg = p.cfg if not cfg_kw else engine.LoopConfig(**{**p.cfg.__dict__, **cfg_kw})
    state = engine.start(alg, p.fmodel, p.data, p.parts, cfg, p.optimizer)
    [(_, res)] = list(engine.run_rounds([state], executor, observers=[observers]))
    return res, p


def test_both_executors_give_the_same_diagnostics_and_mask_padded_steps():
    got = {}
    for executor in ("sequential", "vectorized"):
        obs = Everything()
        _simulate(executor, [obs])
        got[executor] = obs.diags
    steps_seen = set()
    for (r1, c1, d1), (r2, c2, d2) in zip(got["sequential"], got["vectorized"]):
        assert (r1, c1) == (r2, c2) and set(d1) == set(d2) == {"loss", "update_norm"}
        n = d1["loss"].shape[0]  # the client's own steps; vectorized pads to the round's maximum with NaN
        steps_seen.add(n)
        assert torch.allclose(d1["loss"], d2["loss"][:n], rtol=1e-4, atol=1e-6)
        assert torch.isnan(d2["loss"][n:]).all()
        assert d1["update_norm"].shape == (1,)
        assert torch.allclose(d1["update_norm"], d2["update_norm"], rtol=1e-4, atol=1e-6)
    assert len(steps_seen) > 1  # clients with different step counts: masking was exercised


def test_diagnostics_are_off_unless_asked_and_cost_nothing():
    calls = []

    class Quiet(engine.Observer):
        def on_client(self, run, e):
            calls.append(e.diagnostics)

    _simulate("vectorized", [Quiet()])
    assert calls and all(d == {} for d in calls)


class Steps(engine.Observer):
    steps = True

    def __init__(self):
        self.seen = []

    def on_step(self, run, e):
        self.seen.append((e.round, e.client_id, e.step, float(e.loss), float(sum((g ** 2).sum() for g in e.grads))))


def test_per_step_observation_runs_sequentially_and_sees_every_step():
    # the planner gives a run watched step by step the sequential executor, and says why
    r = run(Experiment(dataset=tiny_dataset(), num_clients=None, model=tiny_model, rounds=1, batch_size=8,
                       executor="vectorized"), observers=[Steps()])
    assert r.config["executor_used"] == "sequential" and "every local step" in r.execution["reason"]
    with pytest.raises(ValueError, match="sequential executor"):  # the engine never falls back on its own
        _simulate("vectorized", [Steps()])
    obs = Steps()
    res, p = _simulate("sequential", [obs])
    assert res.executor == "sequential"
    # the steps of each client are the engine's schedule: epochs of ceil(n / B) batches
    rng = np.random.default_rng([1, 1])
    per_round = {}
    for r, cid, s, loss, g2 in obs.seen:
        per_round.setdefault((r, cid), []).append(s)
        assert math.isfinite(loss) and g2 > 0
    for r in range(2):
        ids = np.sort(rng.choice(len(p.parts), 3, replace=False))
        for cid in ids.tolist():
            assert per_round[(r, cid)] == list(range(ex.steps_for(len(p.parts[cid]), 1, None, 8)))


def test_init_replaces_the_seeded_parameters_and_enters_the_config():
    exp = Experiment(dataset=tiny_dataset(), num_clients=None, model=tiny_model, rounds=1, seed=0, batch_size=8)
    d = prepare(exp, "cpu").fmodel.layout.size
    obs = Everything()
    init = torch.linspace(-1, 1, d)
    res = run(exp, observers=[obs], init=init)
    assert torch.equal(obs.params[0], init)
    assert res.config["init_fingerprint"] and res.config_hash != run(exp).config_hash
    with pytest.raises(ValueError, match="init has"):
        run(exp, init=torch.zeros(d + 1))


def test_lr_schedule_replaces_the_multiplicative_decay():
    seen = []

    class Lr(engine.Observer):
        def on_round_start(self, run, e):
            seen.append(e.lr)

    _simulate("sequential", [Lr()], rounds=3, lr_schedule=lambda r: 1.0 / (r + 4))
    assert seen == [0.25, 0.2, 1 / 6]
