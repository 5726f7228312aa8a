"""FedBAT's baselines (Section 2 / App. A.2, B.1): SignSGD, EF-SignSGD, Noisy-SignSGD, Stoc-SignSGD,
ZeroFL (top-k part), FedPAQ and BiFL. Each one's key update on a hand-computed case, exact bits,
FedPAQ(identity) == FedAvg, defaults and invalid hyperparameters."""
from __future__ import annotations

import math

import pytest
import torch
from torch.func import grad, vmap

import algorithms
from algorithms.core import CounterRng, Message, ParamLayout, ParamSlice, RoundInfo, make_hyper, stack_trees
from algorithms.bifl import binary_weights_ste
from algorithms.compress.compressed_update import CompressedUpdate
from tests.helpers import assert_same_history, run_tiny, tiny_bn_model

# two conv/linear weights (3 and 10 entries) and a norm tensor of 2 entries
LAYOUT = ParamLayout((ParamSlice("a.weight", 0, 3, (3,), "weight"), ParamSlice("bn.weight", 3, 5, (2,), "norm"),
                      ParamSlice("b.weight", 5, 15, (10,), "weight")))
NAMES = ["signsgd", "ef_signsgd", "noisy_signsgd", "stoc_signsgd", "zerofl", "fedpaq", "fedpaq_4bit", "bifl",
         "bifl_full"]


def B(nbits: int) -> int:
    return 8 * math.ceil(nbits / 8)


def make(name, **args):
    return algorithms.make(name, LAYOUT, 4, args)


def info(k=2):
    return RoundInfo(0, torch.arange(k), 4, torch.ones(k), torch.full((k,), 3), 0.1)


DELTA = torch.tensor([0.3, -0.02, 0.0, 1.5, -2.5, 0.04, -0.01, 0.2, -0.3, 0.001, 0.0, -0.5, 0.6, 0.05, -0.07])
WEIGHTS = [i for i in range(15) if not 3 <= i < 5]


def sign(x):
    return torch.where(x >= 0, 1.0, -1.0)


# ----------------------------------------------------------------------------------------- SignSGD


def test_signsgd_update_bits_and_server_step():
    alg = make("signsgd")
    msg, _ = alg.encode(DELTA, None, {})
    expected = DELTA.clone()
    expected[WEIGHTS] = 0.001 * sign(DELTA[WEIGHTS])  # Eq. 3, alpha = 0.001; BN entries in fp32
    assert torch.equal(alg.decode(msg), expected)
    assert msg.bits == B(3) + B(10) + 32 * 2
    other = -DELTA
    msg2, _ = alg.encode(other, None, {})
    new = alg.aggregate({"params": torch.zeros(15)}, stack_trees([msg, msg2]), torch.tensor([0.75, 0.25]), info())
    assert torch.allclose(new["params"], 0.75 * expected + 0.25 * alg.decode(msg2))
    whole = make("signsgd", per_layer=False)
    assert whole.encode(DELTA, None, {})[0].bits == B(13) + 64
    assert torch.equal(whole.decode(whole.encode(DELTA, None, {})[0]), expected)
    everything = make("signsgd", scope="all")
    assert everything.encode(DELTA, None, {})[0].bits == B(3) + B(2) + B(10)


def test_signsgd_round_moves_weights_by_at_most_alpha():
    r = run_tiny("signsgd", "sequential", rounds=1, model=tiny_bn_model, algorithm_args={"alpha": 0.01})
    torch.manual_seed(0)  # the engine builds the model after seeding with the run's seed
    w0 = torch.nn.utils.parameters_to_vector(tiny_bn_model((6,), 3).parameters()).detach()
    w1 = torch.nn.utils.parameters_to_vector(r.model.parameters()).detach()
    layout = ParamLayout.from_module(r.model)
    mask = layout.mask(("weight",))
    assert 0 < float((w1 - w0)[mask].abs().max()) <= 0.01 + 1e-6


