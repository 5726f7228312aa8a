"""LFL (Amiri et al., Alg. 1) and its baselines lossless, LB, LGM, LTGM: equivalences with FedAvg, theta_hat
tracking bit for bit, the PS update from theta_hat(t), error feedback by hand, bit counts, validation."""
import math

import pytest
import torch

import algorithms
from algorithms import compress
from algorithms.core import optim
from algorithms.core import CounterRng, ParamLayout, RoundInfo, make_hyper, stack_trees
from algorithms.lfl import LFL
from algorithms.compress.downlink import decode_exact, encode_exact
from algorithms.ltgm import fwht, padded_length
from tests.helpers import assert_same_history, run_tiny

D_TINY = 83  # parameters of tests.helpers.tiny_model on the tiny problem (6 -> 8 -> 3)


def B(n):  # bits of an n-bit string padded to whole bytes
    return 8 * math.ceil(n / 8)


def q_bits(d, q):  # LFL's Q(., q) as packed: x_max, x_min, signs, levels at ceil(log2(q+1)) bits
    return 64 + B(d) + B(d * (q).bit_length())


def exact_bits(d):  # the paper's 33 bits per entry: packed sign bits + fp32 magnitudes
    return 32 * d + B(d)


def make(name, d=4, num_clients=2, **args):
    return algorithms.make(name, ParamLayout.single(d), num_clients, args)


def t(*xs):
    return torch.tensor(xs, dtype=torch.float32)


def info(k, m=None, round_=0):
    return RoundInfo(round_, torch.arange(k), m or k, torch.ones(k), torch.ones(k, dtype=torch.int64), 1.0)


def fake_uplinks(alg, *updates):
    """Stacked uplinks as the devices would send them (q2=None: exact fp32 updates)."""
    return stack_trees([alg.uplink.encode(u)[0] for u in updates])


class FakeCtx:
    """LocalContext for hand computations: one SGD step with lr 1 on 0.5 ||p - b||^2 lands on b."""

    def __init__(self, target, key=0):
        self.batches = [torch.as_tensor(target, dtype=torch.float32)]
        self.lr, self.num_steps, self.steps = 1.0, 1, torch.tensor(1)
        self.optimizer = optim.SGD()
        self.rng = CounterRng(key)

    def loss_and_grad(self, p, batch):
        return torch.zeros(()), p - batch

    def loop(self, step, carry):
        for s in range(self.num_steps):
            carry = step(carry, self.batches[s], s)
        return carry


def same_losses(a, b, exact=True, rtol=1e-4, atol=1e-5):
    assert a.status == b.status == "ok"
    for ha, hb in zip(a.history, b.history, strict=True):
        for k in ("test_loss", "train_loss", "local_loss"):
            if exact:
                assert ha[k] == hb[k], (k, ha["round"], ha[k], hb[k])
            else:
                assert abs(ha[k] - hb[k]) <= atol + rtol * abs(hb[k]), (k, ha["round"], ha[k], hb[k])


FULL = {"clients_per_round": None, "rounds": 4}


# ------------------------------------------------------------------------------------------ equivalences


def test_lfl_without_quantization_is_fedavg():
    ref = run_tiny("fedavg", **FULL)
    lfl = run_tiny("lfl", algorithm_args={"q1": None, "q2": None}, **FULL)
    assert_same_history(lfl, ref)  # identity messages are fp32 both ways: same bits too
    assert lfl.history[0]["bits_down"] == 4 * 32 * D_TINY


@pytest.mark.parametrize("name, args, exact", [
    ("lossless", {}, True),
    ("lb", {"q2": None}, True),
    ("lgm", {"q1": None, "q2": None}, True),
    ("ltgm", {"q1": None, "q2": None}, False),  # the Hadamard transform and its inverse round in fp32
    ("lfl", {"q1": None, "q2": None}, True),  # partial participation: the PS resends theta(t) exactly
])
def test_baselines_without_quantization_are_fedavg(name, args, exact):
    ref = run_tiny("fedavg", rounds=3)
    same_losses(run_tiny(name, algorithm_args=args, rounds=3), ref, exact=exact)


def test_lfl_with_partial_participation_is_lb():
    # 3 of 4 clients per round: someone always missed the last broadcast, so the PS resends theta(t)
    lfl = run_tiny("lfl", rounds=3)
    lb = run_tiny("lb", rounds=3)
    same_losses(lfl, lb)
    assert lfl.history[0]["bits_down"] == 3 * q_bits(D_TINY, 2)  # round 0: Q(0), all devices hold theta(0)
    assert [h["bits_down"] for h in lfl.history[1:]] == [3 * exact_bits(D_TINY)] * 2
    assert [h["bits_up"] for h in lfl.history] == [h["bits_up"] for h in lb.history]


