"""A plain chain model's gradient under ``vmap`` written out: the backward formulas autograd applies, as the same
ATen calls in the same order, so the same numbers bit for bit, without torch.func's ``grad`` transform.

Why: under the vectorized executor every client's gradient comes from ``torch.func.grad`` inside ``vmap``, and the
grad transform wraps every tensor of the forward and backward and dispatches each op through one more functorch
level. For the small models of the claims' vectorized cells (BHerd's linear SVM, FedSWA's MLP) and the digits MLPs
that machinery is a large share of a step (issue 45: about 2 ms of a vmapped step of 10 clients' digits MLP).
Here the forward runs once under ``vmap`` alone, keeping what the backward reads, and the backward is the formulas
of torch's ``derivatives.yaml`` for the ops the forward ran: ``F.linear`` on 2-d input decomposes to ``addmm``
(``mm`` without a bias), whose ``mat2 = W^T`` is column-major, so autograd's ``mm_mat2_backward`` takes
``(g^T h)^T`` and ``t``'s backward transposes it back: ``g^T h``; ``mat1``: ``g W``; the bias: ``g`` summed over
the broadcast rows; ReLU: ``threshold_backward`` on its result; flatten: a reshape; the criterion of
``FunctionalModel.criterion(vectorized=True)``: the weighted mean's ``1 / sum(w)`` times ``w``, the negation,
``select``'s and ``gather``'s backward (a ``scatter_add`` into zeros) and ``_log_softmax_backward_data``, or the
squared hinge's ``pow``, ``clamp`` (``where(m >= 0, g, 0)``), ``rsub`` and ``mul`` backward. The flat gradient is the
``cat`` that ``split``'s backward makes.

``value_and_descend`` goes one step further for plain SGD (issue 45, ninth round): each layer's update is taken
inside its gradient's product, ``W + (-lr g)^T h`` by one ``addmm`` (in place from a local loop's second step on),
so neither the flat gradient's ``cat`` nor the pass ``p - lr * g`` over the whole vector is made: FedSWA's step of
10 clients' 784-200-10 MLP in 3.2 against 6.1 ms (``results/perf/fused-sgd-lever.py``). It is not bit for bit
(``-lr`` scales the output gradient before the product, and ``addmm`` accumulates into ``W``): 0.5.0's numerics,
the golden change ``fused_sgd``; ``tests/test_fused_sgd.py`` bounds it against the gradient's step.

``value_and_grad`` is used only where it is exact: a chain of linear, ReLU and flatten layers (``functional._chain``) whose parameters
tile the flat vector, the default classification loss or the squared hinge, the data in the parameters' dtype,
every linear layer's input 2-d, and only ``vmap`` active (``only_vmap``: not inside another transform, which may
differentiate through the gradient, nor while compiling). ``tests/test_chain_grad.py`` compares it with
``torch.func.grad_and_value`` bit for bit on MLPs with and without biases and the SVM, padded batches included,
and ``tests/test_golden_histories.py`` the vectorized histories of every algorithm with aa98dfe's.
"""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F

KINDS = ("linear", "relu", "flatten")


def plan(ops: list | None, loss: str, task: str, layout) -> tuple | None:
    """What ``value_and_grad`` needs of a model (its chain ``ops``, its loss), or None where it does not apply."""
    # ``ParamLayout._split`` is empty unless the slices tile the vector from 0 in order (the flat gradient's one cat)
    if ops is None or not ops or any(op[0] not in KINDS for op in ops) or not layout._split:
        return None
    if loss == "squared_hinge":
        kind = "squared_hinge"
    elif loss == "default" and task == "classification":
        kind = "cross_entropy"
    else:
        return None
    names = [n for op in ops if op[0] == "linear" for n in op[1:3] if n is not None]
    if sorted(names) != sorted(layout.names) or len(set(names)) != len(names):
        return None
    return tuple(ops), kind


def only_vmap() -> bool:
    """Whether ``vmap`` and no other torch.func transform is active, and no compiler traces the caller."""
    if torch.compiler.is_compiling():
        return False
    stack = torch._C._functorch.get_interpreter_stack()
    return bool(stack) and all(i.key() == torch._C._functorch.TransformType.Vmap for i in stack)


def value_and_grad(chain: tuple, layout, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                   w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the weighted mean loss, its gradient w.r.t. ``flat``) of one client's batch, as ``torch.func.grad_and_value``
    of ``criterion(forward(flat, x))`` gives them; None where a layer's input is not 2-d, the dtypes differ, ``flat``
    is not the layout's vector or the targets are not one per row (the caller then differentiates generically)."""
    got = _forward(chain, layout, flat, x, y, w)
    if got is None:
        return None
    value, g_out, saved, _ = got
    grads = {}
    for op, h_in, _, g in _layers(saved, g_out):
        if op[2] is not None:
            grads[op[2]] = g.sum(0)  # addmm's self, summed to the bias's shape
        grads[op[1]] = g.t().mm(h_in)  # mm_mat2_backward of W^T, then t's backward
    return value, torch.cat([grads[s.name].reshape(-1) for s in layout.slices])


