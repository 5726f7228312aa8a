"""SCAFFOLD (Karimireddy et al., 2020, Alg. 1 with control-variate option II), and its rule under a local
heavy-ball momentum that keeps SCAFFOLD's exact convergence.

Server state (x, c); each client keeps its control variate c_i (c_i = 0 at first). The server
broadcasts x and c (2 fp32 vectors); the client runs K_i local steps on the corrected gradient

    y <- y - eta_l ( g_i(y) - c_i + c )                                  (Alg. 1, line 10)
    c_i+ = c_i - c + (x - y) / (K_i eta_l)                               (line 12, option II)

and sends (Delta y_i, Delta c_i) = (y - x, c_i+ - c_i) (2 fp32 vectors: 64 bits per parameter up and
down, the "2x" of the GradMA paper's Table 2). The server applies

    x <- x + eta_g sum_{i in S} p_i Delta y_i,     c <- c + (1/N) sum_{i in S} Delta c_i   (lines 16-17)

so c stays the uniform mean of the N client variates. ``weighting`` chooses p_i: ``"uniform"``
(default, the paper's 1/|S|) or ``"samples"`` (n_i / sum n_j, as FedAvg; only the x update changes).
K_i is the client's own number of local steps and eta_l the round's local learning rate. With c = c_i = 0
(the first round) a client's update is FedAvg's (tested).

Local optimizer (``convention``; ``check_optimizer`` refuses the rest before any training):

* ``"exact"`` (default), plain SGD: the paper's rule above, unchanged.
* ``"exact"``, heavy-ball SGD with momentum beta (torch semantics, ``optim.SGD``): the corrected gradient
  h_k = g_i(y_k) - c_i + c goes through the momentum buffer, b_k = beta b_{k-1} + h_k (b_0 = h_0),
  y_{k+1} = y_k - eta_l b_k, so x - y = eta_l sum_{k<K} a_k h_k with a_k = (1 - beta^{K-k}) / (1 - beta), a
  displacement amplified by ||a||_1 / K (2.6 at K = 5, beta = 0.9; up to 1 / (1 - beta)). Option II is then
  normalised by the momentum's effective number of steps, as FedNova's a_i (Wang et al. 2020, Sec. 4):

      c_i+ = c_i - c + (x - y) / (||a||_1 eta_l),   ||a||_1 = [K - beta (1 - beta^K) / (1 - beta)] / (1 - beta)

  i.e. c_i+ = gbar_i = sum_k (a_k / ||a||_1) g_i(y_k), an a-weighted mean of the local gradients where the
  paper's is their plain mean (``optim.effective_steps``). With K_i in place of ||a||_1 (the paper's formula
  applied unchanged), c_i+ = (1 - r)(c_i - c) + r gbar_i with r = ||a||_1 / K: the old variate re-enters with
  the factor 1 - r, larger than 1 in size once r > 2, and SCAFFOLD diverges. Exactness is kept: at
  x = x* with c_i = grad f_i(x*) and c = mean_i c_i = grad f(x*) = 0 (full participation) every h_k = 0, y
  stays at x* and c_i+ = c_i (tested: within 1e-3 of the optimum of a heterogeneous least-squares problem
  with beta = 0.9, where the unnormalised rule diverges).
* ``"niid_bench"``: the convention of NIID-Bench's code (Li et al., ICDE 2022; ``experiments.py``,
  ``train_net_scaffold``), for comparability with public results: the optimizer (any: SGD, heavy ball,
  Adam) steps on the raw gradient g_i(y), then the correction is applied outside its state,
  y <- y - eta_l (c - c_i), and c_i+ = c_i - c + (x - y) / (K_i eta_l) as printed, which is then
  (1/K) sum_k b_k, the optimizer's mean step in gradient units, free of c_i: no feedback, no divergence. But
  it is **not exactly convergent** under momentum or Adam: c_i+ estimates the mean momentum buffer, not the
  gradient, and the fixed point moves off x* (measured on the problem above: ``tests/test_local_momentum.py``).
  With plain SGD it is the paper's rule up to float rounding.
* ``"exact"`` with Adam (or another optimizer): refused, because Adam's displacement is not a fixed linear
  combination of the corrected gradients, so option II has no normaliser; use ``convention="niid_bench"``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, optim, register
from .core.hyper import POSITIVE, WEIGHTING, choice, param

CONVENTIONS = ("exact", "niid_bench")


class _CorrectedAfterStep:
    """NIID-Bench's local step: ``inner`` steps on the raw gradient, then y <- y - lr (c - c_i) outside its state."""

    def __init__(self, inner, correction: torch.Tensor):
        self.inner, self.correction = inner, correction

    def init(self, params):
        return self.inner.init(params)

    def step(self, params, grad, state, lr):
        params, state = self.inner.step(params, grad, state, lr)
        return params - lr * self.correction, state


class _WithOptimizer:
    """``ctx`` with another local optimizer (everything else is ``ctx``'s)."""

    def __init__(self, ctx, optimizer):
        self._ctx, self.optimizer = ctx, optimizer

    def __getattr__(self, name):
        return getattr(self._ctx, name)


@register
class Scaffold(Algorithm):
    name = "scaffold"

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)  # global step size (1 in the paper's experiments)
        weighting: str = param("uniform", WEIGHTING)
        # exact: correction inside the optimizer, option II over its effective steps | niid_bench: NIID-Bench's code
        convention: str = param("exact", choice(*CONVENTIONS))

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        if hp.convention == "exact" and optim.heavy_ball(optimizer) is None:
            raise optim.refuse(cls.name, optimizer, "option II's control variate (x - y) / (K eta_l) needs a "
                               "displacement that is a fixed linear combination of the local gradients (plain or "
                               "heavy-ball SGD)", "Use optimizer 'sgd' (with any momentum), or convention="
                               "'niid_bench' (NIID-Bench's code: correction after the step, not exactly convergent)")

    def init(self, params):
        return {"params": params.clone(), "c": torch.zeros_like(params)}

    def broadcast(self, server_state):
        return Message({"x": server_state["params"].to(torch.float32),
                        "c": server_state["c"].to(torch.float32)})

    def client_init(self, params):
        return {"c_i": torch.zeros_like(params)}

    def local_update(self, ctx, downlink, client_state):
        x = self.receive(downlink, client_state)
        c, c_i = downlink["c"], client_state["c_i"]
        correction = c - c_i
        beta = optim.heavy_ball(ctx.optimizer)
        if self.hp.convention == "niid_bench":
            y = self.sgd_loop(_WithOptimizer(ctx, _CorrectedAfterStep(ctx.optimizer, correction)), x)
            k = ctx.steps.to(x.dtype)
        else:
            def grad_fn(p, batch, s):
                loss, g = ctx.loss_and_grad(p, batch)
                return loss, g + correction

            y = self.sgd_loop(ctx, x, grad_fn)
            k = ctx.steps.to(x.dtype) if not beta else optim.effective_steps(beta, ctx.steps).to(x.dtype)
        c_new = c_i - c + (x - y) / (k * ctx.lr)
        return Message({"dy": y - x, "dc": c_new - c_i}), {"c_i": c_new}

    def aggregate(self, server_state, uplinks, weights, info):
        dy = self.weighted_mean(uplinks["dy"], self.client_weights(weights, self.hp.weighting))
        dc = uplinks["dc"].sum(0) / info.num_clients
        return {**server_state, "params": server_state["params"] + self.hp.eta_g * dy,
                "c": server_state["c"] + dc}
