"""Tests of algorithms/compress: transforms compose (error feedback around any operator, per-layer,
fp32 layers, chain), randomness is declared by the operator, the uplink sign convention, and planted
defects (EF forgetting its residual, EF compressing x instead of x + e, a flipped sign) that the checks
catch."""
from __future__ import annotations

from functools import partial

import pytest
import torch
from torch.func import vmap

import algorithms
from algorithms import compress
from algorithms.core import optim
from algorithms.core import CounterRng, ParamLayout, ParamSlice, RoundInfo, stack_trees
from algorithms.compress import Replay, chain, error_feedback, fp32_layers, per_layer, scope_layout, uplink

# every registered stateless operator, with small parameters so that nothing is exact by accident
OPS = [compress.get(n) for n in compress.names() if n not in ("ef", "topk", "randk")] + [
    compress.get("topk", k=3), compress.get("randk", k=3)]
LAYOUT = ParamLayout((
    ParamSlice("conv.weight", 0, 6, (2, 3), "weight"), ParamSlice("conv.bias", 6, 8, (2,), "bias"),
    ParamSlice("bn.weight", 8, 10, (2,), "norm"), ParamSlice("fc.weight", 10, 21, (11,), "weight"),
))


def xs(n=4, d=LAYOUT.size, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d, generator=g)


# ------------------------------------------------------------------------------- error feedback


def hand_ef(op, steps, keys):
    """EF written out by hand (Karimireddy et al. 2019, Alg. 1): p = x + e, send C(p), e = p - C(p)."""
    e, sent, residuals = torch.zeros(steps.shape[1]), [], []
    for x, k in zip(steps, keys):
        p = x + e
        c = op.decode(op.encode(p, rng=CounterRng(k))[0])
        e = p - c
        sent.append(c)
        residuals.append(e)
    return torch.stack(sent), torch.stack(residuals)


def ef_matches_hand(make_ef, op) -> bool:
    """Whether the EF transform built by ``make_ef(op)`` sends and keeps exactly the hand-written EF's
    messages and residuals over 4 steps."""
    t = make_ef(op)
    steps, keys = xs(), [11, 12, 13, 14]
    state = t.init(steps.shape[1])
    sent, residuals = [], []
    for x, k in zip(steps, keys):
        msg, state = t.encode(x, state, CounterRng(k))
        sent.append(t.decode(msg))
        residuals.append(state)
    ref_sent, ref_res = hand_ef(op, steps, keys)
    return torch.equal(torch.stack(sent), ref_sent) and torch.equal(torch.stack(residuals), ref_res)


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_error_feedback_around_any_operator_is_the_hand_written_ef(op):
    assert ef_matches_hand(error_feedback, op)
    # the registry's "ef" operator is the same code
    ef = compress.get("ef", inner=op.name, **op.params)
    x, e = xs(1)[0], xs(1, seed=1)[0]
    m1, r1 = ef.encode(x, e, CounterRng(5))
    m2, r2 = error_feedback(op).encode(x, e, CounterRng(5))
    assert torch.equal(ef.decode(m1), op.decode(m2)) and torch.equal(r1, r2) and m1.bits == m2.bits


class ForgetfulEF(compress.error_feedback):
    """Planted defect: EF that forgets its residual (always returns zeros)."""

    def encode(self, x, state=None, rng=None):
        msg, e = super().encode(x, state, rng)
        return msg, torch.zeros_like(e)


class UncorrectedEF(compress.error_feedback):
    """Planted defect: EF that compresses x instead of x + e (the residual is kept but never added)."""

    def encode(self, x, state=None, rng=None):
        msg, _ = self.inner.encode(x, (), rng)
        return msg, x + state - self.inner.decode(msg)


@pytest.mark.parametrize("defect", [ForgetfulEF, UncorrectedEF])
@pytest.mark.parametrize("op", [compress.get("scaled_sign"), compress.get("lfl", q=2),
                                compress.get("topk", k=3)], ids=repr)
