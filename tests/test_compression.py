"""Tests of the compression operators (algorithms/compress/): packing, exact bit counts, Monte-Carlo unbiasedness and variance,
error feedback, edge cases, vmap equivalence, registry errors.

Monte-Carlo checks draw many encodings at once with ``torch.func.vmap`` over ``CounterRng`` keys, so
they are deterministic (fixed keys) and fast.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms import compress as C
from algorithms.core import CounterRng, Message

# --------------------------------------------------------------------------------------------------
# helpers


def B(nbits: int) -> int:
    """Bits of an nbits-long bit string padded to whole bytes."""
    return 8 * math.ceil(nbits / 8)


def clog2(m: int) -> int:
    return 0 if m <= 1 else math.ceil(math.log2(m))


def draws(op, x: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """n independent C(x) (rows), from CounterRng keys seed*10^7 + 0..n-1, via vmap."""
    keys = torch.arange(n, dtype=torch.int64) + seed * 10**7
    return torch.func.vmap(lambda k: op.compress(x, CounterRng(k)))(keys)


def fixture_x(d: int = 40, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(d, generator=g)
    x[0] = 0.0  # an exact zero
    x[1] = -x[2]  # a repeated magnitude
    return x


def z_scores(samples: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-coordinate z-scores of the sample mean against target; coordinates without variance apart."""
    n = samples.shape[0]
    s = samples.double()
    mean, std = s.mean(0), s.std(0)
    random = std > 0
    z = (mean - target.double())[random] / (std[random] / math.sqrt(n))
    exact_err = (mean - target.double())[~random].abs()
    return z, exact_err


def looks_unbiased(samples: torch.Tensor, target: torch.Tensor) -> bool:
    z, exact_err = z_scores(samples, target)
    return bool((z.abs().max() < 5 if z.numel() else True) and (exact_err < 1e-5).all())


# every configuration exercised by the generic tests
CONFIGS = [
    ("identity", {}),
    ("lfl", {"q": 1}), ("lfl", {"q": 2}), ("lfl", {"q": 5}),
    ("qsgd", {"s": 1}), ("qsgd", {"s": 4}),
    ("fedpaq", {"bits": 3}), ("fedpaq", {"bits": 4}),
    ("sign", {}), ("sign", {"alpha": 0.5}),
    ("scaled_sign", {}),
    ("noisy_sign", {}), ("noisy_sign", {"alpha": 0.3, "sigma": 0.0}),
    ("stochastic_sign", {}), ("stochastic_sign", {"alpha": None, "norm": "l2"}),
    ("binarize", {}), ("binarize", {"alpha": 0.5}),
    ("topk", {"k": 3}), ("topk", {"ratio": 0.1}),
    ("randk", {"k": 3}), ("randk", {"ratio": 0.25, "scale": False}),
    ("ef", {}), ("ef", {"inner": "qsgd", "s": 2}),
]
CONFIG_IDS = [f"{n}-{'-'.join(f'{k}={v}' for k, v in p.items())}" for n, p in CONFIGS]


# --------------------------------------------------------------------------------------------------
# packing


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), max_size=130))
def test_pack_bits_round_trip(bools):
    b = torch.tensor(bools, dtype=torch.bool)
    packed = C.pack_bits(b)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(len(bools) / 8)
    assert torch.equal(C.unpack_bits(packed, len(bools)), b)
    # layout: entry 8j+i is bit i of byte j
    ref = [sum(int(v) << i for i, v in enumerate(bools[j:j + 8])) for j in range(0, len(bools), 8)]
    assert packed.tolist() == ref


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40).flatmap(
    lambda bits: st.tuples(st.just(bits), st.lists(st.integers(0, 2**bits - 1), max_size=60))))
def test_pack_uint_round_trip(case):
    bits, values = case
    v = torch.tensor(values, dtype=torch.int64)
    packed = C.pack_uint(v, bits)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(len(values) * bits / 8)
    assert torch.equal(C.unpack_uint(packed, len(values), bits), v)