def value_and_descend(chain: tuple, layout, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor,
                      lr, in_place: bool) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(the weighted mean loss, the parameters after one plain SGD step ``flat - lr * grad``) of one client's batch,
    with each layer's update taken inside its gradient's product: ``W + (-lr g)^T h`` by one ``addmm`` (and the
    bias ``b + sum(-lr g)``), so neither the flat gradient nor the pass ``p - lr * g`` over the whole vector is
    made. Not bit for bit ``value_and_grad`` followed by ``p - lr * g``: ``-lr`` scales the layer's output gradient
    before the product and ``addmm`` accumulates into ``W`` (float32 rounding; 0.5.0's numerics, issue 45).

    ``in_place``: the update is written into ``flat`` itself (its layers' views), which the caller must own (a local
    loop's carry after its first step, which nothing else reads: not the received model, not a masked step's
    fallback); else new parameters, one ``cat`` of the updated layers. ``lr``: a float or a 0-d tensor (a batched
    job's learning rate per run). None where ``value_and_grad`` would be None."""
    got = _forward(chain, layout, flat, x, y, w)
    if got is None:
        return None
    value, g_out, saved, params = got
    new = {}
    for op, h_in, W, g in _layers(saved, g_out):  # the input's gradient is taken from W before its update
        step = g * (-lr)
        b = None if op[2] is None else params[op[2]]
        if in_place:
            with warnings.catch_warnings():  # vmap runs addmm_ client by client: no batched rule, no slower
                warnings.filterwarnings("ignore", message=".*batching rule for aten::addmm_.*")
                W.addmm_(step.t(), h_in)
            if b is not None:
                b.add_(step.sum(0))
        else:
            new[op[1]] = torch.addmm(W, step.t(), h_in)
            if b is not None:
                new[op[2]] = b + step.sum(0)
    return value, flat if in_place else torch.cat([new[s.name].reshape(-1) for s in layout.slices])


def _layers(saved: list, g: torch.Tensor):
    """The chain walked backward from the output gradient ``g``: per linear layer, last first, (its op, its input,
    its weights, the gradient at its output). The gradient carried to the layer's input (``mm_mat1_backward``:
    ``g W``) is taken before the layer is yielded, so from its weights as they were in the forward even where the
    caller then updates them in place; ReLU (``threshold_backward`` on its result) and flatten (a reshape) carry it
    on; nothing is carried below the first linear layer."""
    first = next(i for i, s in enumerate(saved) if s[0][0] == "linear")
    for i in range(len(saved) - 1, first - 1, -1):
        op = saved[i][0]
        if op[0] == "linear":
            _, h_in, W = saved[i]
            g_in = g.mm(W) if i > first else None
            yield op, h_in, W, g
            g = g_in
        elif op[0] == "relu":
            g = torch.ops.aten.threshold_backward(g, saved[i][1], 0)
        else:
            g = g.reshape(saved[i][1])


def _forward(chain: tuple, layout, flat: torch.Tensor, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor):
    """The forward of ``functional._run_chain`` keeping what the backward reads, the weighted mean loss and its
    gradient w.r.t. the chain's output: (value, that gradient, the saved steps, the layers' views), or None."""
    ops, kind = chain
    if flat.dtype != x.dtype or flat.shape[-1] != layout.size or y.dim() != 1:
        return None
    params = layout.unflatten(flat)
    saved, h = [], x
    for op in ops:  # the forward of functional._run_chain, keeping what the backward reads
        if op[0] == "linear":
            if h.dim() != 2:
                return None
            W, b = params[op[1]], (None if op[2] is None else params[op[2]])
            saved.append((op, h, W))
            h = F.linear(h, W, b)
        elif op[0] == "relu":
            h = F.relu(h)
            saved.append((op, h))
        else:
            saved.append((op, h.shape))
            h = h.flatten(1)
    out = h
    if kind == "squared_hinge":  # FunctionalModel.criterion: 0.5 * max(0, 1 - (2y - 1) s)^2
        sy = 2.0 * y - 1
        m = 1 - sy * out.reshape(-1)
        c = torch.clamp(m, min=0)
        per = 0.5 * c ** 2
    else:  # the vectorized cross-entropy
        ls = torch.log_softmax(out, 1)
        idx = y[:, None]
        per = -ls.gather(1, idx)[:, 0]
    ws = w.sum()
    value = (per * w).sum() / ws

    g = (torch.ones_like(value) / ws).expand(per.shape) * w  # div, sum and mul backward
    if kind == "squared_hinge":
        g = (g * 0.5) * (2.0 * c.pow(1.0))  # mul by 0.5, pow_backward
        g = torch.where(m >= 0, g, torch.zeros((), dtype=g.dtype, device=g.device))  # clamp_backward
        g = ((-g) * sy).reshape(out.shape)  # rsub, mul, reshape backward
    else:
        g = torch.zeros_like(ls).scatter_add(1, idx, (-g).unsqueeze(1))  # neg, select, gather backward
        g = torch.ops.aten._log_softmax_backward_data(g, ls, 1, ls.dtype)
    return value, g, saved, params