def test_planted_ef_defects_are_caught(defect, op):
    assert not ef_matches_hand(defect, op)


def test_error_feedback_needs_a_stateless_inner():
    with pytest.raises(ValueError, match="stateless"):
        error_feedback(error_feedback(compress.get("sign")))


# --------------------------------------------------------------------------- per layer, fp32 layers


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_per_layer_applies_the_operator_to_each_tensor(op):
    t = per_layer(op, LAYOUT)
    x = xs(1)[0]
    msg, _ = t.encode(x, (), CounterRng(3))
    rng, expected, bits = CounterRng(3), [], 0
    for g, s in enumerate(LAYOUT.slices):  # one operator call per tensor, in layout order, one stream
        m = op.encode(x[s.start:s.stop], rng=rng)[0]
        bits += m.bits
        for k, v in m.parts.items():
            assert torch.equal(msg[f"g{g}.{k}"], v)
        expected.append(op.decode(m))
    assert msg.bits == bits
    assert torch.equal(t.decode(msg), torch.cat(expected))


@pytest.mark.parametrize("scope", ["weights", "all"])
@pytest.mark.parametrize("op", OPS, ids=repr)
def test_fp32_layers_sends_the_rest_exactly(op, scope):
    t = fp32_layers(op, LAYOUT, scope)
    x = xs(1)[0]
    msg, _ = t.encode(x, (), CounterRng(2))
    w = torch.cat([x[0:6], x[10:21]]) if scope == "weights" else x
    inner = op.encode(w, rng=CounterRng(2))[0]
    out = t.decode(msg)
    if scope == "weights":
        assert torch.equal(msg["fp"], x[6:10]) and torch.equal(out[6:10], x[6:10])
        c = op.decode(inner)
        assert torch.equal(out[0:6], c[0:6]) and torch.equal(out[10:21], c[6:])
        assert msg.bits == inner.bits + 32 * 4
    else:
        assert "fp" not in msg.parts and torch.equal(out, op.decode(inner)) and msg.bits == inner.bits
    assert scope_layout(LAYOUT, scope).size == w.numel()


def test_chain_is_nesting_and_the_uplink_recipe():
    comp = scope_layout(LAYOUT, "weights")
    op = compress.get("scaled_sign")
    built = chain(partial(fp32_layers, layout=LAYOUT, scope="weights"), error_feedback,
                  partial(per_layer, layout=comp))(op)
    recipe = uplink(op, LAYOUT, "weights", True, ef=True)
    x, e = xs(2)
    s1, s2 = built.init(LAYOUT), recipe.init(LAYOUT)
    assert torch.equal(s1, torch.zeros(comp.size)) and torch.equal(s1, s2)
    for _ in range(3):
        (m1, s1), (m2, s2) = built.encode(x, s1, None), recipe.encode(x, s2, None)
        assert torch.equal(built.decode(m1), recipe.decode(m2)) and torch.equal(s1, s2)
        assert m1.bits == m2.bits == (8 + 32) + (16 + 32) + 32 * 4  # 6 and 11 signs + scales, 4 fp32
    # the residual is per compressed entry and zero on nothing it should not touch
    assert s1.shape == (comp.size,) and bool((s1 != 0).any())


def test_transforms_under_vmap_equal_a_loop():
    t = uplink(compress.get("lfl", q=3), LAYOUT, "weights", True, ef=True)
    x = xs(5)
    e = torch.stack([t.init(LAYOUT)] * 5) + 0.1 * xs(5, seed=2)[:, :17]
    keys = torch.arange(5)
    msgs, res = vmap(lambda k, x, e: t.encode(x, e, CounterRng(k)))(keys, x, e)
    dec = vmap(t.decode)(msgs)
    for i in range(5):
        m, r = t.encode(x[i], e[i], CounterRng(keys[i]))
        assert torch.equal(dec[i], t.decode(m)) and torch.equal(res[i], r)


# ----------------------------------------------------------------------------- randomness declared