def test_pack_helpers_vmap_and_errors():
    g = torch.Generator().manual_seed(0)
    b = torch.rand(4, 13, generator=g) < 0.5
    packed = torch.func.vmap(C.pack_bits)(b)
    assert torch.equal(packed, torch.stack([C.pack_bits(r) for r in b]))
    assert torch.equal(torch.func.vmap(lambda p: C.unpack_bits(p, 13))(packed), b)
    v = torch.randint(0, 2**5, (4, 11), generator=g)
    pv = torch.func.vmap(lambda t: C.pack_uint(t, 5))(v)
    assert torch.equal(pv, torch.stack([C.pack_uint(r, 5) for r in v]))
    assert torch.equal(torch.func.vmap(lambda p: C.unpack_uint(p, 11, 5))(pv), v)
    with pytest.raises(ValueError):
        C.pack_uint(v[0], 63)


# --------------------------------------------------------------------------------------------------
# exact bit counts


def expected_bits(name: str, params: dict, d: int) -> int:
    if name == "identity":
        return 32 * d
    if name == "lfl":
        return 64 + B(d) + B(d * clog2(params["q"] + 1))
    if name == "qsgd":
        return 32 + B(d) + B(d * clog2(params["s"] + 1))
    if name == "fedpaq":
        return 32 + B(d) + B(d * (params["bits"] - 1))
    if name in ("sign", "noisy_sign"):
        return B(d)
    if name == "stochastic_sign":
        return B(d) + (32 if params.get("alpha", 0.01) is None else 0)
    if name in ("scaled_sign", "binarize"):
        return B(d) + 32
    if name in ("topk", "randk"):
        k = params.get("k") or max(1, math.ceil(params["ratio"] * d - 1e-9))
        k = min(k, d)
        return 32 * k + B(k * clog2(d))
    if name == "ef":
        inner = dict(params)
        return expected_bits(inner.pop("inner", "scaled_sign"), inner, d)
    raise KeyError(name)


