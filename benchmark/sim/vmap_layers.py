"""BatchNorm and max-pooling with their own ``vmap`` rule: the clients fold into the channel dimension.

Under ``torch.func.vmap`` over clients (the vectorized executor), a convolution with per-client weights is
one grouped convolution whose output is laid out (N, clients, C, H, W): the clients sit next to the
channels. PyTorch's own batching rules then undo that layout and waste memory traffic (issue 24, item 3;
counted by ``fedrepro bench --counts --per-op``):

* ``max_pool2d`` moves the clients in front of the samples, a full copy of its input in the forward and
  another of the saved input in the backward (the ``clone`` rows: 0.70 GB per FedBAT-CNN step at Table 1);
* ``batch_norm`` with per-client scale and shift normalizes without them and applies them as separate
  passes (``mul``/``add``/``sum``, forward and backward: 1.1 GB of ``mul`` per step), where a client run
  alone gets them inside the fused kernel;
* the sample-weighted BatchNorm of padded batches (``functional._WeightedBatchNorm``), written as plain
  tensor arithmetic, is differentiated op by op: about 35 full passes over the activation per layer.

Both operations act on each channel separately, so clients can be folded into the channels: a
(N, clients, C, ...) tensor is a (N, clients * C, ...) tensor without a copy, and one call of the
ordinary kernel serves all clients. The autograd ``Function`` s here do exactly that in their ``vmap``
static method; their backward is again such a ``Function``, so the backward pass folds too.

* :func:`max_pool2d` runs ``aten.max_pool2d_with_indices`` and its backward: the same kernels and values as
  ``nn.MaxPool2d``, bit for bit, with or without vmap (tested).
* :func:`batch_norm` runs ``aten.native_batch_norm`` / ``native_batch_norm_backward`` in training mode with
  the scale and shift inside: bit for bit what a client run alone computes (the sequential executor); under
  vmap the scale is now applied inside the kernel, so the vectorized results move by float rounding.
* :func:`weighted_batch_norm` is BatchNorm whose batch statistics weight each sample (w = 0: padding), with
  a closed-form backward. With W = sum of the weights over samples and positions, mean m = sum w x / W,
  biased variance v = sum w (x - m)^2 / W (two passes), r = (v + eps)^-1/2, y = gamma r (x - m) + beta:

      dL/dx_i = gamma r [g_i - (w_i / W) sum_j g_j - (w_i / W) r^2 (x_i - m) sum_j g_j (x_j - m)]

  (g = dL/dy; sums over every sample and position, padding included, whose g is 0 in a masked loss),
  dL/dgamma = r sum_j g_j (x_j - m), dL/dbeta = sum_j g_j. With all weights 1 it is the usual BatchNorm
  gradient (Ioffe & Szegedy 2015, Sec. 3). About 15 passes over the activation per layer, forward and
  backward; equal to the op-by-op arithmetic to float rounding (tested against autograd).

Two more, for speed alone (issue 45; same values bit for bit, tested):

* :func:`gather_rows` is ``x[i]`` (a minibatch's rows gathered by index) as an embedding lookup of the flattened
  rows, with or without vmap: the embedding's batching rule gathers the rows of every client in one call of the
  flat indices, where torch's rules for ``x[i]`` and ``index_select`` take 1.3-5x longer on a CPU;
* :func:`max_pool2d` runs the pooling kernel on a channels-last copy of its input, in chunks of samples that stay
  in cache: on a CPU the channels-last kernel is vectorized over the channels and 2-3x faster (values and
  indices equal; the indices are those of the NCHW input).

``torch.compile`` does not trace an autograd ``Function`` with a ``vmap`` static method: while compiling
(``torch.compiler.is_compiling()``), the callers in ``benchmark.sim.functional`` take the op-by-op forms, which
inductor fuses anyway. They also keep those forms for BatchNorm on (N, C) features (BatchNorm1d): little to gain
there, and it keeps committed vectorized results bit for bit. Second derivatives through these layers are not implemented (nothing in fedrepro
takes them): they raise.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd import Function

aten = torch.ops.aten


def _fold(t: torch.Tensor, bdim: int | None, size: int) -> torch.Tensor:
    """A per-client (N, C, *S) tensor, batched at ``bdim`` (None: shared by all clients), as (N, size * C, *S):
    a view when the clients already sit at dim 1 (a grouped convolution's output)."""
    t = t.unsqueeze(1).expand(t.shape[0], size, *t.shape[1:]) if bdim is None else t.movedim(bdim, 1)
    return t.flatten(1, 2)


def _fold_channels(t: torch.Tensor | None, bdim: int | None, size: int) -> torch.Tensor | None:
    """A per-client (C,) tensor (scale, shift, statistics) as (size * C,)."""
    if t is None:
        return None
    t = t.unsqueeze(0).expand(size, *t.shape) if bdim is None else t.movedim(bdim, 0)
    return t.flatten(0, 1)


def _fold_weights(w: torch.Tensor, bdim: int | None, size: int, channels: int) -> torch.Tensor:
    """Per-client sample weights (N,) as per-channel weights (N, size * C): the weights repeated over the
    channels (a trailing dimension: ``bdim`` stays valid), then :func:`_fold`."""
    return _fold(w.unsqueeze(-1).expand(*w.shape, channels), bdim, size)


def _unfold(t, size: int, dim: int):
    return None if t is None else t.unflatten(dim, (size, -1))


def _channels(x: torch.Tensor, bdim: int | None) -> int:
    return x.shape[1] if bdim is None else x.movedim(bdim, 0).shape[2]


class _Backward(Function):
    """A layer's backward as a ``Function`` (so that it folds under vmap too): it keeps no context, and its
    own derivative, a second derivative of the layer, is not implemented."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, *grads):
        raise NotImplementedError("second derivatives through benchmark.sim.vmap_layers are not implemented")


#: elements of one channels-last pooling chunk (16 MB of float32: it stays in cache with its output)
POOL_CHUNK = 1 << 22
#: the CPU's own kernel choices (channels-last pooling) on; ``benchmark.perf.counting`` turns them off while it counts,
#: since its counts stand for a device's kernels (on CUDA the ordinary kernel runs)
CPU_KERNELS = True


def _pool_forward(x: torch.Tensor, kernel):
    """``aten.max_pool2d_with_indices(x, kernel, kernel)`` (same values and indices, module docstring), through a
    channels-last copy on a CPU."""
    if not CPU_KERNELS or x.device.type != "cpu" or x.dim() != 4 or not x.is_contiguous():
        return aten.max_pool2d_with_indices(x, kernel, kernel)
    rows = max(1, POOL_CHUNK // max(1, x[0].numel()))
    parts = [aten.max_pool2d_with_indices(x[a:a + rows].contiguous(memory_format=torch.channels_last), kernel, kernel)
             for a in range(0, x.shape[0], rows)]
    if len(parts) == 1:
        return parts[0][0].contiguous(), parts[0][1].contiguous()
    return torch.cat([v for v, _ in parts]).contiguous(), torch.cat([i for _, i in parts]).contiguous()  # NCHW again


def gather_rows(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    """``x[i]`` for an integer index tensor ``i`` (rows of the data; not differentiated), as an embedding lookup of
    the flattened rows (one ``index_select``, with or without vmap; module docstring). Other tensors (integer
    labels, a non-contiguous view) and a compiled step: plain indexing."""
    if not x.is_floating_point() or x.dim() < 2 or not x.is_contiguous() or torch.compiler.is_compiling():
        return x[i]
    return F.embedding(i, x.view(x.shape[0], -1)).view(*i.shape, *x.shape[1:])


class _MaxPoolBackward(_Backward):
    @staticmethod
    def forward(grad, x, indices, kernel):
        return aten.max_pool2d_with_indices_backward(grad, x, kernel, kernel, [0, 0], [1, 1], False, indices)

    @staticmethod
    def vmap(info, in_dims, grad, x, indices, kernel):
        n = info.batch_size
        out = _MaxPoolBackward.apply(_fold(grad, in_dims[0], n), _fold(x, in_dims[1], n),
                                     _fold(indices, in_dims[2], n), kernel)
        return _unfold(out, n, 1), 1


class _MaxPool(Function):
    @staticmethod
    def forward(x, kernel):
        return _pool_forward(x, kernel)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output[1])
        ctx.kernel = inputs[1]
        ctx.mark_non_differentiable(output[1])
        ctx.set_materialize_grads(False)  # no zero-filled gradients for the outputs nothing differentiates

    @staticmethod
    def backward(ctx, grad, _grad_indices):
        if grad is None:
            return None, None
        x, indices = ctx.saved_tensors
        return _MaxPoolBackward.apply(grad, x, indices, ctx.kernel), None

    @staticmethod
    def vmap(info, in_dims, x, kernel):
        n = info.batch_size
        out, indices = _MaxPool.apply(_fold(x, in_dims[0], n), kernel)
        return (_unfold(out, n, 1), _unfold(indices, n, 1)), (1, 1)


def folding() -> bool:
    """Whether the folding ``Function`` s run: a ``torch.func.vmap`` is active around the caller (at any level: the
    vectorized executor's ``vmap(grad(...))`` puts a gradient level on top of it), and nothing compiles (a compiled
    step takes the plain ops; dynamo traces neither these Functions nor functorch's interpreter stack)."""
    if torch.compiler.is_compiling():
        return False
    stack = torch._C._functorch.get_interpreter_stack()
    return bool(stack) and any(i.key() == torch._C._functorch.TransformType.Vmap for i in stack)


def _pool_plain(x: torch.Tensor, kernel) -> torch.Tensor:
    """``_pool_forward``'s values as ordinary differentiable ops: autograd runs the same backward kernel on the
    same indices (stride = kernel: each input element receives at most one gradient, so the layout cannot change a
    sum), without an autograd ``Function`` (under ``torch.func`` it costs about as much Python as the kernels of a
    small CNN)."""
    if not CPU_KERNELS or x.device.type != "cpu" or x.dim() != 4 or not x.is_contiguous():
        return F.max_pool2d(x, kernel)
    rows = max(1, POOL_CHUNK // max(1, x[0].numel()))
    parts = [F.max_pool2d(x[a:a + rows].contiguous(memory_format=torch.channels_last), kernel)
             for a in range(0, x.shape[0], rows)]
    return (parts[0] if len(parts) == 1 else torch.cat(parts)).contiguous()


def max_pool2d(x: torch.Tensor, kernel: list[int]) -> torch.Tensor:
    """``F.max_pool2d(x, kernel)`` (stride = kernel, no padding), folding clients into channels under vmap; outside
    vmap the same kernels as plain differentiable ops (``_pool_plain``)."""
    if not folding():
        return _pool_plain(x, list(kernel))
    return _MaxPool.apply(x, list(kernel))[0]


class _BatchNormBackward(_Backward):
    @staticmethod
    def forward(grad, x, weight, mean, invstd, eps):
        affine = weight is not None
        return aten.native_batch_norm_backward(grad, x, weight, None, None, mean, invstd, True, eps,
                                               [True, affine, affine])

    @staticmethod
    def vmap(info, in_dims, grad, x, weight, mean, invstd, eps):
        n = info.batch_size
        dx, dw, db = _BatchNormBackward.apply(
            _fold(grad, in_dims[0], n), _fold(x, in_dims[1], n), _fold_channels(weight, in_dims[2], n),
            _fold_channels(mean, in_dims[3], n), _fold_channels(invstd, in_dims[4], n), eps)
        dims = (1, None, None) if dw is None else (1, 0, 0)
        return (_unfold(dx, n, 1), _unfold(dw, n, 0), _unfold(db, n, 0)), dims


class _BatchNorm(Function):
    @staticmethod
    def forward(x, weight, bias, eps):
        return aten.native_batch_norm(x, weight, bias, None, None, True, 0.0, eps)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, weight, _, ctx.eps = inputs
        ctx.save_for_backward(x, weight, output[1], output[2])
        ctx.mark_non_differentiable(output[1], output[2])
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, _grad_mean, _grad_invstd):
        if grad is None:
            return None, None, None, None
        x, weight, mean, invstd = ctx.saved_tensors
        dx, dw, db = _BatchNormBackward.apply(grad, x, weight, mean, invstd, ctx.eps)
        return dx, dw, db, None

    @staticmethod
    def vmap(info, in_dims, x, weight, bias, eps):
        n = info.batch_size
        y, mean, invstd = _BatchNorm.apply(_fold(x, in_dims[0], n), _fold_channels(weight, in_dims[1], n),
                                           _fold_channels(bias, in_dims[2], n), eps)
        return (_unfold(y, n, 1), _unfold(mean, n, 0), _unfold(invstd, n, 0)), (1, 0, 0)


def batch_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    """``F.batch_norm(x, None, None, weight, bias, training=True, eps=eps)``, folding clients into channels
    under vmap (the same kernels; outside vmap it is that call: bit for bit, without an autograd ``Function``)."""
    if not folding():
        return F.batch_norm(x, None, None, weight, bias, True, 0.0, eps)
    return _BatchNorm.apply(x, weight, bias, eps)[0]


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(t.shape[0], t.shape[1], -1)  # (N, C, positions)


class _WeightedBatchNormBackward(_Backward):
    @staticmethod
    def forward(grad, centered, w, weight, rstd, count):
        """The module docstring's gradient; ``w``: (N,) or (N, C) weights, ``count``: W per channel."""
        g, xc = _rows(grad), _rows(centered)
        sum_g = g.sum(-1).sum(0)
        sum_gx = torch.einsum("ncl,ncl->nc", g, xc).sum(0)
        scale = rstd if weight is None else rstd * weight
        share = w.reshape(g.shape[0], -1).to(g.dtype) / count  # w_i / W
        dx = torch.addcmul((-(scale * sum_g) * share).unsqueeze(-1), g, scale.unsqueeze(-1))
        dx.addcmul_(xc, (-(scale * rstd * rstd * sum_gx) * share).unsqueeze(-1))
        return dx.view_as(grad), rstd * sum_gx, sum_g

    @staticmethod
    def vmap(info, in_dims, grad, centered, w, weight, rstd, count):
        n, c = info.batch_size, _channels(grad, in_dims[0])
        dx, dw, db = _WeightedBatchNormBackward.apply(
            _fold(grad, in_dims[0], n), _fold(centered, in_dims[1], n), _fold_weights(w, in_dims[2], n, c),
            _fold_channels(weight, in_dims[3], n), _fold_channels(rstd, in_dims[4], n),
            _fold_channels(count, in_dims[5], n))
        return (_unfold(dx, n, 1), _unfold(dw, n, 0), _unfold(db, n, 0)), (1, 0, 0)


class _WeightedBatchNorm(Function):
    @staticmethod
    def forward(x, w, weight, bias, eps):
        """(y, mean, biased variance, x - mean, r, W): the module docstring's forward, two passes."""
        xr = _rows(x)
        wr = w.reshape(x.shape[0], -1).to(x.dtype)  # (N, 1) or (N, C)
        count = (wr.sum(0) * xr.shape[-1]).expand(x.shape[1]).contiguous()
        mean = (wr * xr.sum(-1)).sum(0) / count
        centered = xr - mean.unsqueeze(-1)
        var = (wr * torch.einsum("ncl,ncl->nc", centered, centered)).sum(0) / count
        rstd = torch.rsqrt(var + eps)
        scale = rstd if weight is None else rstd * weight
        y = centered * scale.unsqueeze(-1) if bias is None else \
            torch.addcmul(bias.unsqueeze(-1), centered, scale.unsqueeze(-1))
        return y.view_as(x), mean, var, centered.view_as(x), rstd, count

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, w, weight, _, _ = inputs
        _, mean, var, centered, rstd, count = output
        ctx.save_for_backward(centered, w, weight, rstd, count)
        ctx.mark_non_differentiable(mean, var, centered, rstd, count)
        ctx.set_materialize_grads(False)

    @staticmethod
    def backward(ctx, grad, *_):
        if grad is None:
            return None, None, None, None, None
        centered, w, weight, rstd, count = ctx.saved_tensors
        dx, dw, db = _WeightedBatchNormBackward.apply(grad, centered, w, weight, rstd, count)
        return dx, None, (dw if ctx.needs_input_grad[2] else None), (db if ctx.needs_input_grad[3] else None), None

    @staticmethod
    def vmap(info, in_dims, x, w, weight, bias, eps):
        n, c = info.batch_size, _channels(x, in_dims[0])
        out = _WeightedBatchNorm.apply(_fold(x, in_dims[0], n), _fold_weights(w, in_dims[1], n, c),
                                       _fold_channels(weight, in_dims[2], n), _fold_channels(bias, in_dims[3], n), eps)
        y, mean, var, centered, rstd, count = out
        return ((_unfold(y, n, 1), _unfold(mean, n, 0), _unfold(var, n, 0), _unfold(centered, n, 1),
                 _unfold(rstd, n, 0), _unfold(count, n, 0)), (1, 0, 0, 1, 0, 0))


def weighted_batch_norm(x: torch.Tensor, w: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Training-mode BatchNorm whose batch statistics weight sample i by ``w[i]`` (0: padding): (y, batch
    mean, biased batch variance, W = the weights' sum times the positions per sample), per channel."""
    y, mean, var, _, _, count = _WeightedBatchNorm.apply(x, w, weight, bias, eps)
    return y, mean, var, count