@pytest.mark.parametrize("name", ["lfl", "lgm", "ltgm"])
def test_sequential_equals_vectorized_full_participation(name):
    a = run_tiny(name, "sequential", **FULL)
    b = run_tiny(name, "vectorized", **FULL)
    assert b.config["executor_used"] == "vectorized"
    assert_same_history(a, b)


# ------------------------------------------------------------------------------------ theta_hat tracking


def test_server_and_devices_hold_the_same_theta_hat(monkeypatch):
    devices, server = {}, []
    local_update, aggregate = LFL.local_update, LFL.aggregate

    def spy_local(self, ctx, downlink, state):
        up, new = local_update(self, ctx, downlink, state)
        devices[(ctx.round, int(ctx.client_id))] = new["theta_hat"].clone()
        return up, new

    def spy_aggregate(self, state, uplinks, weights, info):
        new = aggregate(self, state, uplinks, weights, info)
        server.append(new)
        return new

    monkeypatch.setattr(LFL, "local_update", spy_local)
    monkeypatch.setattr(LFL, "aggregate", spy_aggregate)
    res = run_tiny("lfl", "sequential", clients_per_round=None, rounds=5)
    assert res.status == "ok" and len(server) == 5
    for r, st in enumerate(server):
        assert bool(st["synced"].all()) and int(st["round"]) == r + 1
        for cid in range(4):
            assert torch.equal(devices[(r, cid)], st["theta_hat"]), (r, cid)  # bit for bit
        if r > 0:  # the broadcast is lossy: theta_hat(t) != theta(t)
            assert not torch.equal(st["theta_hat"], server[r - 1]["params"])
    assert res.history[-1]["bits_down"] == 4 * q_bits(D_TINY, 2)
    assert res.history[-1]["bits_up"] == 4 * q_bits(D_TINY, 2)


def test_aggregate_starts_from_theta_hat_not_theta():
    alg = make("lfl", q1=2, q2=None)
    s = alg.init(torch.zeros(4))
    dev = alg.client_init(torch.zeros(4))
    # round 0: theta_hat(-1) = theta(0), the broadcast is Q(0) = 0; fake updates move theta to
    # theta(1) = 0 + 0.5 u + 0.5 v = (1, -0.75, 0, 0.5)
    down = alg.broadcast(s)
    assert torch.equal(alg.receive(down, dev), torch.zeros(4))
    s = alg.aggregate(s, fake_uplinks(alg, t(2, -1.5, 0, 1), t(0, 0, 0, 0)), t(0.5, 0.5), info(2))
    assert torch.equal(s["params"], t(1, -0.75, 0, 0.5)) and torch.equal(s["theta_hat"], torch.zeros(4))
    # round 1: Q(theta(1) - theta_hat(0), 2) with x_max = 1, x_min = 0: levels 2, 1.5, 0, 1 ->
    # entry 1 is -0.5 or -1.0 (random), the others exact
    down = alg.broadcast(s)
    hat1 = alg.receive(down, {**dev, "theta_hat": torch.zeros(4)})
    assert hat1[1].item() in (-0.5, -1.0) and torch.equal(hat1[[0, 2, 3]], t(1, 0, 0.5))
    s2 = alg.aggregate(s, fake_uplinks(alg, t(0.1, 0.1, 0.1, 0.1), t(0.3, 0.3, 0.3, 0.3)), t(0.5, 0.5), info(2))
    assert torch.equal(s2["theta_hat"], hat1)  # the PS applied the same broadcast as the device
    assert torch.equal(s2["params"], hat1 + 0.2)  # theta(2) = theta_hat(1) + aggregate
    assert s2["params"][1].item() in (pytest.approx(-0.3), pytest.approx(-0.8))  # not theta(1)[1] + 0.2


def test_broadcast_is_deterministic_and_changes_with_round_and_init():
    alg = make("lfl", d=64, q1=2)
    s = alg.init(torch.zeros(64))
    s = {**s, "params": torch.linspace(-1, 1, 64)}
    a, b = alg.broadcast(s), alg.broadcast(s)
    assert all(torch.equal(a[k], b[k]) for k in a.parts)
    c = alg.broadcast({**s, "round": s["round"] + 1})
    other = alg.init(torch.ones(64))["key"]
    d = alg.broadcast({**s, "key": other})
    assert not torch.equal(a["levels"], c["levels"]) and not torch.equal(a["levels"], d["levels"])