@pytest.mark.parametrize("name,params", CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("d", [0, 1, 5, 8, 9, 64, 100, 1001])
def test_exact_bits(name, params, d):
    op = C.get(name, **params)
    x = torch.randn(d, generator=torch.Generator().manual_seed(d))
    msg = op.encode(x, rng=CounterRng(3))[0]
    assert msg.bits == expected_bits(name, params, d)
    for key, part in msg.parts.items():  # scalars travel as fp32, packed data as uint8
        assert part.dtype in (torch.uint8, torch.float32), key


def test_bit_examples():
    d = 1000
    x = torch.randn(d)
    assert C.get("sign").encode(x)[0].bits == 1000
    assert C.get("binarize").encode(x)[0].bits == 1032
    assert C.get("identity").encode(x)[0].bits == 32000
    assert C.get("lfl", q=2).encode(x)[0].bits == 64 + 1000 + 2000
    assert C.get("fedpaq", bits=4).encode(x)[0].bits == 32 + 4 * 1000
    assert C.get("topk", k=10).encode(x)[0].bits == 10 * 32 + 8 * math.ceil(10 * 10 / 8)


@pytest.mark.parametrize("q", [1, 2, 3, 5, 7])
def test_lfl_bits_vs_paper_count(q):
    """Paper (Eq. 20): 64 + d (1 + log2(q+1)). Equal when q+1 is a power of two and 8 | d, else larger."""
    for d in (8, 800, 803):
        ours = C.get("lfl", q=q).encode(torch.randn(d))[0].bits
        paper = 64 + d * (1 + math.log2(q + 1))
        assert ours >= paper - 1e-9
        assert ours <= 64 + d * (1 + clog2(q + 1)) + 16  # fixed-length levels + at most 2 padding bytes
        if (q + 1) & q == 0 and d % 8 == 0:
            assert ours == paper


# --------------------------------------------------------------------------------------------------
# Monte-Carlo unbiasedness


UNBIASED = [
    ("identity", {}), ("lfl", {"q": 1}), ("lfl", {"q": 2}), ("lfl", {"q": 5}),
    ("qsgd", {"s": 1}), ("qsgd", {"s": 4}), ("fedpaq", {"bits": 3}),
    ("binarize", {}), ("binarize", {"alpha": 4.0}),  # 4 > ||x||_inf for fixture_x
    ("randk", {"k": 8}), ("stochastic_sign", {"alpha": None}),
    ("stochastic_sign", {"alpha": None, "norm": "l2"}),
]


@pytest.mark.parametrize("name,params", UNBIASED, ids=[f"{n}{p}" for n, p in UNBIASED])
def test_unbiased_monte_carlo(name, params):
    x = fixture_x()
    assert x.abs().max() < 4.0
    op = C.get(name, **params)
    assert op.properties.unbiased or "unbiased iff alpha >= ||x||_inf" in op.properties.note
    n = 20000
    samples = draws(op, x, n)
    z, exact_err = z_scores(samples, x)
    # Bonferroni over <= 40 coordinates: P(max |z| > 5) ~ 40 * 6e-7
    assert z.abs().max() < 5.0 if z.numel() else True
    assert (exact_err < 1e-5).all()  # deterministic coordinates are reproduced exactly
    if z.numel() >= 10:  # aggregate: mean of z^2 ~ chi2_m / m, sd sqrt(2/m)
        assert 0.3 < float((z**2).mean()) < 2.0


def test_unbiased_check_has_power():
    """The same check fails for biased operators: binarize with alpha < ||x||_inf clips (mean ->
    clip(x)), stochastic_sign with a fixed step shrinks (mean -> alpha x/||x||_inf), randk without
    rescale shrinks (mean -> k/d x)."""
    x = fixture_x()
    n = 20000
    alpha = float(x.abs().mean())
    assert not C.get("binarize", alpha=alpha).properties.unbiased
    s = draws(C.get("binarize", alpha=alpha), x, n)
    assert not looks_unbiased(s, x)
    assert looks_unbiased(s, x.clamp(-alpha, alpha))
    s = draws(C.get("stochastic_sign", alpha=0.01), x, n)
    assert not looks_unbiased(s, x)
    assert looks_unbiased(s, 0.01 * x / x.abs().max())
    s = draws(C.get("randk", k=8, scale=False), x, n)
    assert not looks_unbiased(s, x)
    assert looks_unbiased(s, x * 8 / 40)
    # a 1% bias planted in an unbiased quantizer is caught
    s = draws(C.get("qsgd", s=4), x, n)
    assert looks_unbiased(s, x) and not looks_unbiased(s * 1.01, x)


def test_biased_operators():
    """scaled_sign and topk are deterministic and biased; noisy_sign's mean is alpha erf(x/(sigma sqrt 2))."""
    x = fixture_x()
    for op in (C.get("scaled_sign"), C.get("topk", k=5), C.get("sign", alpha=0.5)):
        assert not op.properties.unbiased
        c1, c2 = op.compress(x, CounterRng(1)), op.compress(x, CounterRng(2))
        assert torch.equal(c1, c2)  # deterministic: E[C(x)] = C(x)
        assert (c1 - x).norm() > 0.3 * x.norm()
        err = float((c1 - x).double().pow(2).sum())
        if op.name == "topk":  # (1 - k/d)-contraction bound
            assert err <= op.properties.variance_bound(x)
        else:  # exact error
            assert math.isclose(err, op.properties.variance_bound(x), rel_tol=1e-5)
    scale = x.abs().mean()
    assert torch.allclose(C.get("scaled_sign").compress(x), scale * torch.where(x >= 0, 1.0, -1.0))
    top = C.get("topk", k=5).compress(x)
    assert (top != 0).sum() == 5 and set(top.nonzero().flatten().tolist()) == set(
        x.abs().topk(5).indices.tolist())
    # noisy sign: sigma comparable to x so that the mean is informative
    op = C.get("noisy_sign", alpha=1.0, sigma=1.0)
    s = draws(op, x, 20000)
    z, _ = z_scores(s, torch.special.erf(x.double() / math.sqrt(2.0)))
    assert z.abs().max() < 5
    assert z_scores(s, x)[0].abs().max() > 20


# --------------------------------------------------------------------------------------------------
# variance


def mc_mse(op, x, n=20000, seed=1):
    err = (draws(op, x, n, seed) - x).double().pow(2).sum(1)
    return float(err.mean()), float(err.std() / math.sqrt(n))


def frac_var(u: torch.Tensor) -> torch.Tensor:
    p = u - torch.floor(u)
    return p * (1 - p)


@pytest.mark.parametrize("s", [1, 2, 4])
def test_qsgd_variance(s):
    x = fixture_x().double()
    op = C.get("qsgd", s=s)
    mse, se = mc_mse(op, x.float())
    norm = x.norm()
    exact = float(norm**2 / s**2 * frac_var(x.abs() / norm * s).sum())
    assert abs(mse - exact) < 5 * se + 1e-6
    bound = op.properties.variance_bound(x)
    d = x.numel()
    assert math.isclose(bound, min(d / s**2, math.sqrt(d) / s) * float(norm**2), rel_tol=1e-9)
    assert mse <= bound


@pytest.mark.parametrize("q", [1, 2, 5])
def test_lfl_variance_lemma1(q):
    x = fixture_x().double()
    op = C.get("lfl", q=q)
    mse, se = mc_mse(op, x.float())
    a = x.abs()
    r = a.max() - a.min()
    exact = float(r**2 / q**2 * frac_var((a - a.min()) / r * q).sum())
    assert abs(mse - exact) < 5 * se + 1e-6
    bound = op.properties.variance_bound(x)
    assert math.isclose(bound, x.numel() * float(r**2) / (4 * q * q), rel_tol=1e-9)
    assert mse <= bound
    eps = float(r**2 / x.pow(2).sum())  # Lemma 1's eps in [0, 1]
    assert 0 <= eps <= 1
    assert math.isclose(bound, eps * x.numel() * float(x.pow(2).sum()) / (4 * q * q), rel_tol=1e-9)


def test_lfl_bound_is_attained():
    """Every normalised magnitude at a level midpoint (p_i = 1/2) attains Lemma 1's bound."""
    q = 2
    x = torch.tensor([0.0, 0.25, 0.75, 1.0, -0.25, -0.75] * 4)  # x_min = 0, x_max = 1
    op = C.get("lfl", q=q)
    mse, se = mc_mse(op, x)
    interior = 16  # the +-0.25 and +-0.75 entries sit at midpoints: error always +-1/(2q)
    assert mse == pytest.approx(interior / (4 * q * q)) and se == 0
    assert op.properties.variance_bound(x) == pytest.approx(24 / (4 * q * q))


@pytest.mark.parametrize("alpha", [None, 1.5, 2.0])
def test_binarize_variance_identity(alpha):
    """FedBAT: for alpha >= ||x||_inf, E||S(x) - x||^2 = d alpha^2 - ||x||^2 (within 2%)."""
    x = fixture_x()
    x = x / x.abs().max()  # ||x||_inf = 1
    op = C.get("binarize", alpha=alpha)
    a = 1.0 if alpha is None else alpha
    closed = x.numel() * a * a - float(x.double().pow(2).sum())
    mse, se = mc_mse(op, x)
    assert abs(mse - closed) < max(5 * se, 0.0) and abs(mse / closed - 1) < 0.02
    assert op.properties.variance_bound(x) == pytest.approx(closed, rel=1e-6)
    out = op.compress(x, CounterRng(0))
    assert torch.equal(out.abs(), torch.full_like(out, a))  # exactly +-alpha: one bit per entry


def test_binarize_theory_variant_q2():
    """alpha = ||x||_inf: E||S(x)-x||^2 = d||x||_inf^2 - ||x||^2 <= (d-1)||x||^2, equality for 1-sparse."""
    d = 30
    x = torch.zeros(d)
    x[7] = -2.0
    op = C.get("binarize")
    mse, se = mc_mse(op, x)
    assert mse == pytest.approx((d - 1) * 4.0) and se == 0  # zeros always land on +-2
    assert op.properties.variance_bound(x) == pytest.approx((d - 1) * 4.0)
    msg = op.encode(x, rng=CounterRng(0))[0]
    assert float(msg["alpha"]) == 2.0


@pytest.mark.parametrize("name,params", [
    ("randk", {"k": 8}), ("randk", {"k": 8, "scale": False}),
    ("stochastic_sign", {}), ("stochastic_sign", {"alpha": 0.5, "norm": "l2"}),
    ("stochastic_sign", {"alpha": None}), ("noisy_sign", {"alpha": 0.5, "sigma": 0.7}),
    ("binarize", {"alpha": 0.4}),  # clipping regime: exact error formula
])
def test_exact_variance_formulas(name, params):
    x = fixture_x()
    op = C.get(name, **params)
    mse, se = mc_mse(op, x)
    assert abs(mse - op.properties.variance_bound(x)) < 5 * se + 1e-6


def test_contraction_bounds_hold():
    g = torch.Generator().manual_seed(5)
    for _ in range(20):
        x = torch.randn(50, generator=g) * torch.rand(50, generator=g) ** 3
        for op in (C.get("topk", k=5), C.get("scaled_sign")):
            err = float((op.compress(x) - x).double().pow(2).sum())
            assert err <= op.properties.variance_bound(x) * (1 + 1e-5) + 1e-9
            delta = 5 / 50 if op.name == "topk" else 1 / 50
            assert err <= float(x.double().pow(2).sum()) * (1 - delta) + 1e-6


# --------------------------------------------------------------------------------------------------
# error feedback


def run_ef(op, xs, seed=0):
    res = op.init(xs.shape[1])
    total_sent = torch.zeros(xs.shape[1], dtype=torch.float64)
    norms = []
    for t, x in enumerate(xs):
        msg, new_res = op.encode(x, res, CounterRng(seed * 1000 + t))
        sent = op.decode(msg)
        assert torch.allclose(new_res, x + res - sent, atol=1e-6)
        total_sent += sent.double()
        res = new_res
        norms.append(float(res.norm()))
    # telescoping: sum of what was sent + final residual = sum of the inputs
    assert torch.allclose(total_sent + res.double(), xs.double().sum(0), atol=1e-3)
    return torch.tensor(norms)


def test_ef_residual_bounded_contractions():
    """For a delta-contraction C, ||e_t||^2 <= 2 (1-delta)(1+2/delta)/delta * max_t ||x_t||^2."""
    g = torch.Generator().manual_seed(11)
    d, steps = 100, 200
    xs = torch.randn(steps, d, generator=g) * (1 + 3 * torch.rand(steps, 1, generator=g))
    gmax2 = float(xs.pow(2).sum(1).max())
    for op, delta in ((C.get("ef", inner="topk", k=10), 10 / d), (C.get("ef"), 1 / d)):
        norms = run_ef(op, xs)
        bound = 2 * (1 - delta) * (1 + 2 / delta) / delta * gmax2
        assert float(norms.max() ** 2) <= bound
        # and in practice: no growth over time (last 50 steps vs steps 50-100)
        assert norms[-50:].mean() < 2 * norms[50:100].mean()
        assert torch.isfinite(norms).all()
    # EF-SignSGD (scaled sign): with delta(p) ~ 2/pi the residual stays of the order of ||x||
    norms = run_ef(C.get("ef"), xs)
    assert float(norms.max()) < 3 * math.sqrt(gmax2)


def test_ef_fixed_sign_residual_bounded():
    """Fixed-step sign with |x_i| <= alpha: |e_i| <= alpha stays true (p in [-2a, 2a])."""
    g = torch.Generator().manual_seed(12)
    xs = (torch.rand(200, 64, generator=g) * 2 - 1) * 0.5
    op = C.get("ef", inner="sign", alpha=0.5)
    res = op.init(64)
    for t, x in enumerate(xs):
        _, res = op.encode(x, res, t)
        assert float(res.abs().max()) <= 0.5 + 1e-6


def test_ef_api():
    op = C.get("ef", inner=C.get("qsgd", s=2))
    assert op.params == {"inner": "qsgd", "s": 2}
    assert not op.properties.unbiased and op.properties.variance_bound is None
    x = fixture_x()
    msg0, r0 = op.encode(x, op.init(x.numel()), CounterRng(4))
    assert torch.equal(op.decode(msg0), C.get("qsgd", s=2).compress(x, CounterRng(4)))
    assert msg0.bits == C.get("qsgd", s=2).encode(x)[0].bits
    assert torch.equal(op.encode(x, rng=CounterRng(4))[0]["levels"], msg0["levels"])
    with pytest.raises(ValueError):
        C.get("ef", inner=C.get("sign"), alpha=0.1)
    with pytest.raises(ValueError):
        C.get("ef", inner="ef")


# --------------------------------------------------------------------------------------------------
# edge cases


EDGE_INPUTS = {
    "empty": torch.zeros(0),
    "one": torch.tensor([0.7]),
    "zero1": torch.zeros(1),
    "zeros13": torch.zeros(13),
    "const13": torch.full((13,), 0.3),
    "negconst13": torch.full((13,), -0.3),
    "pm13": torch.tensor([0.3, -0.3] * 6 + [0.3]),
    "onehot13": torch.nn.functional.one_hot(torch.tensor(4), 13).float(),
    "tiny13": torch.full((13,), 1e-30),
    "mixed13": torch.tensor([0.0, 1e-20, -1.0, 3.0, 0.5, -0.5, 2.0, 0.0, 1.0, -3.0, 0.25, 7.0, -7.0]),
}


@pytest.mark.parametrize("name,params", CONFIGS, ids=CONFIG_IDS)
def test_edge_cases_finite(name, params):
    op = C.get(name, **params)
    for label, x in EDGE_INPUTS.items():
        msg = op.encode(x, rng=CounterRng(0))[0]
        out = op.decode(msg)
        assert out.shape == x.shape and out.dtype == torch.float32, label
        assert torch.isfinite(out).all(), label
        for part in msg.parts.values():
            assert not part.is_floating_point() or torch.isfinite(part).all(), label
        if op.properties.variance_bound is not None:
            assert math.isfinite(op.properties.variance_bound(x)), label


def test_edge_case_values():
    for label in ("zero1", "zeros13", "empty"):
        x = EDGE_INPUTS[label]
        for op in (C.get("lfl"), C.get("qsgd", s=3), C.get("binarize"), C.get("fedpaq"),
                   C.get("stochastic_sign", alpha=None), C.get("scaled_sign"), C.get("topk", k=2),
                   C.get("randk", k=2)):
            assert torch.equal(op.compress(x, CounterRng(1)), x), (op, label)
    # all magnitudes equal (x_max = x_min): LFL is exact
    for label in ("const13", "negconst13", "pm13", "one"):
        x = EDGE_INPUTS[label]
        assert torch.equal(C.get("lfl", q=3).compress(x, CounterRng(2)), x), label
    # LFL reproduces x_max and x_min exactly, and only ever outputs its q+1 levels
    x = EDGE_INPUTS["mixed13"]
    out = C.get("lfl", q=4).compress(x, CounterRng(3))
    levels = torch.tensor([7.0 * k / 4 for k in range(5)])
    assert torch.isclose(out.abs().unsqueeze(1), levels.unsqueeze(0), atol=1e-6).any(1).all()
    assert out[11] == 7.0 and out[12] == -7.0 and out[0] == 0.0
    # sign(0) = +1 for the fixed-step sign
    assert torch.equal(C.get("sign", alpha=0.5).compress(torch.zeros(3)), torch.full((3,), 0.5))
    # binarize with alpha = 0 (x = 0): S(0) := 0, alpha sent as 0
    assert float(C.get("binarize").encode(torch.zeros(5))[0]["alpha"]) == 0.0


# --------------------------------------------------------------------------------------------------
# vmap equivalence and randomness sources


@pytest.mark.parametrize("name,params", CONFIGS, ids=CONFIG_IDS)
def test_vmap_matches_loop(name, params):
    op = C.get(name, **params)
    g = torch.Generator().manual_seed(7)
    xs = torch.randn(3, 21, generator=g)
    keys = torch.tensor([3, 11, 1234567], dtype=torch.int64)
    stacked = torch.func.vmap(lambda k, x: op.encode(x, rng=CounterRng(k))[0])(keys, xs)
    decoded = torch.func.vmap(op.decode)(stacked)
    for i in range(3):
        single = op.encode(xs[i], rng=CounterRng(keys[i]))[0]
        assert set(single.parts) == set(stacked.parts)
        for key, part in single.parts.items():
            assert torch.equal(stacked.parts[key][i], part), key
        assert torch.equal(decoded[i], op.decode(single))
        assert stacked.stacked_bits() == single.bits
    if isinstance(op, C.error_feedback):
        res = torch.randn(3, 21, generator=g) * 0.1
        msgs, new_res = torch.func.vmap(lambda k, x, r: op.encode(x, r, CounterRng(k)))(keys, xs, res)
        for i in range(3):
            m, r = op.encode(xs[i], res[i], CounterRng(keys[i]))
            assert torch.equal(new_res[i], r)
            assert torch.equal(torch.func.vmap(op.decode)(msgs)[i], op.decode(m))


def test_rng_kinds_and_no_global_randomness():
    op = C.get("qsgd", s=2)
    x = fixture_x()
    state = torch.get_rng_state()
    a = op.compress(x, 5)
    b = op.compress(x, 5)
    assert torch.equal(a, b)  # an int seed is reproducible
    c = op.compress(x, torch.Generator().manual_seed(5))
    assert torch.equal(a, c)
    for name, params in CONFIGS:  # counter-based rng: global generator untouched
        C.get(name, **params).compress(x, CounterRng(9))
    assert torch.equal(torch.get_rng_state(), state)
    assert op.compress(x).shape == x.shape  # None: the global generator


def test_rng_calls_are_value_independent():
    """The same number of rng calls whatever x is (so executors stay in lock-step)."""
    for name, params in CONFIGS:
        op = C.get(name, **params)
        counts = []
        for x in (torch.zeros(9), torch.randn(9)):
            rng = CounterRng(0)
            op.encode(x, rng=rng)[0]
            counts.append(rng.counter)
        assert counts[0] == counts[1], name


# --------------------------------------------------------------------------------------------------
# registry


def test_registry_names_and_properties():
    required = {"identity", "lfl", "qsgd", "sign", "scaled_sign", "noisy_sign", "stochastic_sign",
                "binarize", "fedpaq", "topk", "randk", "ef"}
    assert required <= set(C.names())
    for name in C.names():
        op = C.get(name)
        assert op.name == name
        props = op.properties
        assert isinstance(props, C.Properties) and isinstance(props.unbiased, bool)
        assert props.variance_bound is None or callable(props.variance_bound)
        assert isinstance(op.encode(torch.ones(3))[0], Message)
    assert C.get("noisy_sign").params == {"alpha": 0.01, "sigma": 0.01}
    assert C.get("stochastic_sign").params == {"alpha": 0.01, "norm": "inf"}
    assert C.get("fedpaq", bits=4).s == 7 and C.get("fedpaq", bits=3).s == 3


def test_unknown_name_and_bad_params():
    with pytest.raises(ValueError, match="qsgd") as e:
        C.get("qsgdd")
    assert "binarize" in str(e.value) and "topk" in str(e.value)
    with pytest.raises(ValueError, match="valid parameters: s"):
        C.get("qsgd", q=3)
    with pytest.raises(ValueError, match="binarize"):
        C.get("ef", inner="nope")
    bad = [("lfl", {"q": 0}), ("lfl", {"q": 2.5}), ("qsgd", {"s": -1}), ("sign", {"alpha": 0}),
           ("noisy_sign", {"sigma": -1.0}), ("stochastic_sign", {"norm": "l1"}),
           ("binarize", {"alpha": -0.1}), ("fedpaq", {"bits": 1}), ("topk", {"k": 3, "ratio": 0.1}),
           ("topk", {"ratio": 1.5}), ("randk", {"k": 0}), ("randk", {"scale": "yes"}),
           ("ef", {"inner": "sign", "s": 3})]
    for name, params in bad:
        with pytest.raises(ValueError):
            C.get(name, **params)
    with pytest.raises(ValueError):
        C.get("sign").encode(torch.ones(2, 2))[0]
