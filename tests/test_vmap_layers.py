"""Layers that fold clients into channels under vmap (benchmark.sim.vmap_layers): the same values as the
ordinary layers (bit for bit where the module docstring says so), gradients against autograd's, and the
layout copies and separate affine passes they remove, counted."""
import pytest
import torch
import torch.nn.functional as F
from torch.func import grad, vmap

from benchmark.sim import functional, vmap_layers
from benchmark.perf.counting import counting

CLIENTS, N = 3, 6


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _weights():
    w = torch.ones(CLIENTS, N)
    w[0, 4:] = 0  # client 0: 2 padding rows; client 1: one; client 2: none
    w[1, 5:] = 0
    return w


def _op_by_op(x, w, weight, bias, eps=1e-5):
    """The weighted BatchNorm as plain arithmetic, differentiated by autograd (the reference)."""
    dims = [0] + list(range(2, x.dim()))
    shape = [x.shape[0]] + [1] * (x.dim() - 1)
    cshape = [1, -1] + [1] * (x.dim() - 2)
    cnt = w.sum() * (x[0, 0].numel())
    mean = (w.reshape(shape) * x).sum(dims) / cnt
    xc = x - mean.reshape(cshape)
    var = (w.reshape(shape) * xc * xc).sum(dims) / cnt
    y = xc * torch.rsqrt(var.reshape(cshape) + eps)
    return y if weight is None else y * weight.reshape(cshape) + bias.reshape(cshape)


def _loss_of(layer, target):
    """A loss through ``layer(x, weight, bias)`` that weights every output element differently."""
    def loss(x, weight, bias):
        return (layer(x, weight, bias) * target).sum()
    return loss


def test_max_pool_equals_max_pool2d_bit_for_bit():
    x, g = _x(CLIENTS, N, 4, 8, 8), _x(CLIENTS, N, 4, 4, 4, seed=1)

    def loss(pool):
        return lambda xb, gb: (pool(xb) * gb).sum()

    ours = vmap(grad(loss(lambda t: vmap_layers.max_pool2d(t, [2, 2]))))(x, g)
    theirs = vmap(grad(loss(lambda t: F.max_pool2d(t, 2))))(x, g)
    assert torch.equal(ours, theirs)
    assert torch.equal(vmap_layers.max_pool2d(x[0], [2, 2]), F.max_pool2d(x[0], 2))
    assert torch.equal(vmap(lambda t: vmap_layers.max_pool2d(t, [2, 2]))(x), vmap(lambda t: F.max_pool2d(t, 2))(x))


@pytest.mark.parametrize("chunk", [1 << 22, 100])
def test_pool_outside_vmap_is_plain_and_its_gradient_is_max_pool2d_s(monkeypatch, chunk):
    """Outside vmap (the sequential executor) the pooling is ordinary differentiable ops on channels-last chunks:
    value and gradient equal F.max_pool2d's bit for bit, ties included (ReLU zeros, a window of equal values), under
    torch.func.grad and plain autograd; no autograd Function runs (that is what it saves)."""
    monkeypatch.setattr(vmap_layers, "POOL_CHUNK", chunk)
    x, g = torch.relu(_x(N, 4, 8, 8)), _x(N, 4, 4, 4, seed=1)
    x[0, 0, :2, :2] = 0.5

    def loss(pool):
        return lambda t: (pool(t) * g).sum()
    ours, theirs = loss(lambda t: vmap_layers.max_pool2d(t, [2, 2])), loss(lambda t: F.max_pool2d(t, 2))
    assert torch.equal(grad(ours)(x), grad(theirs)(x))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    ours(a).backward()
    theirs(b).backward()
    assert torch.equal(a.grad, b.grad)
    assert vmap_layers.max_pool2d(a, [2, 2]).grad_fn.name() != "_MaxPoolBackward"
    monkeypatch.setattr(vmap_layers._MaxPool, "forward", None)  # a Function call would now fail
    vmap_layers.max_pool2d(x, [2, 2])


@pytest.mark.parametrize("chunk", [1 << 22, 100])  # one channels-last chunk; chunks of 1 sample (100 < 4*8*8)
def test_channels_last_pool_keeps_values_indices_and_layout(monkeypatch, chunk):
    """Issue 45: the pooling kernel runs on channels-last chunks; values, indices and the NCHW layout of the output
    are the ordinary kernel's (ties included: ReLU zeros), and a planted off-by-one in the indices is caught."""
    monkeypatch.setattr(vmap_layers, "POOL_CHUNK", chunk)
    x = torch.relu(_x(N, 4, 8, 8))
    x[0, 0, :2, :2] = 0.5  # a window of equal values: the first index wins
    ref = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2])
    ours = vmap_layers._pool_forward(x, [2, 2])
    assert all(torch.equal(a, b) and b.is_contiguous() for a, b in zip(ours, ref))
    assert not torch.equal(ours[1], ref[1] + (ref[1] == ref[1].max()).long())  # the comparison can fail


