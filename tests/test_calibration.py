"""Calibration of the compression checks (theory/montecarlo.py and the quantizer claims).

(a) False alarms at the stated rate: in a cheap setting (d = 8, n = 200 draws, alpha = 0.05 so that the
    rate is measurable) the unbiasedness check, the variance-bound check and the error-identity check run
    on correct operators over 1000 seeds; the false-alarm rate must not be significantly above alpha
    (two-sided 95% Clopper-Pearson interval's lower end <= alpha).
(b) Power at the default alpha = 1e-3 against planted defects: a 1% multiplicative bias, an error
    variance 10% above the bound (or the identity), and wrong bit counts. Detection probability over 200
    repetitions (deterministic checks: 100 configurations), with n from ``samples_needed_for_bias`` at
    power 0.999; required: one-sided 95% Clopper-Pearson lower bound >= 0.97, or observed rate >= 0.99.

Run with ``-s`` to see the measured rates.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from algorithms import compress as C
from algorithms.core import Message
from theory import stats
from theory import montecarlo as MC
from theory.claims import compression as TC
from theory.claims import lfl as L
from theory.claims import qsgd as QS

ALPHA_CAL = 0.05
SEEDS = 1000
REPS = 200
# n for the planted defects is designed for power 0.999 (normal theory), so that a detection probability
# >= 0.99 can be shown with 200 repetitions (at n designed for exactly 0.99 the expected 2 misses in 200
# make the CP bound fail a third of the time; measured there: 198/200, 198/200 and 200/200 for the
# three variance defects, consistent with 0.99).
DESIGN_POWER = 0.999


def _many(op, x, n, reps, stream):
    """reps independent MonteCarlo summaries (batch = 1) of n draws each, drawn in one vmapped sweep."""
    x64 = x.double().numpy()
    rows = np.concatenate(list(MC.draw_chunks(op, x, n * reps, MC._key0(0, stream))))
    rows = rows.reshape(reps, n, -1)
    sq = ((rows - x64) ** 2).sum(axis=2)
    return [MC.MonteCarlo(n, 1, rows[r], sq[r], 0.0) for r in range(reps)]


def _x(d, seed=3):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(d, generator=g)


def _rare_lfl_x():
    """LFL q = 2 vector (x_min 0.5, x_max 2.5, level spacing 1) whose coordinates have P(up) =
    0.003, 0.1, 0.3, 0.5, 0.7, 0.997: with n = 200 the rare ones are constant in about half the runs,
    which the library's default zero-variance rule (deviation > 1e-12) would always reject."""
    p = np.array([0.003, 0.1, 0.3, 0.5, 0.7, 0.997])
    mags = np.concatenate([[0.5, 2.5], 0.5 + (np.array([0, 1, 0, 1, 0, 1]) + p)])
    signs = np.array([1, -1, 1, -1, -1, 1, 1, -1])
    return torch.tensor(mags * signs, dtype=torch.float32)


def _report(label, k, n, target=None):
    lo, hi = stats.bernoulli_rate_interval(k, n, alpha=0.05)
    print(f"\n{label}: {k}/{n} = {k / n:.4f} (95% CP [{lo:.4f}, {hi:.4f}])" + (f", nominal {target}" if target else ""))
    return lo, hi


# --------------------------------------------------------------------------------------------- (a)

FA_CASES = {
    "lfl_q2": (lambda: C.get("lfl", q=2), lambda: _x(8)),
    "lfl_q2_rare_levels": (lambda: C.get("lfl", q=2), _rare_lfl_x),
    "qsgd_s2": (lambda: C.get("qsgd", s=2), lambda: _x(8)),
    "binarize_alpha_inf": (lambda: C.get("binarize"), lambda: _x(8)),
}


