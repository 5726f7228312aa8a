"""Issue 45, ninth round: the size of the lever left for FedSWA's cell, the one cell under 1.3x (a sizing
script, not the executor's code). FedSWA's vectorized local step at its claims shapes (10 clients x 50 rows, MLP
784-200-10, one torch thread, explicit batched products standing in for ``benchmark.sim.chain_grad`` under vmap):

  A: per-layer gradients, one ``cat`` into the flat gradient, then SGD's ``p - lr * g`` (today's order);
  C: each layer's new weights by one ``baddbmm(W, g^T, h, alpha=-lr)`` (the gradient product and the update fused,
     out of place), one ``cat`` into the new flat parameters;
  B: as C, in place into views of the flat parameters (no ``cat`` at all).

C and B change the numbers by rounding (``addmm``'s fused accumulation): a numerics change for a version whose
claims run again. Prints CPU ms per step per variant (A C B alternating, best and median of 5 rounds of 300 steps)
and the largest difference from A after 50 steps.

    python results/perf/fused-sgd-lever.py
"""
import statistics
import time

import torch

torch.set_num_threads(1)
C, B, D, H, K = 10, 50, 784, 200, 10
SHAPES = ((H, D), (H,), (K, H), (K,))
gen = torch.Generator().manual_seed(0)
x = torch.randn(C, B, D, generator=gen)
y = torch.randint(0, K, (C, B), generator=gen)
LR = 0.03


def views(p):
    out, o = [], 0
    for shape in SHAPES:
        m = shape[0] * (shape[1] if len(shape) > 1 else 1)
        out.append(p[:, o:o + m].view(C, *shape))
        o += m
    return out


def forward_backward(p):
    w1, b1, w2, b2 = views(p)
    h1 = torch.relu(torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2)))
    z2 = torch.baddbmm(b2.unsqueeze(1), h1, w2.transpose(1, 2))
    gz2 = torch.softmax(z2, -1)
    gz2.scatter_add_(2, y.unsqueeze(2), -torch.ones(C, B, 1))
    gz2 /= B
    gz1 = torch.ops.aten.threshold_backward(torch.bmm(gz2, w2), h1, 0)
    return gz1, h1, gz2


def step_a(p):
    gz1, h1, gz2 = forward_backward(p)
    g = torch.cat([torch.bmm(gz1.transpose(1, 2), x).reshape(C, -1), gz1.sum(1),
                   torch.bmm(gz2.transpose(1, 2), h1).reshape(C, -1), gz2.sum(1)], 1)
    return p - LR * g


def step_c(p):
    gz1, h1, gz2 = forward_backward(p)
    w1, b1, w2, b2 = views(p)
    return torch.cat([torch.baddbmm(w1, gz1.transpose(1, 2), x, alpha=-LR).reshape(C, -1), b1 - LR * gz1.sum(1),
                      torch.baddbmm(w2, gz2.transpose(1, 2), h1, alpha=-LR).reshape(C, -1), b2 - LR * gz2.sum(1)], 1)


def step_b(p):
    gz1, h1, gz2 = forward_backward(p)
    w1, b1, w2, b2 = views(p)
    w1.baddbmm_(gz1.transpose(1, 2), x, alpha=-LR)
    b1.add_(gz1.sum(1), alpha=-LR)
    w2.baddbmm_(gz2.transpose(1, 2), h1, alpha=-LR)
    b2.add_(gz2.sum(1), alpha=-LR)
    return p


def main():
    n = sum(s[0] * (s[1] if len(s) > 1 else 1) for s in SHAPES)
    p0 = torch.randn(C, n, generator=gen) * 0.05
    times = {"A": [], "C": [], "B": []}
    for _ in range(5):
        for name, f in (("A", step_a), ("C", step_c), ("B", step_b)):
            p = p0.clone()
            for _ in range(20):
                p = f(p)
            t = time.process_time()
            for _ in range(300):
                p = f(p)
            times[name].append((time.process_time() - t) / 300 * 1e3)
    for name, ts in times.items():
        print(f"{name}: best {min(ts):.2f} ms, median {statistics.median(ts):.2f} ms per step "
              f"({min(times['A']) / min(ts):.2f}x A's best)")
    pa, pc, pb = p0.clone(), p0.clone(), p0.clone()
    for _ in range(50):
        pa, pc, pb = step_a(pa), step_c(pc), step_b(pb)
    print(f"after 50 steps, largest |C - A| {(pc - pa).abs().max().item():.2e}, |B - A| "
          f"{(pb - pa).abs().max().item():.2e} (parameters of size about {pa.abs().max().item():.2f})")


if __name__ == "__main__":
    main()
