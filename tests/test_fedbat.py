"""FedBAT (algorithms/fedbat.py): the STE derivatives of Eq. 8/9 on hand-computed scalars, the
binarization's unbiasedness in range (Monte Carlo), Algorithm 1 against an independent reference
implementation, exact uplink bits, Eq. 11 aggregation, FedBAT(phi=1, fp32 uplink) == FedAvg, and
hyperparameter validation."""
from __future__ import annotations

import math
from typing import NamedTuple

import pytest
import torch
from torch.func import grad, vmap

import algorithms
from algorithms.core import optim
from algorithms.core import CounterRng, Message, ParamLayout, ParamSlice, RoundInfo, make_hyper, stack_trees
from algorithms.fedbat import binarize_ste
from tests.helpers import MaskedLoopCtx, assert_same_history, run_tiny, tiny_bn_model


def B(nbits: int) -> int:
    return 8 * math.ceil(nbits / 8)


# ------------------------------------------------------------------------------------------ Eq. 6-9


@pytest.mark.parametrize("x, alpha, zeta, value, d_dx, d_dalpha", [
    # in range: b = floor((a + x)/(2a) + zeta); dS/dalpha = 2b - (x + a)/a (Eq. 9)
    (0.2, 0.5, 0.7, 0.5, 1.0, 2 * 1 - 0.7 / 0.5),      # (0.7 + 0.7) -> b = 1
    (0.2, 0.5, 0.1, -0.5, 1.0, 2 * 0 - 0.7 / 0.5),     # (0.7 + 0.1) -> b = 0
    (-0.3, 0.6, 0.8, 0.6, 1.0, 2 * 1 - 0.3 / 0.6),     # (0.25 + 0.8) -> b = 1
    (-0.3, 0.6, 0.7, -0.6, 1.0, 2 * 0 - 0.3 / 0.6),    # (0.25 + 0.7) -> b = 0
    (0.5, 0.5, 0.0, 0.5, 1.0, 2 * 1 - 1.0 / 0.5),      # x = alpha: in range, b = 1, derivative 0
    # outside: the clip, dS/dx = 0 (Eq. 8) and dS/dalpha = sign(x) (Eq. 9)
    (0.9, 0.5, 0.3, 0.5, 0.0, 1.0),
    (-0.9, 0.5, 0.99, -0.5, 0.0, -1.0),
])
def test_ste_value_and_gradients_hand_computed(x, alpha, zeta, value, d_dx, d_dalpha):
    args = [torch.tensor(v, dtype=torch.float32) for v in (x, alpha, zeta)]
    assert float(binarize_ste(*args)) == pytest.approx(value, abs=1e-7)
    assert float(grad(binarize_ste, 0)(*args)) == pytest.approx(d_dx, abs=1e-6)
    assert float(grad(binarize_ste, 1)(*args)) == pytest.approx(d_dalpha, abs=1e-6)


def test_ste_under_vmap_and_chain_rule_for_alpha_e():
    x = torch.tensor([0.2, 0.2, 0.9, -0.9, -0.3])
    zeta = torch.tensor([0.7, 0.1, 0.3, 0.3, 0.8])
    a = torch.tensor(0.5)
    g = vmap(grad(binarize_ste, 1), in_dims=(0, None, 0))(x, a, zeta)
    expected = torch.tensor([0.6, -1.4, 1.0, -1.0, 2 - 0.2 / 0.5])
    assert torch.allclose(g, expected, atol=1e-6)
    # Eq. 10: alpha = alpha' exp(rho alpha_e); dS/dalpha_e = rho * alpha * dS/dalpha
    alpha0, rho, ae = 0.4, 6.0, torch.tensor(0.05)

    def s_of_ae(e):
        return binarize_ste(x, alpha0 * torch.exp(rho * e), zeta).sum()

    alpha = alpha0 * math.exp(rho * 0.05)
    ds_dalpha = grad(lambda al: binarize_ste(x, al, zeta).sum())(torch.tensor(alpha))
    assert float(grad(s_of_ae)(ae)) == pytest.approx(rho * alpha * float(ds_dalpha), rel=1e-5)


def test_zero_alpha_is_safe():
    # S(0, 0) := 0 and no NaN in the gradients (m = 0 at the switch, e.g. phi = 0)
    x = torch.tensor([0.0, 0.1, -0.1])
    z = torch.tensor([0.3, 0.6, 0.9])
    v = binarize_ste(x, torch.tensor(0.0), z)
    assert torch.equal(v.abs(), torch.zeros(3))
    g = grad(lambda al: binarize_ste(x, al, z).sum())(torch.tensor(0.0))
    assert torch.isfinite(g)