# ------------------------------------------------------------------------------------- EF-SignSGD


def test_ef_signsgd_two_rounds_by_hand():
    alg = make("ef_signsgd")
    st = alg.client_init(torch.zeros(15))
    assert torch.equal(st["residual"], torch.zeros(13))
    d1 = torch.zeros(15)
    d1[0:3] = torch.tensor([1.0, -3.0, 2.0])  # p = d1, scale ||p||_1/3 = 2, C = [2, -2, 2], e = [-1, -1, 0]
    d1[3:5] = torch.tensor([7.0, 8.0])
    msg, st = alg.encode(d1, None, st)
    out = alg.decode(msg)
    assert torch.allclose(out[0:3], torch.tensor([2.0, -2.0, 2.0]))
    assert torch.equal(out[3:5], torch.tensor([7.0, 8.0]))  # fp32, no residual
    assert torch.allclose(st["residual"][0:3], torch.tensor([-1.0, -1.0, 0.0]))
    assert msg.bits == (B(3) + 32) + (B(10) + 32) + 64
    d2 = torch.zeros(15)
    d2[0:3] = torch.tensor([2.0, 0.0, -1.0])  # p = [1, -1, -1], scale 1, C = p, e = 0
    msg, st = alg.encode(d2, None, st)
    assert torch.allclose(alg.decode(msg)[0:3], torch.tensor([1.0, -1.0, -1.0]))
    assert torch.allclose(st["residual"][0:3], torch.zeros(3))


def test_ef_signsgd_residual_is_per_client_state_in_a_run():
    a = run_tiny("ef_signsgd", "sequential", rounds=3)
    b = run_tiny("ef_signsgd", "vectorized", rounds=3)
    assert_same_history(a, b)


# ---------------------------------------------------------------------------------- Noisy-SignSGD


def test_noisy_signsgd_sigma_zero_is_sign_and_noise_mean():
    alg = make("noisy_signsgd", sigma=0.0)
    out = alg.decode(alg.encode(DELTA, CounterRng(0), {})[0])
    assert torch.equal(out[WEIGHTS], 0.01 * sign(DELTA[WEIGHTS]))
    alg = make("noisy_signsgd")  # alpha = sigma = 0.01: E C(x)_i = alpha erf(x_i / (sigma sqrt 2))
    x = torch.zeros(15)
    x[0:3] = torch.tensor([0.01, -0.005, 0.0])
    n = 20000
    outs = vmap(lambda k: alg.decode(alg.encode(x, CounterRng(k), {})[0]))(torch.arange(n))
    expect = 0.01 * torch.special.erf(x[0:3] / (0.01 * math.sqrt(2)))
    assert torch.allclose(outs.mean(0)[0:3], expect, atol=4.5 * 0.01 / math.sqrt(n))
    assert alg.encode(x, CounterRng(0), {})[0].bits == B(3) + B(10) + 64


# ----------------------------------------------------------------------------------- Stoc-SignSGD


def test_stoc_signsgd_inf_norm_per_layer():
    alg = make("stoc_signsgd")
    x = torch.zeros(15)
    x[0:3] = torch.tensor([0.4, -0.2, 0.1])  # layer a: ||.||_inf = 0.4
    x[5:8] = torch.tensor([-3.0, 1.5, 0.0])  # layer b: ||.||_inf = 3
    n = 20000
    outs = vmap(lambda k: alg.decode(alg.encode(x, CounterRng(k), {})[0]))(torch.arange(n))
    assert torch.all(outs[:, 0] == 0.01) and torch.all(outs[:, 5] == -0.01)  # P = 1 at +-||x||_inf
    expect = 0.01 * torch.cat([x[0:3] / 0.4, x[5:15] / 3.0])  # E C(x) = alpha x / ||x||_inf, per layer
    got = torch.cat([outs.mean(0)[0:3], outs.mean(0)[5:15]])
    assert torch.allclose(got, expect, atol=4.5 * 0.01 / math.sqrt(n))
    assert alg.encode(x, CounterRng(0), {})[0].bits == B(3) + B(10) + 64


