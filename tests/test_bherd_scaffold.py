"""BHerd-SCAFFOLD (algorithms/bherd_scaffold.py): herded corrected steps, SCAFFOLD's option-II control
variate from the herded endpoint, SCAFFOLD's server rule and messages; alpha = 1 is SCAFFOLD exactly."""
import pytest
import torch

import algorithms
from algorithms.core import Message, ParamLayout, RoundInfo, make_hyper
from tests.helpers import assert_same_history, run_tiny, tiny_dataset, tiny_model
from tests.test_bherd import Z5, FakeCtx


def make(d=2, n=4, **args):
    return algorithms.make("bherd_scaffold", ParamLayout.single(d), n, args)


def close(a, b, tol=1e-5):
    assert torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32),
                          atol=tol, rtol=tol), (a, b)


def downlink(alg, x, c):
    return alg.broadcast({"params": torch.as_tensor(x), "c": torch.as_tensor(c)})


def test_registered_with_the_union_of_hyperparameters():
    assert "bherd_scaffold" in algorithms.names()
    hp = make_hyper(algorithms.get_class("bherd_scaffold"), {})
    assert (hp.alpha, hp.selection, hp.rescale, hp.eta_g, hp.weighting) == (0.5, "herding", "alpha", 1.0,
                                                                           "uniform")


# The client's gradient at step l is Z5[l] (FakeCtx); c_i = (0.5, -1) and c = (1.5, 0), so every stored step
# is lr * (Z5[l] + (1, 1)). Centering removes the common (1, 1): herding picks {2, 0, 4} as in
# test_bherd.HERD_ORDER (k = round(0.5 * 5) = 3). Kept raw gradients: Z5[0] + Z5[2] + Z5[4] = (3, 3.8).
C_I, C = torch.tensor([0.5, -1.0]), torch.tensor([1.5, 0.0])
KEPT = torch.tensor([3.0, 3.8])


def test_control_variate_by_hand():
    alg = make(alpha=0.5)
    x = torch.tensor([0.25, -0.5])
    up, st = alg.local_update(FakeCtx(Z5, lr=0.5), downlink(alg, x, C), {"c_i": C_I})
    u = 0.5 * (KEPT + 3.0) / 0.5  # (lr / alpha) * sum of the 3 kept corrected directions = (6, 6.8)
    close(up["dy"], -u)
    c_new = C_I - C + u / (5 * 0.5)  # option II from the herded endpoint x - u, K_i = 5: (1.4, 1.72)
    close(c_new, [1.4, 1.72])
    close(st["c_i"], c_new)
    close(up["dc"], c_new - C_I)
    # rescale="count" (K_i / k_i = 5/3): c_i+ is exactly the mean of the kept *raw* gradients
    alg = make(alpha=0.5, rescale="count")
    up, st = alg.local_update(FakeCtx(Z5, lr=0.5), downlink(alg, x, C), {"c_i": C_I})
    close(up["dy"], -0.5 * (KEPT + 3.0) * 5 / 3)
    close(st["c_i"], KEPT / 3)


def test_alpha1_control_variate_is_scaffolds():
    x = torch.tensor([0.25, -0.5])
    scaffold = algorithms.make("scaffold", ParamLayout.single(2), 4)
    a_up, a_st = scaffold.local_update(FakeCtx(Z5, lr=0.5), downlink(scaffold, x, C), {"c_i": C_I})
    alg = make(alpha=1.0)
    b_up, b_st = alg.local_update(FakeCtx(Z5, lr=0.5), downlink(alg, x, C), {"c_i": C_I})
    close(a_up["dy"], b_up["dy"])
    close(a_up["dc"], b_up["dc"])
    close(a_st["c_i"], b_st["c_i"])
    close(b_st["c_i"], Z5.mean(0))  # option II: the mean raw gradient of the trajectory