def test_gather_rows_is_indexing_with_and_without_vmap():
    x, y = _x(50, 1, 4, 4), torch.arange(50) * 7
    idx = torch.randint(0, 50, (CLIENTS, N), generator=torch.Generator().manual_seed(2))
    assert torch.equal(vmap_layers.gather_rows(x, idx[0]), x[idx[0]])
    assert torch.equal(vmap(lambda i: vmap_layers.gather_rows(x, i))(idx), vmap(lambda i: x[i])(idx))
    assert torch.equal(vmap(lambda i: vmap_layers.gather_rows(y, i))(idx), y[idx])
    assert torch.equal(vmap(lambda i: vmap_layers.gather_rows(x, i), in_dims=1)(idx.T), x[idx])


@pytest.mark.parametrize("shape", [(N, 4, 5, 5), (N, 7)])
def test_batch_norm_is_the_ordinary_kernel(shape):
    """Outside vmap: F.batch_norm's values and gradients bit for bit; under vmap: each client's own
    kernel call to rounding (the scale inside the kernel, as for a client run alone; the CPU kernel's
    vectorization over channels can round a (N, C) input differently with more channels)."""
    x, t = _x(CLIENTS, *shape), _x(CLIENTS, *shape, seed=1)
    weight, bias = 1 + 0.1 * _x(CLIENTS, shape[1], seed=2), 0.1 * _x(CLIENTS, shape[1], seed=3)
    ours = _loss_of(lambda a, b, c: vmap_layers.batch_norm(a, b, c, 1e-5), t[0])
    ref = _loss_of(lambda a, b, c: F.batch_norm(a, None, None, b, c, True, 0.0, 1e-5), t[0])
    args = (x[0], weight[0], bias[0])
    assert torch.equal(ours(*args), ref(*args))
    for a, b in zip(grad(ours, argnums=(0, 1, 2))(*args), grad(ref, argnums=(0, 1, 2))(*args)):
        assert torch.equal(a, b)
    per_client = [grad(_loss_of(lambda a, b, c: vmap_layers.batch_norm(a, b, c, 1e-5), t[i]), argnums=(0, 1, 2))(
        x[i], weight[i], bias[i]) for i in range(CLIENTS)]
    batched = vmap(lambda xi, wi, bi, ti: grad(_loss_of(lambda a, b, c: vmap_layers.batch_norm(a, b, c, 1e-5), ti),
                                                argnums=(0, 1, 2))(xi, wi, bi))(x, weight, bias, t)
    for k in range(3):
        torch.testing.assert_close(batched[k], torch.stack([p[k] for p in per_client]), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape", [(N, 4, 5, 5), (N, 7)])
@pytest.mark.parametrize("affine", [True, False])
def test_weighted_batch_norm_matches_autograd(shape, affine):
    """Values, statistics and the closed-form gradients against autograd through the arithmetic, per
    client with padding rows, alone and under vmap; padding rows change nothing."""
    x, t, w = _x(CLIENTS, *shape), _x(CLIENTS, *shape, seed=1), _weights()
    t = t * w.reshape(CLIENTS, N, *[1] * (len(shape) - 1))  # a masked loss: padding rows get no gradient
    weight = 1 + 0.1 * _x(CLIENTS, shape[1], seed=2) if affine else None
    bias = 0.1 * _x(CLIENTS, shape[1], seed=3) if affine else None
    argnums = (0, 1, 2) if affine else (0,)

    def ours(wb, tb):
        return _loss_of(lambda a, b, c: vmap_layers.weighted_batch_norm(a, wb, b, c, 1e-5)[0], tb)

    def ref(wb, tb):
        return _loss_of(lambda a, b, c: _op_by_op(a, wb, b, c), tb)

    def both(i):
        return [grad(f(w[i], t[i]), argnums=argnums)(x[i], None if weight is None else weight[i],
                                                     None if bias is None else bias[i]) for f in (ours, ref)]
    for i in range(CLIENTS):
        g_ours, g_ref = both(i)
        for a, b in zip(g_ours, g_ref):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
        rows = w[i].bool()
        y, mean, var, cnt = vmap_layers.weighted_batch_norm(x[i], w[i], None, None, 1e-5)
        alone = F.batch_norm(x[i][rows], None, None, None, None, True, 0.0, 1e-5)
        torch.testing.assert_close(y[rows], alone, rtol=1e-5, atol=1e-6)
        assert float(cnt[0]) == float(rows.sum()) * x[i][0, 0].numel()
    batched = vmap(lambda xi, wi, ti, *p: grad(ours(wi, ti), argnums=argnums)(xi, *p),
                   in_dims=(0, 0, 0, 0, 0) if affine else (0, 0, 0, None, None))(x, w, t, weight, bias)
    for k in range(len(argnums)):
        torch.testing.assert_close(batched[k], torch.stack([both(i)[1][k] for i in range(CLIENTS)]),
                                   rtol=1e-5, atol=1e-6)


def test_a_wrong_gradient_is_caught():
    """Planted: the padding weight left out of the mean terms (every row treated as real). The comparison
    with autograd above fails on it."""
    x, t, w = _x(N, 4, 3, 3), _x(N, 4, 3, 3, seed=1), _weights()[0]
    t = t * w.reshape(N, 1, 1, 1)
    real = vmap_layers._WeightedBatchNormBackward.forward
    ref = grad(_loss_of(lambda a, b, c: _op_by_op(a, w, b, c), t))(x, torch.ones(4), torch.zeros(4))

    def planted(g, xc, w_, weight, rstd, count):
        return real(g, xc, torch.ones_like(w_), weight, rstd, count)
    try:
        vmap_layers._WeightedBatchNormBackward.forward = staticmethod(planted)
        bad = grad(_loss_of(lambda a, b, c: vmap_layers.weighted_batch_norm(a, w, b, c, 1e-5)[0], t))(
            x, torch.ones(4), torch.zeros(4))
    finally:
        vmap_layers._WeightedBatchNormBackward.forward = staticmethod(real)
    assert not torch.allclose(bad, ref, rtol=1e-3, atol=1e-4)


def test_second_derivative_raises_under_vmap_and_is_plain_outside():
    def inner(t):
        return grad(lambda u: (vmap_layers.batch_norm(u, None, None, 1e-5) ** 2).sum())(t).sum()
    xs = _x(2, N, 3, 4, 4)
    with pytest.raises(NotImplementedError, match="second derivatives"):
        vmap(grad(inner))(xs)
    # outside vmap the layers are the plain ops (no autograd Function): second derivatives are torch's own
    x = _x(N, 3, 4, 4)
    assert torch.equal(grad(inner)(x), grad(lambda t: grad(lambda u: (F.batch_norm(u, None, None, None, None, True,
                                                                                      0.0, 1e-5) ** 2).sum())(t).sum())(x))


def _cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(64, 3))


