"""benchmark.sim.gradients: outside a transform the client gradient is plain autograd, equal to torch.func's bit
for bit (the golden histories check whole runs); under vmap it is torch.func's."""
from __future__ import annotations

import torch
from torch.func import grad_and_value as func_gv
from torch.func import vmap

from benchmark.sim import gradients


def _objective(args):
    w, b, unused = args
    x = torch.linspace(-1, 1, 12).reshape(4, 3)
    h = torch.tanh(x @ w + b)
    loss = (h * h).sum() + 0.1 * (w * w).sum()
    return loss, {"h_mean": h.mean(0)}


def _args():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(3, 2, generator=g), torch.randn(2, generator=g), torch.randn(5, generator=g))


def test_eager_equals_torch_func_bit_for_bit():
    assert not gradients.transformed()
    (gw, gb, gu), (loss, aux) = gradients.grad_and_value(_objective, _args())
    (fw, fb, fu), (floss, faux) = func_gv(_objective, has_aux=True)(_args())
    assert torch.equal(gw, fw) and torch.equal(gb, fb) and torch.equal(loss, floss)
    assert torch.equal(gu, torch.zeros(5)) and torch.equal(fu, gu)  # an argument the loss does not use: zeros
    assert torch.equal(aux["h_mean"], faux["h_mean"])
    assert not loss.requires_grad and not aux["h_mean"].requires_grad and loss.grad_fn is None
    args = _args()
    gradients.grad_and_value(_objective, args)
    assert not any(t.requires_grad for t in args)  # the caller's tensors are left alone


def test_a_value_that_depends_on_no_argument_has_zero_gradients():
    def constant(args):
        return torch.tensor(3.0), {}
    (gw, gb, gu), (value, _) = gradients.grad_and_value(constant, _args())
    (fw, fb, fu), _ = func_gv(constant, has_aux=True)(_args())
    assert float(value) == 3.0 and all(torch.equal(a, b) for a, b in ((gw, fw), (gb, fb), (gu, fu)))
    assert not gw.any()


def test_a_planted_wrong_gradient_is_seen():
    """The comparison above can fail: a gradient taken at a perturbed point differs."""
    (gw, _, _), _ = gradients.grad_and_value(_objective, _args())
    w, b, u = _args()
    (fw, _, _), _ = func_gv(_objective, has_aux=True)((w * (1 + 1e-6), b, u))
    assert not torch.equal(gw, fw)


def test_under_vmap_it_is_torch_func():
    seen = []

    def per_client(w):
        seen.append(gradients.transformed())
        return gradients.grad_and_value(lambda a: ((a * a).sum(), {}), w)[0]
    ws = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(vmap(per_client)(ws), 2 * ws) and seen == [True]