def test_partial_participation_marks_devices_out_of_sync():
    alg = make("lfl", num_clients=3, q2=None)
    s = alg.init(t(1, 2, 3, 4))
    s = alg.aggregate(s, fake_uplinks(alg, t(1, 1, 1, 1), t(3, 3, 3, 3)), t(0.5, 0.5), info(2, m=3))
    assert s["synced"].tolist() == [True, True, False]
    down = alg.broadcast(s)  # device 2 missed round 0's broadcast: resend theta(1) exactly
    assert down.bits == exact_bits(4)
    assert torch.equal(alg.receive(down, alg.client_init(t(0, 0, 0, 0))), t(3, 4, 5, 6))


# ------------------------------------------------------------------------------------------ error feedback


def test_uplink_error_feedback_by_hand():
    alg = make("lfl", q1=2, q2=2)
    s = alg.init(torch.zeros(4))
    state = alg.client_init(torch.zeros(4))
    # Delta = (1, -0.75, 0, 0.5) - theta_hat(0) with theta_hat(0) = 0; Q(., 2): x_max = 1, x_min = 0,
    # levels 2, 1.5, 0, 1: the second entry is -0.5 or -1.0, so delta(1) = (0, -0.25 or +0.25, 0, 0)
    up, state = alg.local_update(FakeCtx(t(1, -0.75, 0, 0.5), key=3), alg.broadcast(s), state)
    sent = alg.uplink.decode(up)
    assert sent[1].item() in (-0.5, -1.0) and torch.equal(sent[[0, 2, 3]], t(1, 0, 0.5))
    assert torch.equal(state["delta"], t(1, -0.75, 0, 0.5) - sent)
    assert state["delta"][1].item() in (-0.25, 0.25)
    assert up.bits == q_bits(4, 2)
    # next update u = 0.5: u + delta = (0.5, 0.25 or 0.75, 0.5, 0.5) sits on Q's levels: sent exactly,
    # and the residual goes back to 0 (Eq. 3)
    up2, state2 = alg.upload(FakeCtx(t(0, 0, 0, 0), key=4), t(0.5, 0.5, 0.5, 0.5), state)
    assert torch.equal(alg.uplink.decode(up2), t(0.5, 0.5, 0.5, 0.5) + state["delta"])
    assert torch.equal(state2["delta"], torch.zeros(4))


def test_lgm_error_accumulation_by_hand():
    alg = make("lgm", q1=2, q2=None)
    theta0 = t(1, -0.75, 0, 0.5)
    s = alg.init(theta0)
    sent0 = alg.receive(alg.broadcast(s), {})
    assert sent0[1].item() in (-0.5, -1.0) and torch.equal(sent0[[0, 2, 3]], t(1, 0, 0.5))
    s = alg.aggregate(s, fake_uplinks(alg, torch.zeros(4), torch.zeros(4)), t(0.5, 0.5), info(2))
    assert torch.equal(s["e"], theta0 - sent0) and torch.equal(s["params"], theta0)
    # round 1 quantizes theta + e = 2 theta0 - sent0, whose magnitudes sit on the levels: exact
    assert torch.equal(alg.receive(alg.broadcast(s), {}), 2 * theta0 - sent0)


# ------------------------------------------------------------------------------------------------- LTGM