# ----------------------------------------------------------------------------------------- ZeroFL


def test_zerofl_top3_percent_with_index_bits():
    layout = ParamLayout((ParamSlice("w", 0, 200, (200,), "weight"), ParamSlice("n", 200, 202, (2,), "norm")))
    alg = algorithms.make("zerofl", layout, 4, {})
    x = torch.linspace(-1, 1, 202) * 0.01
    x[[7, 50, 120, 199]] = torch.tensor([5.0, -4.0, 3.0, 2.0])  # k = ceil(0.03 * 200) = 6
    x[[10, 11]] = torch.tensor([1.0, -1.0])
    msg, _ = alg.encode(x, None, {})
    out = alg.decode(msg)
    keep = [7, 10, 11, 50, 120, 199]
    expect = torch.zeros(202)
    expect[keep] = x[keep]
    expect[200:] = x[200:]
    assert torch.equal(out, expect)
    assert msg.bits == 32 * 6 + B(6 * 8) + 64  # 6 fp32 values, 6 indices of ceil(log2 200) = 8 bits


# ----------------------------------------------------------------------------------------- FedPAQ


def test_fedpaq_bits_and_identity_equals_fedavg():
    for bits, name in ((3, "fedpaq"), (4, "fedpaq_4bit")):
        alg = make(name)
        assert alg.hp.bits == bits
        msg, _ = alg.encode(DELTA, CounterRng(1), {})
        per = [32 + B(d) + B(d * (bits - 1)) for d in (3, 10)]
        assert msg.bits == sum(per) + 64
    alg = make("fedpaq", bits=32)
    msg, _ = alg.encode(DELTA, None, {})
    assert torch.equal(alg.decode(msg), DELTA) and msg.bits == 32 * 15
    a = run_tiny("fedavg", "sequential", model=tiny_bn_model, rounds=3)
    b = run_tiny("fedpaq", "vectorized", model=tiny_bn_model, rounds=3, algorithm_args={"bits": 32})
    assert_same_history(a, b)
    # deterministic operators leave ctx.rng alone: the same dropout masks as FedAvg
    a = run_tiny("fedavg", "sequential", model=dropout_model, rounds=2)
    b = run_tiny("fedpaq", "sequential", model=dropout_model, rounds=2, algorithm_args={"bits": 32})
    assert_same_history(a, b)


def dropout_model(input_shape, num_classes):
    return torch.nn.Sequential(torch.nn.Linear(input_shape[0], 16), torch.nn.ReLU(), torch.nn.Dropout(0.5),
                               torch.nn.Linear(16, num_classes))


def test_fedpaq_is_unbiased():
    alg = make("fedpaq")
    n = 20000
    outs = vmap(lambda k: alg.decode(alg.encode(DELTA, CounterRng(k), {})[0]))(torch.arange(n))
    norm_b = float(torch.linalg.vector_norm(DELTA[5:15]))  # QSGD s = 3: |error| <= norm / 3
    assert torch.allclose(outs.mean(0)[5:15], DELTA[5:15], atol=4.5 * norm_b / 3 / math.sqrt(n))


# ------------------------------------------------------------------------------------------- BiFL