def test_binarization_unbiased_in_range_and_clip_outside():
    # in range: E S(x, alpha) = x, Var = alpha^2 - x^2; E dS/dalpha = 0 (Monte Carlo, fixed seed)
    g = torch.Generator().manual_seed(0)
    alpha, n = 0.5, 40000
    x = torch.linspace(-0.5, 0.5, 21)
    zeta = torch.rand(n, x.numel(), generator=g)
    s = binarize_ste(x, torch.tensor(alpha), zeta)
    assert set(s.unique().tolist()) <= {-alpha, alpha}
    sd = torch.sqrt((alpha ** 2 - x ** 2).clamp(min=1e-12) / n)
    z = (s.mean(0) - x).abs() / sd
    assert float(z.max()) < 4.5, z
    dalpha = torch.where(s > 0, 1.0, -1.0) - x / alpha  # Eq. 9 in range, sample by sample
    assert float(dalpha.mean(0).abs().max()) < 4.5 / math.sqrt(n)
    # negative control: alpha < |x| is biased, E S = clip(x, -alpha, alpha)
    x = torch.tensor([-1.5, -0.3, 0.1, 0.8, 2.0])
    s = binarize_ste(x, torch.tensor(alpha), torch.rand(n, 5, generator=g)).mean(0)
    assert torch.allclose(s, x.clamp(-alpha, alpha), atol=4.5 * alpha / math.sqrt(n))
    assert not torch.allclose(s, x, atol=0.1)


# ---------------------------------------------------------------------------- Algorithm 1 by hand