def test_masked_steps_do_not_count():
    # a client with 5 steps in a 7-step vectorized loop: the same update as alone
    batches = torch.cat([Z5, torch.tensor([[100.0, -50.0], [7.0, 7.0]])])
    alg = make(alpha=0.5)
    a, sa = alg.local_update(FakeCtx(batches, lr=0.5, steps=5), downlink(alg, torch.zeros(2), C), {"c_i": C_I})
    b, sb = alg.local_update(FakeCtx(Z5, lr=0.5), downlink(alg, torch.zeros(2), C), {"c_i": C_I})
    close(a["dy"], b["dy"])
    close(sa["c_i"], sb["c_i"])


def test_server_rule_is_scaffolds():
    alg = make(n=4, eta_g=2.0)
    st = alg.init(torch.zeros(1))
    ups = Message({"dy": torch.tensor([[1.0], [3.0]]), "dc": torch.tensor([[4.0], [8.0]])})
    info = RoundInfo(0, torch.tensor([0, 2]), 4, torch.ones(2), torch.tensor([3, 5]), 0.1)
    st = alg.aggregate(st, ups, torch.tensor([0.2, 0.8]), info)
    close(st["params"], [4.0])  # eta_g * uniform mean of dy (weighting="uniform")
    close(st["c"], [3.0])  # (4 + 8) / N, N = 4
    st = make(n=4, weighting="samples").aggregate(make(n=4).init(torch.zeros(1)), ups, torch.tensor([0.2, 0.8]),
                                                  info)
    close(st["params"], [2.6])


def test_alpha1_equals_scaffold():
    data = tiny_dataset()  # unequal client sizes: different K_i, masked steps in vectorized rounds
    a = run_tiny("scaffold", rounds=3, data=data)
    b = run_tiny("bherd_scaffold", rounds=3, data=data, algorithm_args={"alpha": 1.0})
    assert_same_history(a, b)
    c = run_tiny("bherd_scaffold", "vectorized", rounds=3, data=data, algorithm_args={"alpha": 1.0})
    assert_same_history(a, c)


def test_half_alpha_differs_from_scaffold_and_counts_two_vectors_each_way():
    a = run_tiny("scaffold", rounds=2)
    b = run_tiny("bherd_scaffold", rounds=2)
    assert abs(a.history[-1]["test_loss"] - b.history[-1]["test_loss"]) > 1e-4
    d = sum(p.numel() for p in tiny_model((6,), 3).parameters())
    for h in b.history:  # 3 clients a round, (dy, dc) up and (x, c) down, fp32
        assert h["bits_up"] == 3 * 2 * 32 * d
        assert h["bits_down"] == 3 * 2 * 32 * d
    assert [h["bits_up"] for h in a.history] == [h["bits_up"] for h in b.history]


@pytest.mark.parametrize("args", [{"selection": "random"}, {"selection": "closest", "rescale": "count"}])
def test_options_sequential_equals_vectorized(args):
    assert_same_history(run_tiny("bherd_scaffold", "sequential", rounds=2, algorithm_args=args),
                        run_tiny("bherd_scaffold", "vectorized", rounds=2, algorithm_args=args))


@pytest.mark.parametrize("args,msg", [({"alpha": 0.0}, "alpha"), ({"alpha": 1.5}, "alpha"),
                                      ({"selection": "topk"}, "selection"), ({"rescale": "none"}, "rescale"),
                                      ({"eta_g": 0.0}, "eta_g"), ({"weighting": "x"}, "weighting"),
                                      ({"base": "fednova"}, "unknown algorithm_args")])
def test_invalid_hyperparameters_raise(args, msg):
    with pytest.raises(ValueError, match=msg):
        make_hyper(algorithms.get_class("bherd_scaffold"), args)


def test_bherd_base_scaffold_points_to_bherd_scaffold():
    layout = ParamLayout.from_module(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="bherd_scaffold"):
        algorithms.make("bherd", layout, 3, {"base": "scaffold"})