@pytest.mark.parametrize("case", list(FA_CASES))
def test_false_alarm_rate_unbiasedness(case):
    op, x = FA_CASES[case][0](), FA_CASES[case][1]()
    x64 = x.double().numpy()
    h = MC.lattice_spacing(op, x)
    runs = _many(op, x, 200, SEEDS, f"fa:{case}")
    k = sum(not MC.unbiasedness_test(mc, x64, h, alpha=ALPHA_CAL, power=False)["passed"] for mc in runs)
    lo, _ = _report(f"false alarms, unbiasedness, {case} (d = {x.numel()}, n = 200, alpha = {ALPHA_CAL})",
                    k, SEEDS, ALPHA_CAL)
    assert lo <= ALPHA_CAL


def test_false_alarm_rate_variance_tests_at_the_boundary():
    # upper_bound at E||Q - x||^2 exactly (LFL's closed form, lfl.md 1.3): the boundary of H0
    op, x = C.get("lfl", q=2), _x(8)
    exact = L.lfl_exact_variance(x, 2)
    runs = _many(op, x, 200, SEEDS, "fa:var")
    k = sum(not MC.variance_bound_test(mc.sq_err, exact, alpha=ALPHA_CAL)["passed"] for mc in runs)
    lo, _ = _report("false alarms, upper_bound at the exact LFL variance", k, SEEDS, ALPHA_CAL)
    assert lo <= ALPHA_CAL
    # FedBAT's identity E||S - x||^2 = d alpha^2 - ||x||^2 (two-sided mean_equals)
    op = C.get("binarize")
    x64 = x.double().numpy()
    expected = x64.size * float(np.abs(x64).max()) ** 2 - float((x64 ** 2).sum())
    runs = _many(op, x, 200, SEEDS, "fa:identity")
    k = sum(not MC.variance_identity_test(mc.sq_err, expected, alpha=ALPHA_CAL)["passed"] for mc in runs)
    lo, _ = _report("false alarms, mean_equals of FedBAT's error identity", k, SEEDS, ALPHA_CAL)
    assert lo <= ALPHA_CAL


# --------------------------------------------------------------------------------------------- (b)


def _detected_enough(label, k, n):
    lo90, _ = stats.bernoulli_rate_interval(k, n, alpha=0.10)  # its lower end: one-sided 95% bound
    print(f"\n{label}: detected {k}/{n} = {k / n:.3f}, one-sided 95% lower bound {lo90:.4f}")
    return lo90 >= 0.97 or k / n >= 0.99


class _Scaled(C.Transform):
    """Planted bias: decode returns factor * C(x)."""

    name = "scaled_planted"

    def __init__(self, inner, factor):
        self.inner, self.factor = inner, factor

    def __repr__(self):
        return f"scaled({self.inner!r}, {self.factor})"

    def encode(self, x, state=(), rng=None):
        return self.inner.encode(x, state, rng)

    def decode(self, m):
        return self.inner.decode(m) * self.factor


class _Inflated(C.Transform):
    """Planted variance: C'(x) = x + c (C(x) - x), unbiased with c^2 times the error."""

    name = "inflated_planted"

    def __init__(self, inner, c):
        self.inner, self.c = inner, c

    def __repr__(self):
        return f"inflated({self.inner!r}, {self.c})"

    def encode(self, x, state=(), rng=None):
        m, state = self.inner.encode(x, state, rng)
        return Message({**m.parts, "x": x.to(torch.float32)}, m.meta), state

    def decode(self, m):
        return m["x"] + self.c * (self.inner.decode(m) - m["x"])


