"""One client's gradient: ``torch.func.grad_and_value`` under a transform, plain autograd outside one.

The vectorized executor differentiates inside ``torch.func.vmap``, so it needs torch.func's ``grad`` (except a plain
chain model's loss gradient, written out in ``benchmark.sim.chain_grad``). The
sequential executor runs one client at a time with no transform around it, where ``torch.func.grad`` wraps
every tensor of the forward and backward in a grad-tracking wrapper and dispatches each op through functorch's
layer stack: Python and dispatch per op, which on a small model (GradMA's MLP, three gradients per local step)
costs as much as the arithmetic. There ``grad_and_value`` below calls ``torch.autograd.grad`` on detached copies
of the arguments instead: the same forward, the same backward formulas and kernels in the same order, so the same
numbers bit for bit (``tests/test_golden_histories.py`` compares every algorithm's sequential histories against
those made with ``torch.func``), without the wrappers.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch.func import grad_and_value as func_grad_and_value
from torch.utils import _pytree as pytree


def transformed() -> bool:
    """Whether some torch.func transform (vmap, grad, jvp) is active around the caller, or a compiler traces it."""
    return torch.compiler.is_compiling() or bool(torch._C._functorch.get_interpreter_stack())  # dynamo cannot trace the stack


def grad_and_value(f: Callable, args: Any):
    """``torch.func.grad_and_value(f, has_aux=True)(args)``: (gradient with ``args``' structure, (value, aux)).

    Outside any transform, by ``torch.autograd.grad``: ``args``' tensors are detached and made leaves, ``f`` runs
    with grad mode on, an argument that the value does not depend on gets a zero gradient, as torch.func gives
    (every argument where the value depends on none), and the value and the aux tensors come back detached."""
    if transformed():
        return func_grad_and_value(f, has_aux=True)(args)
    leaves, spec = pytree.tree_flatten(args)
    inputs = [t.detach().requires_grad_() for t in leaves]
    with torch.enable_grad():
        value, aux = f(pytree.tree_unflatten(inputs, spec))
        grads = torch.autograd.grad(value, inputs, allow_unused=True) if value.requires_grad else [None] * len(inputs)
    grads = [torch.zeros_like(t) if g is None else g for t, g in zip(inputs, grads)]
    aux = pytree.tree_map(lambda t: t.detach() if isinstance(t, torch.Tensor) else t, aux)
    return pytree.tree_unflatten(grads, spec), (value.detach(), aux)
