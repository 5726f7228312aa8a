"""MimeLite (Karimireddy et al., 2020, "Mime", Alg. 1 without the SVRG correction), with the
momentum base optimizer (their Sec. 3 / App. example: SGD with momentum beta).

The server broadcasts x and its momentum state s (2 fp32 vectors). A sampled client i

* runs local steps that apply the server's optimizer with the *frozen* state s:
      y <- y - eta_l ( (1 - beta) g_i(y; batch) + beta s )                       (U(g, s), Alg. 1)
* computes its full-batch gradient at the broadcast point, c_i = grad f_i(x),
* sends (y_i - x, c_i) (2 fp32 vectors: the "2x" of the GradMA paper's Table 2);

the server updates the state with the full-batch gradients and averages the models:

      s <- (1 - beta) sum_{i in S} p_i c_i + beta s,      x <- x + eta_g sum_{i in S} p_i (y_i - x).

c_i is accumulated during the local loop as the sample-weighted mean of grad f_i(x; batch) over the
round's minibatches: the exact full-batch gradient when the round covers the local data a whole
number of times (``local_epochs``), an unbiased estimate with ``local_steps``. This costs one extra
gradient per step; that gradient does not touch BatchNorm running statistics. ``weighting``:
``"uniform"`` (default, the paper's 1/|S|) or ``"samples"``. beta = 0 gives FedAvg's models (tested).

Local optimizer: plain SGD only (weight decay allowed, as part of g). Mime's local step *is* the server's
base optimizer U(g, s) with its state s frozen during the round (Alg. 1; the paper's momentum is the
hyperparameter ``beta``); a local momentum buffer or Adam state would be a second optimizer state that
changes at every local step, which is exactly what Mime freezes. ``check_optimizer`` refuses both before
any training and points to ``beta``.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, optim, register
from .core.hyper import MOMENTUM, POSITIVE, WEIGHTING, param


@register
class MimeLite(Algorithm):
    name = "mimelite"

    @dataclass(frozen=True)
    class Hyper:
        beta: float = param(0.9, MOMENTUM)  # momentum of the server's base optimizer
        eta_g: float = param(1.0, POSITIVE)
        weighting: str = param("uniform", WEIGHTING)

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        if optim.heavy_ball(optimizer) != 0.0:
            raise optim.refuse(cls.name, optimizer, "MimeLite's local step is the server optimizer (momentum beta) "
                               "with its state frozen during the round (Mime, Alg. 1); a local optimizer state "
                               "would change at every step", "Use optimizer 'sgd' with momentum 0 and set "
                               "MimeLite's own momentum with algorithm_args beta")

    def init(self, params):
        return {"params": params.clone(), "s": torch.zeros_like(params)}

    def broadcast(self, server_state):
        return Message({"x": server_state["params"].to(torch.float32),
                        "s": server_state["s"].to(torch.float32)})

    def local_update(self, ctx, downlink, client_state):
        x = self.receive(downlink, client_state)
        s_state = downlink["s"]
        beta = self.hp.beta
        opt = ctx.optimizer

        def step(carry, batch, s):
            p, st, c_sum, n_sum = carry
            n_b = batch.w.sum().to(x.dtype)
            c_sum = c_sum + n_b * ctx.loss_and_grad(x, batch, update_stats=False)[1]
            _, g = ctx.loss_and_grad(p, batch)
            p, st = opt.step(p, (1 - beta) * g + beta * s_state, st, ctx.lr)
            return p, st, c_sum, n_sum + n_b

        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        y, _, c_sum, n_sum = ctx.loop(step, (x, opt.init(x), torch.zeros_like(x), zero))
        return Message({"delta": y - x, "c": c_sum / n_sum}), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        p = self.client_weights(weights, self.hp.weighting)
        beta = self.hp.beta
        s = (1 - beta) * self.weighted_mean(uplinks["c"], p) + beta * server_state["s"]
        x = server_state["params"] + self.hp.eta_g * self.weighted_mean(uplinks["delta"], p)
        return {**server_state, "params": x, "s": s}