def test_power_one_percent_bias():
    s, d = 8, 16
    op, x = C.get("qsgd", s=s), _x(d, seed=11)
    x64 = x.double().numpy()
    nrm = float(np.linalg.norm(x64))
    u = s * np.abs(x64) / nrm
    p = u - np.floor(u)
    sd = nrm / s * np.sqrt(p * (1 - p))  # exact per-coordinate sd of Q_s(x)_j
    skew = np.abs(1 - 2 * p) / np.where(sd > 0, np.sqrt(p * (1 - p)), 1.0)
    # n for the per-coordinate t-test at mean_zero's level (the aggregate part can only add power), from
    # the coordinates whose two-point distribution is not strongly skewed (|skewness| <= 1, i.e. P(up) in
    # [0.15, 0.85]): samples_needed_for_bias is normal theory, and for a rare level it is not valid (here
    # the smallest n over all coordinates, 514, comes from a coordinate with P(up) = 0.001, i.e. 0.5
    # expected events; at that n the planted bias was detected in only 158/200 runs).
    a_mean = (1 - MC.DEG_SHARE) * MC.ALPHA
    n = min(stats.samples_needed_for_bias(0.01 * abs(x64[j]), sd[j], alpha=a_mean, power=DESIGN_POWER, d=d)
            for j in range(d) if sd[j] > 0 and skew[j] <= 1)
    bad = _Scaled(op, 1.01)
    h = MC.lattice_spacing(op, x)
    runs = _many(bad, x, n, REPS, "power:bias")
    k = sum(not MC.unbiasedness_test(mc, x64, h, alpha=MC.ALPHA, power=False)["passed"] for mc in runs)
    assert _detected_enough(f"1% bias, QSGD s = {s}, d = {d}, n = {n} (samples_needed_for_bias)", k, REPS)
    # and the correct operator at the same n is not rejected (sanity)
    mc = MC.monte_carlo(op, x, n, seed=0, stream="power:bias:clean", cache=False)
    assert MC.unbiasedness_test(mc, x64, h, alpha=MC.ALPHA, power=False)["passed"]


class _Shifted(C.Transform):
    """Planted bias: decode returns C(x) + b for a fixed vector b."""

    name = "shifted_planted"

    def __init__(self, inner, b):
        self.inner, self.b = inner, b

    def __repr__(self):
        return f"shifted({self.inner!r})"

    def encode(self, x, state=(), rng=None):
        return self.inner.encode(x, state, rng)

    def decode(self, m):
        return self.inner.decode(m) + self.b


@pytest.mark.parametrize("name,s,d,n", [("qsgd_s1", 1, 32, 2000), ("qsgd_s4_outliers", 4, 32, 2000)])
def test_reported_resolution_is_not_optimistic(name, s, d, n):
    """The claims' HOLDS needs eps_99 (MC.bias_resolution: the relative bias detected with probability
    0.99) within a resolution; plant exactly that bias on the random coordinates and check that the
    detection rate is not significantly below 0.99 (two-sided 95% CP upper end >= 0.99)."""
    op = C.get("qsgd", s=s)
    x = _x(d, seed=8)
    if "outliers" in name:
        x[:2] *= 10  # most coordinates then have a rare upper level: strongly skewed
    x64 = x.double().numpy()
    h = MC.lattice_spacing(op, x)
    clean = _many(op, x, n, 1, f"res:{name}:clean")[0]
    r = MC.unbiasedness_test(clean, x64, h, alpha=MC.ALPHA)
    assert r["passed"]
    eps = r["resolution"]["eps_99_plus"]
    D = clean.means - x64
    rnd = (D.max(axis=0) - D.min(axis=0)) > r["zero_tol"]
    bad = _Shifted(op, torch.tensor(eps * x64 * rnd, dtype=torch.float32))
    k = sum(not MC.unbiasedness_test(mc, x64, h, alpha=MC.ALPHA, power=False)["passed"]
            for mc in _many(bad, x, n, REPS, f"res:{name}:planted"))
    _, hi = _report(f"bias of eps_99 = {eps:.4f} (normal theory {r['resolution']['eps_normal_theory']:.4f}), "
                     f"{name}, d = {d}, n = {n}: detected", k, REPS, 0.99)
    assert hi >= 0.99


