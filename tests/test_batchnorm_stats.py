"""BatchNorm's recorded batch statistics (``benchmark.sim.functional``): outside vmap and without padding they come
from the ``F.batch_norm`` kernel's own pass (0.5.0, issue 45), elsewhere from ``torch.var_mean`` or the weighted
form. Each is the batch's mean and unbiased variance, to float32 rounding, and the running statistics follow them
with the layer's momentum."""
from __future__ import annotations

import pytest
import torch
from torch.func import vmap

from benchmark.sim.functional import FunctionalModel


def _model(kind: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if kind == "2d":
        return torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3, padding=1, bias=False), torch.nn.BatchNorm2d(6),
                                   torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(6 * 8 * 8, 4))
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 7), torch.nn.BatchNorm1d(7), torch.nn.ReLU(),
                               torch.nn.Linear(7, 4))


def _input(kind: str, n: int = 16) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, 8, 8, generator=g) * 2 + 0.5 if kind == "2d" else torch.randn(n, 12, generator=g) * 3


def _activation(module: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The input of the BatchNorm layer (module[1] for 2d, module[2] for 1d)."""
    return module[0](x) if isinstance(module[1], torch.nn.BatchNorm2d) else module[1](module[0](x))


@pytest.mark.parametrize("kind", ["1d", "2d"])
@pytest.mark.parametrize("weighted", [False, True])
def test_recorded_statistics_are_the_batch_mean_and_unbiased_variance(kind, weighted):
    module = _model(kind)
    fm = FunctionalModel(module, "classification")
    x = _input(kind)
    flat = fm.layout.flatten(dict(module.named_parameters())).detach()
    buffers = fm.initial_buffers()
    out, stats = fm.forward_train(flat, x, w=torch.ones(x.shape[0]), weighted=weighted, buffers=buffers)
    [name] = fm.bn_names
    mean, var = stats[name]
    h = _activation(module, x).detach()
    dims = [0] + list(range(2, h.dim()))
    want_var, want_mean = torch.var_mean(h.double(), dim=dims, correction=1)
    assert torch.allclose(mean.double(), want_mean, rtol=1e-5, atol=1e-6)
    assert torch.allclose(var.double(), want_var, rtol=1e-5, atol=1e-6)
    # the output is the module's own training forward
    ref = module.train()(x)
    assert torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    new = fm.updated_buffers(buffers, stats)
    m = module[1 if kind == "2d" else 2].momentum
    assert torch.allclose(new[f"{name}.running_var"].double(), (1 - m) * buffers[f"{name}.running_var"].double()
                          + m * want_var, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["1d", "2d"])
def test_the_kernel_statistics_agree_with_var_mean_under_vmap(kind):
    """The kernel path (a client alone) and vmap's path (clients stacked: var_mean) record the same statistics to
    rounding, so the executors agree."""
    module = _model(kind)
    fm = FunctionalModel(module, "classification")
    flat = fm.layout.flatten(dict(module.named_parameters())).detach()
    xs = torch.stack([_input(kind) * (1 + i) for i in range(3)])
    buffers = fm.initial_buffers()
    stacked = {k: v.expand(3, *v.shape).clone() for k, v in buffers.items()}

    def one(x, b):
        return fm.forward_train(flat, x, weighted=False, buffers=b)[1]

    batched = vmap(one)(xs, stacked)
    [name] = fm.bn_names
    for i in range(3):
        alone = fm.forward_train(flat, xs[i], weighted=False, buffers=buffers)[1]
        for a, b in zip(alone[name], batched[name]):
            assert torch.allclose(a, b[i], rtol=1e-5, atol=1e-6)