def _vectorized_grad(module, weighted: bool):
    """The vectorized executor's gradient through ``FunctionalModel``: every client's flat gradient of its
    weighted loss, one ``vmap``, on fixed data (padding rows in two clients); called again, it recomputes."""
    fm = functional.FunctionalModel(module, "classification")
    flat = torch.nn.utils.parameters_to_vector(fm.module.parameters()).detach().expand(CLIENTS, -1)
    x, y, w = _x(CLIENTS, N, 1, 8, 8), torch.randint(0, 3, (CLIENTS, N)), _weights()
    buffers = {k: v.expand(CLIENTS, *v.shape) for k, v in fm.initial_buffers().items()}

    def loss(p, xb, yb, wb, bufs):
        out, _ = fm.forward_train(p, xb, wb, None, weighted=weighted, buffers=bufs)
        return fm.criterion(out, functional.Batch(xb, yb, wb))
    return lambda: vmap(grad(loss))(flat, x, y, w, buffers)


@pytest.mark.parametrize("weighted", [False, True])
def test_vectorized_step_has_no_layout_copies(weighted):
    """Through the executors' FunctionalModel, a vmapped gradient of a conv-BatchNorm-pool model copies no
    activation-sized layout (``clone``) and applies BatchNorm's scale inside the kernel (no ``mul`` of activation
    size; the small copies left are the pooled features moving to the linear layer); with the ordinary
    layers planted back, both reappear, with the same gradient to rounding."""
    g = _vectorized_grad(_cnn(), weighted)

    def step():
        g()
        with counting() as c:
            out = g()
        return out, c

    g_new, c_new = step()
    activation = N * 4 * 8 * 8 * CLIENTS * 4  # bytes of one conv output over all clients
    assert c_new.op_bytes["clone"] < activation  # copying one activation reads and writes 2 x activation
    assert c_new.op_bytes["mul"] < activation
    with pytest.MonkeyPatch.context() as mp:  # planted: the ordinary layers back
        mp.setattr(torch.compiler, "is_compiling", lambda: True)
        g_old, c_old = step()
    assert c_old.op_bytes["clone"] > 2 * activation and c_old.op_bytes["mul"] > activation
    assert c_old.bytes > 1.5 * c_new.bytes
    torch.testing.assert_close(g_new, g_old, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("features", ["flat", "maps"])
def test_batchnorm1d_keeps_its_arithmetic(features):
    """BatchNorm on (N, C) features keeps the op-by-op forms, so vectorized results of such models (committed
    at 0.3.0: gradma_mlp) stay bit for bit; on feature maps the folded layers round differently (the check
    can fail: it does for ``maps``)."""
    torch.manual_seed(0)
    if features == "flat":
        module = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 8), torch.nn.BatchNorm1d(8),
                                     torch.nn.ReLU(), torch.nn.Linear(8, 3))
    else:
        module = _cnn()
    g = _vectorized_grad(module, weighted=True)
    now = g()
    with pytest.MonkeyPatch.context() as mp:  # the op-by-op forms everywhere
        mp.setattr(torch.compiler, "is_compiling", lambda: True)
        old = g()
    assert torch.equal(now, old) == (features == "flat")