def test_fwht_matches_the_hadamard_matrix_and_transform_is_orthonormal():
    h = torch.ones(1, 1)
    for _ in range(3):
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    x = torch.randn(8, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(fwht(x), h @ x, atol=1e-6)
    assert padded_length(83) == 128 and padded_length(128) == 128 and padded_length(1) == 1
    alg = make("ltgm", d=83, q1=None)
    s = alg.init(torch.randn(83, generator=torch.Generator().manual_seed(1)))
    down = alg.broadcast(s)
    assert torch.allclose(alg.receive(down, {}), s["params"], atol=1e-6)
    assert down.bits == 64 + 32 * 128  # the seed + the transformed model in fp32


# ------------------------------------------------------------------------------------------------- bits


def test_bits_per_method():
    d = 1000
    x = torch.linspace(-1, 1, d)
    exact = encode_exact(x)
    assert exact.bits == 33 * d  # 8 | d: the paper's R_LB = 33 d exactly
    assert encode_exact(x[:83]).bits == exact_bits(83)
    y = torch.tensor([-0.0, 0.0, -1.5, float("inf")])
    assert torch.equal(decode_exact(encode_exact(y)).view(torch.int32), y.view(torch.int32))
    algs = {name: make(name, d=d, **args) for name, args in [
        ("lossless", {}), ("lb", {"q2": 3}), ("lfl", {"q1": 5, "q2": 3}), ("lgm", {"q1": 5, "q2": 3}),
        ("ltgm", {"q1": 1000, "q2": 3})]}
    down = {n: a.broadcast({**a.init(torch.zeros(d)), "params": x}).bits for n, a in algs.items()}
    assert down == {"lossless": 33 * d, "lb": 33 * d, "lfl": q_bits(d, 5), "lgm": q_bits(d, 5),
                    "ltgm": 64 + q_bits(1024, 1000)}
    assert down["lfl"] == compress.get("lfl", q=5).encode(x)[0].bits == 64 + d * 4
    ctx = FakeCtx(torch.zeros(d))
    for name, a in algs.items():
        up, _ = a.local_update(ctx, a.broadcast(a.init(x)), a.client_init(x))
        assert up.bits == (32 * d if name == "lossless" else 64 + d * 3), name


def test_downlink_ratios_vs_lb_at_the_papers_model_sizes():
    # whole-bit packing: 11.0x (q1 = 2) and 8.25x (q1 = 5); the paper's fractional count gives 12.77x, 9.2x
    for d, q1, packed, paper in [(130890, 2, 11.0, 12.77), (550570, 5, 8.25, 9.2)]:
        lfl = make("lfl", d=d, q1=q1)
        ratio = exact_bits(d) / lfl.broadcast(lfl.init(torch.zeros(d))).bits
        assert ratio == pytest.approx(packed, rel=1e-3)
        digits = len(str(paper).split(".")[1])  # as printed in the paper
        assert round(33 / (1 + math.log2(q1 + 1)), digits) == paper  # Eq. (16), d >> 1


def test_engine_bits_full_participation():
    res = run_tiny("lb", clients_per_round=None, rounds=1)
    assert res.history[0]["bits_down"] == 4 * exact_bits(D_TINY)
    assert res.history[0]["bits_up"] == 4 * q_bits(D_TINY, 2)


# ----------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("name, field", [("lfl", "q1"), ("lfl", "q2"), ("lb", "q2"), ("lgm", "q1"),
                                         ("lgm", "q2"), ("ltgm", "q1"), ("ltgm", "q2")])
@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "x"])
def test_invalid_levels_raise(name, field, bad):
    with pytest.raises(ValueError):
        make_hyper(algorithms.get_class(name), {field: bad})


def test_defaults_and_unknown_args():
    assert make_hyper(algorithms.get_class("lfl"), {}) == algorithms.get_class("lfl").Hyper(q1=2, q2=2)
    assert make_hyper(algorithms.get_class("lfl"), {"q1": "5"}).q1 == 5  # CLI strings
    assert algorithms.get_class("ltgm").Hyper().q1 == 50
    with pytest.raises(ValueError):
        make_hyper(algorithms.get_class("lossless"), {"q2": 2})


# ------------------------------------------------------------------------------------------------ suites


@pytest.mark.parametrize("suite, levels", [
    ("lfl_mnist", {"lb": {"q2": 2}, "lfl": {"q1": 2, "q2": 2}, "lgm": {"q1": 2, "q2": 2}, "ltgm": {"q1": 50, "q2": 2}}),
    ("lfl_cifar10", {"lb": {"q2": 3}, "lfl": {"q1": 5, "q2": 3}, "lgm": {"q1": 5, "q2": 3},
                     "ltgm": {"q1": 1000, "q2": 3}}),
    ("lfl_reduced", {"lb": {"q2": 2}, "lfl": {"q1": 2, "q2": 2}, "lgm": {"q1": 2, "q2": 2}, "ltgm": {"q1": 50, "q2": 2}}),
])
def test_suite_files_are_valid(suite, levels):
    from benchmark.campaign.suite import load_suite

    s = load_suite(suite)  # validates every cell (unknown keys, invalid values)
    assert s.paper == "lfl" and "unspecified" in s.notes and not s.references  # the paper prints no numbers
    cells = {c.experiment.algorithm: c.experiment for c in s.cells}
    assert set(cells) == {"lossless", *levels}
    for name, args in levels.items():
        assert cells[name].algorithm_args == args
    for e in cells.values():
        assert e.clients_per_round is None and e.local_steps == (5 if suite == "lfl_cifar10" else 4)