VAR_CASES = {
    # name: (operator, x, the claim's bound, "upper" (one-sided bound) or "identity" (two-sided))
    "lfl_q2_bound": (lambda: C.get("lfl", q=2), lambda: _x(16, seed=5), lambda x: L.lfl_bound(x, 2), "upper"),
    "qsgd_s1_bound": (lambda: C.get("qsgd", s=1), lambda: torch.tensor([1.0, -1.0] * 8),
                      lambda x: QS.qsgd_bound(x, 1), "upper"),
    "fedbat_identity": (lambda: C.get("binarize"), lambda: _x(16, seed=6),
                        lambda x: x.numel() * float(x.abs().max()) ** 2 - float((x.double() ** 2).sum()), "identity"),
}


@pytest.mark.parametrize("case", list(VAR_CASES))
def test_power_variance_ten_percent_above_bound(case):
    mk_op, mk_x, mk_bound, kind = VAR_CASES[case]
    op, x = mk_op(), mk_x()
    bound = float(mk_bound(x))
    pilot = MC.monte_carlo(op, x, 4000, seed=0, stream=f"pilot:{case}", cache=False).sq_err
    c2 = 1.1 * bound / float(pilot.mean())  # planted: E||C' - x||^2 = 1.1 x bound (c^2 from the pilot mean)
    if kind == "upper":  # exact variance known: use it instead of the pilot mean
        exact = L.lfl_exact_variance(x, 2) if case.startswith("lfl") else QS.qsgd_exact_variance(x, 1)
        c2 = 1.1 * bound / exact
    bad = _Inflated(op, math.sqrt(c2))
    sd = c2 * float(pilot.std(ddof=1))
    n = max(20, stats.samples_needed_for_bias(0.1 * bound, sd, alpha=MC.ALPHA, power=DESIGN_POWER,
                                              one_sided=(kind == "upper")))
    k = 0
    for mc in _many(bad, x, n, REPS, f"power:var:{case}"):
        res = MC.variance_bound_test(mc.sq_err, bound) if kind == "upper" else \
            MC.variance_identity_test(mc.sq_err, bound)
        k += not res["passed"]
    assert _detected_enough(f"variance 10% above the bound, {case} (d = {x.numel()}, n = {n})", k, REPS)


class _LyingMessage(Message):
    @property
    def bits(self) -> int:  # forgets the fp32 norm
        return super().bits - 32


class _LyingQSGD(C.QSGD):
    def encode(self, x, state=(), rng=None):
        m, state = super().encode(x, state, rng)
        return _LyingMessage(m.parts, m.meta), state


class _MetaScale(C.ScaledSign):
    """The scale travels in the uncounted meta."""

    def encode(self, x, state=(), rng=None):
        return Message({"signs": C.pack_bits(x >= 0)},
                       {**self._meta(x.shape[-1]), "scale": float(x.abs().sum()) / x.shape[-1]}), state

    def decode(self, m):
        d = m.meta["d"]
        return torch.where(C.unpack_bits(m["signs"], d), 1.0, -1.0) * m.meta["scale"]


class _UnpackedSign(C.Sign):
    """Sends one byte per sign while the documented count is one bit."""

    def encode(self, x, state=(), rng=None):
        return Message({"signs": (x >= 0).to(torch.uint8)}, self._meta(x.shape[-1])), state

    def decode(self, m):
        return torch.where(m["signs"] > 0, self.alpha, -self.alpha)


@pytest.mark.parametrize("planted", [_LyingQSGD, _MetaScale, _UnpackedSign])
def test_power_wrong_bit_count(planted):
    g = np.random.default_rng(0)
    ds = g.integers(2, 3000, 100)
    op = planted()
    k = sum(not TC.check_bits(op, int(d), seed=i)["ok"] for i, d in enumerate(ds))
    print(f"\nwrong bits, {planted.__name__}: detected {k}/100 configurations (deterministic check)")
    assert k == 100


def test_bits_check_has_no_false_alarms_on_registered_operators():
    g = np.random.default_rng(1)
    ds = [int(d) for d in g.integers(1, 3000, 12)]
    bad = [(repr(op), d) for op in TC.bits_operators() for d in ds if not TC.check_bits(op, d)["ok"]]
    assert not bad