def test_bifl_ste_and_binary_uplink():
    w = torch.tensor([0.3, -0.2, 1.5, -3.0, 0.0])
    assert torch.equal(binary_weights_ste(w, 1.0), torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0]))
    g = grad(lambda v: (binary_weights_ste(v, 1.0) * torch.arange(1.0, 6.0)).sum())(w)
    assert torch.equal(g, torch.tensor([1.0, 2.0, 0.0, 0.0, 5.0]))  # dL/dw_b * 1[|w| <= 1]
    alg = make("bifl")
    msg = alg.encode(DELTA)
    dec = alg.decode(msg)
    expect = DELTA.clone()
    expect[WEIGHTS] = sign(DELTA[WEIGHTS])
    assert torch.equal(dec, expect) and msg.bits == B(13) + 64
    other = make("bifl").encode(-DELTA)
    new = alg.aggregate({"params": torch.zeros(15)}, stack_trees([msg, other]), torch.tensor([0.75, 0.25]), info())
    assert torch.allclose(new["params"], 0.75 * expect + 0.25 * alg.decode(other))  # weights, not updates
    assert torch.equal(alg.global_params(new)[WEIGHTS], sign(new["params"][WEIGHTS]))  # the BNN is evaluated
    full = make("bifl_full")
    assert full.encode(DELTA).bits == 32 * 15 and torch.equal(full.decode(full.encode(DELTA)), DELTA)


def test_bifl_trains_the_bnn():
    # local gradients are taken at the binarized weights: the result differs from FedAvg's
    a = run_tiny("fedavg", "sequential", model=tiny_bn_model, rounds=2)
    b = run_tiny("bifl_full", "sequential", model=tiny_bn_model, rounds=2)
    assert a.history[-1]["test_loss"] != b.history[-1]["test_loss"]
    assert b.history[-1]["bits_up"] == a.history[-1]["bits_up"]


# ------------------------------------------------------------------------------ hyperparameters


def test_defaults_are_the_papers():
    hp = {n: make_hyper(algorithms.get_class(n), {}) for n in NAMES}
    assert hp["signsgd"].alpha == 0.001
    assert (hp["noisy_signsgd"].alpha, hp["noisy_signsgd"].sigma) == (0.01, 0.01)
    assert (hp["stoc_signsgd"].alpha, hp["stoc_signsgd"].norm) == (0.01, "inf")
    assert hp["zerofl"].sparsity == 0.97
    assert (hp["fedpaq"].bits, hp["fedpaq_4bit"].bits) == (3, 4)
    assert (hp["bifl"].full, hp["bifl_full"].full) == (False, True)
    for n in NAMES:
        assert hp[n].scope == "weights"


@pytest.mark.parametrize("name, args", [
    ("signsgd", {"alpha": 0.0}), ("signsgd", {"alpha": -1.0}), ("signsgd", {"scope": "bn"}),
    ("signsgd", {"per_layer": 2}), ("ef_signsgd", {"scope": "x"}), ("ef_signsgd", {"alpha": 0.1}),
    ("noisy_signsgd", {"sigma": -0.1}), ("noisy_signsgd", {"alpha": float("inf")}),
    ("stoc_signsgd", {"norm": "l1"}), ("stoc_signsgd", {"alpha": 0.0}),
    ("zerofl", {"sparsity": 1.0}), ("zerofl", {"sparsity": -0.1}),
    ("fedpaq", {"bits": 1}), ("fedpaq", {"bits": 20}), ("fedpaq", {"bits": 3.5}), ("fedpaq_4bit", {"bits": 0}),
    ("bifl", {"clip": 0.0}), ("bifl", {"full": 2}), ("bifl_full", {"scope": "x"}),
])
def test_invalid_hyperparameters_raise(name, args):
    with pytest.raises(ValueError):
        make_hyper(algorithms.get_class(name), args)


def test_messages_stack_and_decode_under_vmap():
    for name in NAMES:
        alg = make(name)
        ups = [alg.encode(DELTA * (i + 1), CounterRng(i), alg.client_init(torch.zeros(15)))[0]
               if isinstance(alg, CompressedUpdate) else alg.encode(DELTA * (i + 1)) for i in range(3)]
        stacked = stack_trees(ups)
        loop = torch.stack([alg.decode(u) for u in ups])
        assert torch.equal(vmap(alg.decode)(stacked), loop), name
        assert isinstance(stacked, Message)