class Batch(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor
    w: torch.Tensor


LAYOUT = ParamLayout((ParamSlice("W", 0, 6, (2, 3), "weight"), ParamSlice("b", 6, 8, (2,), "bias")))


def model_fn(p, x):
    return x @ p[..., :6].reshape(2, 3).T + p[..., 6:]


def criterion(out, batch):
    return 0.5 * ((out - batch.y) ** 2).sum(-1).mean()


class FakeCtx(MaskedLoopCtx):
    """A LocalContext with a linear model and a counter RNG; steps >= ``steps`` are masked."""

    def __init__(self, batches, steps, lr, seed):
        self.layout = LAYOUT
        self.rng = CounterRng(seed)
        self.optimizer = optim.SGD()
        self.lr = lr
        self.batches = batches
        self.num_steps = len(batches)
        self.steps = torch.tensor(steps)

    def criterion(self, out, batch):
        return criterion(out, batch)

    def value_and_grad(self, f, args, batch):
        g, v = torch.func.grad_and_value(lambda a: f(a, model_fn, batch))(args)
        return v, g


def batches(n_steps, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [Batch(torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g), torch.ones(4))
            for _ in range(n_steps)]


def reference_fedbat(w0, bs, tau, lr, seed, rho, phi):
    """Algorithm 1 / Eq. 12-14 written out with explicit Eq. 8/9 derivatives (no STE trick)."""
    rng = CounterRng(seed)
    zeta_up = rng.uniform((6,))  # the upload noise is drawn first
    m = torch.zeros(8)
    a0, ae = 0.0, 0.0
    s0 = math.floor(phi * tau)
    for s in range(tau):
        if s == s0:  # Eq. 13
            a0, ae = float(m[:6].abs().mean()), 0.0
        zeta = rng.uniform((6,))
        alpha = a0 * math.exp(rho * ae)
        if s < s0:  # Eq. 12
            mhat = m.clone()
        else:  # Eq. 6-7
            b = torch.floor((alpha + m[:6]) / (2 * alpha) + zeta).clamp(0, 1)
            inside = m[:6].abs() <= alpha
            mhat = torch.cat([torch.where(inside, alpha * (2 * b - 1), alpha * torch.sign(m[:6])), m[6:]])
        x = (w0 + mhat).requires_grad_(True)
        loss = criterion(model_fn(x, bs[s].x), bs[s])
        (gx,) = torch.autograd.grad(loss, x)
        g_m = gx.clone()
        g_ae = 0.0
        if s >= s0:
            g_m[:6] = gx[:6] * inside  # Eq. 8
            dalpha = torch.where(inside, 2 * b - (m[:6] + alpha) / alpha, torch.sign(m[:6]))  # Eq. 9
            g_ae = rho * alpha * float((gx[:6] * dalpha).sum())  # Eq. 10, chain rule
        m = m - lr * g_m
        ae = ae - lr * g_ae
    if s0 >= tau:
        a0, ae = float(m[:6].abs().mean()), 0.0
    alpha = a0 * math.exp(rho * ae)
    b = torch.floor((alpha + m[:6]) / (2 * alpha) + zeta_up).clamp(0, 1)
    inside = m[:6].abs() <= alpha
    up = torch.where(inside, alpha * (2 * b - 1), alpha * torch.sign(m[:6]))
    return torch.cat([up, m[6:]]), m, alpha


@pytest.mark.parametrize("tau, phi, rho", [(5, 0.5, 6.0), (4, 0.5, 6.0), (3, 0.5, 2.0), (5, 0.3, 0.0),
                                           (4, 1.0, 6.0)])
def test_local_update_matches_reference_implementation(tau, phi, rho):
    w0 = torch.tensor([0.3, -0.2, 0.1, 0.05, 0.4, -0.6, 0.1, -0.1])
    bs = batches(5)  # 5 loop steps; tau < 5 masks the last ones
    alg = algorithms.make("fedbat", LAYOUT, 4, {"rho": rho, "phi": phi})
    msg, _ = alg.local_update(FakeCtx(bs, tau, 0.3, seed=11), Message.dense(w0), {})
    expected, m, alpha = reference_fedbat(w0, bs, tau, 0.3, 11, rho, phi)
    assert float(msg["alpha"][0]) == pytest.approx(alpha, rel=1e-5)
    assert torch.allclose(alg.decode(msg), expected, atol=1e-6)
    assert torch.equal(msg["fp"], m[6:].to(torch.float32))


def test_alpha_is_learned_and_clamp_option():
    w0 = torch.tensor([0.3, -0.2, 0.1, 0.05, 0.4, -0.6, 0.1, -0.1])
    bs = batches(6, seed=5)
    alg = algorithms.make("fedbat", LAYOUT, 4, {})
    msg, _ = alg.local_update(FakeCtx(bs, 6, 0.3, seed=2), Message.dense(w0), {})
    _, m, alpha = reference_fedbat(w0, bs, 6, 0.3, 2, 6.0, 0.5)
    assert float(msg["alpha"][0]) == pytest.approx(alpha, rel=1e-5)
    a0_final = float(m[:6].abs().mean())
    assert alpha != pytest.approx(a0_final, rel=1e-3)  # alpha_e moved alpha away from alpha'
    clamped = algorithms.make("fedbat", LAYOUT, 4, {"alpha_clamp": True})
    a = clamped.step_size(torch.zeros(8), torch.tensor([0.0]), torch.tensor([1.0]))
    assert float(a) == pytest.approx(5e-2)
    assert float(grad(lambda e: clamped.step_size(torch.zeros(8), e, torch.tensor([1.0])).sum())(
        torch.tensor([0.0]))) == 0.0


def test_theory_variant_uses_inf_norm_and_is_unbiased():
    alg = algorithms.make("fedbat", LAYOUT, 4, {"alpha_mode": "inf", "phi": 0.0})
    m = torch.tensor([0.3, -0.1, 0.05, 0.0, 0.2, -0.15, 1.0, 2.0])
    assert torch.allclose(alg.initial_step_size(m), torch.tensor([0.3]))
    keys = torch.arange(20000)
    dec = vmap(lambda k: alg.decode(alg.encode(m, alg.initial_step_size(m), CounterRng(k).uniform((6,)))))(keys)
    assert torch.allclose(dec.mean(0)[:6], m[:6], atol=4.5 * 0.3 / math.sqrt(20000))
    assert torch.equal(dec[:, 6:], m[6:].expand(20000, 2))


# ------------------------------------------------------------------------------- uplink and server


def test_uplink_bits_exact_for_the_papers_cnn():
    from benchmark import models

    layout = ParamLayout.from_module(models.build("fedbat_cnn", (1, 28, 28), 10))
    alg = algorithms.make("fedbat", layout, 30)
    w_slices = [s for s in layout.slices if s.kind == "weight"]
    d_bin = sum(s.numel for s in w_slices)
    d_fp = layout.size - d_bin
    assert len(w_slices) == 5 and d_fp == 960  # 4 conv + 1 linear weights; BN weight/bias in fp32
    m = torch.randn(layout.size) * 0.01
    msg = alg.encode(m, alg.initial_step_size(m), torch.rand(d_bin))
    assert msg.bits == B(d_bin) + 32 * len(w_slices) + 32 * d_fp == 420800
    everything = algorithms.make("fedbat", layout, 30, {"scope": "all"})
    msg = everything.encode(m, everything.initial_step_size(m), torch.rand(layout.size))
    assert msg.bits == B(layout.size) + 32 * len(layout.slices)
    assert algorithms.make("fedbat", layout, 30, {"uplink": "fp32"}).encode(m, None, None).bits == 32 * layout.size


def test_bits_per_round_in_a_run():
    r = run_tiny("fedbat", "vectorized", rounds=2, model=tiny_bn_model)
    # tiny_bn_model: Linear(6, 8) + BN(8) + Linear(8, 3): 48 + 24 binarized, 8 + 16 + 3 fp32
    per_client = B(48 + 24) + 32 * 2 + 32 * (8 + 16 + 3)
    assert all(h["bits_up"] == 3 * per_client for h in r.history)


def test_decode_and_aggregate_are_eq11():
    alg = algorithms.make("fedbat", LAYOUT, 4, {})
    m1 = torch.tensor([0.2, -0.1, 0.9, -0.9, 0.0, 0.05, 1.5, -2.0])
    m2 = torch.tensor([-0.2, 0.1, 0.0, 0.3, -0.4, 0.05, 0.5, 1.0])
    zeta = torch.tensor([0.95, 0.9, 0.0, 0.9, 0.2, 0.1])
    a1, a2 = torch.tensor([0.5]), torch.tensor([0.25])
    up1, up2 = alg.encode(m1, a1, zeta), alg.encode(m2, a2, zeta)
    # b = floor((a + x)/(2a) + zeta), clip outside
    d1 = torch.tensor([0.5, 0.5, 0.5, -0.5, -0.5, -0.5, 1.5, -2.0])
    d2 = torch.tensor([0.25, 0.25, -0.25, 0.25, -0.25, -0.25, 0.5, 1.0])
    assert torch.equal(alg.decode(up1), d1) and torch.equal(alg.decode(up2), d2)
    w = torch.tensor([0.25, 0.75])
    info = RoundInfo(0, torch.arange(2), 4, torch.ones(2), torch.tensor([3, 3]), 0.1)
    new = alg.aggregate({"params": torch.ones(8)}, stack_trees([up1, up2]), w, info)
    assert torch.allclose(new["params"], 1 + 0.25 * d1 + 0.75 * d2)


def test_phi_one_with_fp32_uplink_is_fedavg():
    # no binarization phase and the latent m sent in fp32: FedAvg up to float rounding (w_t + m vs w)
    a = run_tiny("fedavg", "sequential", model=tiny_bn_model, rounds=3)
    b = run_tiny("fedbat", "vectorized", model=tiny_bn_model, rounds=3,
                 algorithm_args={"phi": 1.0, "uplink": "fp32"})
    assert_same_history(a, b)
    c = run_tiny("fedbat", "sequential", model=tiny_bn_model, rounds=3, algorithm_args={"uplink": "fp32"})
    assert c.history[-1]["test_loss"] != a.history[-1]["test_loss"]  # phi < 1 does change training
    # no noise is drawn then, so dropout masks (from ctx.rng) are FedAvg's too
    a = run_tiny("fedavg", "sequential", model=dropout_model, rounds=2)
    b = run_tiny("fedbat", "sequential", model=dropout_model, rounds=2, algorithm_args={"phi": 1.0, "uplink": "fp32"})
    assert_same_history(a, b)


def dropout_model(input_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(16, num_classes))


# --------------------------------------------------------------------------------- hyperparameters


def test_defaults_are_the_papers():
    hp = make_hyper(algorithms.get_class("fedbat"), {})
    assert (hp.rho, hp.phi, hp.alpha_clamp, hp.alpha_mode, hp.uplink, hp.scope) == \
        (6.0, 0.5, False, "learned", "binary", "weights")


@pytest.mark.parametrize("args", [{"phi": -0.1}, {"phi": 1.5}, {"phi": float("nan")}, {"rho": -1.0},
                                  {"rho": float("inf")}, {"alpha_mode": "l2"}, {"uplink": "int8"},
                                  {"scope": "bn"}, {"alpha_clamp": 3}, {"lr": 0.1}])
def test_invalid_hyperparameters_raise(args):
    with pytest.raises(ValueError):
        make_hyper(algorithms.get_class("fedbat"), args)