class CountingRng:
    """An Rng that counts its draws (and draws from a CounterRng)."""

    def __init__(self):
        self.inner, self.draws = CounterRng(0), 0

    def uniform(self, shape):
        self.draws += 1
        return self.inner.uniform(shape)

    def normal(self, shape):
        self.draws += 1
        return self.inner.normal(shape)


@pytest.mark.parametrize("op", OPS, ids=repr)
def test_needs_rng_is_what_the_operator_does(op):
    rng = CountingRng()
    for t in (op, error_feedback(op), per_layer(op, LAYOUT), fp32_layers(op, LAYOUT)):
        assert t.needs_rng == op.needs_rng
        rng.draws = 0
        state = t.init(LAYOUT)
        t.encode(xs(1)[0], state, rng)
        assert (rng.draws > 0) == op.needs_rng, (t, rng.draws)


def test_needs_rng_comes_from_the_operator_class_not_its_name():
    class Renamed(compress.Sign):
        name = "some_new_sign"  # a deterministic operator under a name no list knows

    class Dithered(compress.Sign):
        name = "sign"  # a known deterministic name, but this one draws
        needs_rng = True

        def encode(self, x, state=(), rng=None):
            return super().encode(x + 1e-3 * rng.uniform(x.shape), state, rng)

    assert not uplink(Renamed(), LAYOUT).needs_rng
    assert uplink(Dithered(), LAYOUT).needs_rng


def test_replay_hands_back_recorded_noise():
    z = torch.rand(6)
    assert torch.equal(Replay(z).uniform((6,)), z)
    with pytest.raises(RuntimeError, match="shape"):
        Replay(z).uniform((5,))


# ------------------------------------------------------------------------------ the sign convention


class FakeCtx:
    """One SGD step with lr 1 on 0.5 ||p - b||^2 from w0 lands on b (so the update is b - w0)."""

    def __init__(self, target):
        self.batches = [torch.as_tensor(target, dtype=torch.float32)]
        self.lr, self.num_steps, self.steps = 1.0, 1, torch.tensor(1)
        self.optimizer = optim.SGD()
        self.rng = CounterRng(0)

    def loss_and_grad(self, p, batch):
        return torch.zeros(()), p - batch

    def loop(self, step, carry):
        return step(carry, self.batches[0], 0)


# exact uplinks (no quantization) of the compressed algorithms, so the decoded update is the update
EXACT = [("fedpaq", {"bits": 32}), ("lb", {"q2": None}), ("lfl", {"q1": None, "q2": None}),
         ("lgm", {"q1": None, "q2": None}), ("lossless", {})]


def decoded_update(name, args, w0, target):
    """w(t+1) - w(t) after one client's round with the FakeCtx step (weight 1)."""
    alg = algorithms.make(name, LAYOUT, 2, args)
    server = alg.init(w0)
    up, _ = alg.local_update(FakeCtx(target), alg.broadcast(server), alg.client_init(w0))
    info = RoundInfo(0, torch.arange(1), 1, torch.ones(1), torch.ones(1, dtype=torch.int64), 1.0)
    return alg.aggregate(server, stack_trees([up]), torch.ones(1), info)["params"] - w0


@pytest.mark.parametrize("name,args", EXACT)
def test_uplink_sign_convention_is_w_minus_w0(name, args):
    w0, target = xs(1)[0], xs(1, seed=3)[0]
    assert torch.allclose(decoded_update(name, args, w0, target), target - w0, atol=1e-6)


def test_a_flipped_sign_convention_is_caught(monkeypatch):
    """Planted defect: the uplink update taken as w0 - w (the other convention) in the shared helper."""
    import algorithms.compress.compressed_update as cu

    monkeypatch.setattr(cu, "update", lambda w, w0: w0 - w)
    w0, target = xs(1)[0], xs(1, seed=3)[0]
    got = decoded_update("fedpaq", {"bits": 32}, w0, target)
    assert not torch.allclose(got, target - w0, atol=1e-6)
