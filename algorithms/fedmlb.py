"""FedMLB (Kim, Kim & Han, ICML 2022): hybrid local/global paths as regularizer; FedMLBM adds momentum.

"Multi-Level Branched Regularization for Federated Learning"; FedMLBM is its server-momentum variant
(GradMA paper, Sec. 6.1: the "slow-momentum variants" add Alg. 5's server momentum to the local rule).

The model is a chain of B blocks (``benchmark.models.stages``). Besides its main path
L_1 -> ... -> L_B, the local model in round t has B - 1 hybrid paths: path b runs the local blocks
L_1..L_b and then the *frozen* global blocks G_{b+1}..G_B of the round's starting model w_t. The
local objective (FedMLB, Sec. 3, the total loss, Eq. (8)) is

    l = CE(q_main, y) + lambda1 * mean_b CE(q_b, y) + lambda2 * mean_b tau^2 KL(q_b^tau || q_main^tau)

with q^tau the softmax at temperature tau. Gradients reach the local blocks through both the main
path and the hybrid paths (the global blocks are constants); the KL is "online" distillation, i.e.
neither side is detached. The uplink is FedAvg's update d_i = w_t - w_i; the server optimizer is
FedMLB's plain step (``optim.ServerSGD``) or FedMLBM's momentum (``optim.ServerMomentum``,
``with_server_momentum``), as FedAvgM's. FedMLB(lambda1 = lambda2 = 0) == FedAvg and
FedMLBM(lambda1 = lambda2 = 0) == FedAvgM (tested).

Readings:
* Blocks: FedMLB cuts its ResNet-18 after the stem and each residual stage. Here every model is cut by
  ``benchmark.models.stages`` (GradMA's MLP: 3 blocks, 2 hybrid paths; LeNet-5: 5 blocks; ResNets:
  stem, stages, classifier). A one-block model (logistic regression) has no hybrid path and is
  rejected.
* The global blocks run with BatchNorm on the batch's statistics, recording nothing, and no dropout
  (``ModelFn.reference``).
* Defaults are FedMLB's: lambda1 = lambda2 = 1, tau = 1. GradMA says only "hyperparameters follow [13]".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .core import Algorithm, Message, optim, register, with_server_momentum
from .core.hyper import NONNEGATIVE, POSITIVE, WEIGHTING, param


def _weighted_mean(per: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (per * w).sum() / w.sum()


def branched_loss(main_loss: torch.Tensor, main: torch.Tensor, hybrids: list[torch.Tensor], batch,
                  lambda1: float, lambda2: float, tau: float) -> torch.Tensor:
    """FedMLB's total loss from the main path's loss and logits and the hybrid paths' logits."""
    w = batch.w
    loss = main_loss
    if not hybrids:
        return loss
    ce = torch.stack([_weighted_mean(F.cross_entropy(q, batch.y, reduction="none"), w) for q in hybrids])
    log_main = F.log_softmax(main / tau, dim=1)
    kl = torch.stack([
        _weighted_mean((F.softmax(q / tau, dim=1) * (F.log_softmax(q / tau, dim=1) - log_main)).sum(1), w)
        for q in hybrids]) * tau ** 2
    return loss + lambda1 * ce.mean() + lambda2 * kl.mean()


@register
class FedMLB(Algorithm):
    name = "fedmlb"
    server_optimizer = optim.ServerSGD

    @dataclass(frozen=True)
    class Hyper:
        # weight of the hybrid paths' cross-entropy (FedMLB's default)
        lambda1: float = param(1.0, NONNEGATIVE)
        # weight of the hybrid-to-main KL distillation (FedMLB's default)
        lambda2: float = param(1.0, NONNEGATIVE)
        tau: float = param(1.0, POSITIVE)  # distillation temperature (FedMLB's default)
        eta_g: float = param(1.0, POSITIVE)
        weighting: str = param("samples", WEIGHTING)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        hp = self.hp

        def objective(p, model_fn, batch):
            nb = model_fn.num_stages
            if nb < 2:
                raise ValueError(f"{self.name} needs a model of at least two blocks (benchmark.models.stages); "
                                 "logistic regression has one")
            if batch.y.dim() != 1:
                raise ValueError(f"{self.name} needs a classification task (class-index labels)")
            outs = model_fn.stages(p, batch.x)
            if hp.lambda1 == 0 and hp.lambda2 == 0:
                hybrids = []
            else:
                hybrids = [model_fn.reference(w0, outs[b], start=b + 1)[-1] for b in range(nb - 1)]
            return branched_loss(ctx.criterion(outs[-1], batch), outs[-1], hybrids, batch, hp.lambda1,
                                 hp.lambda2, hp.tau)

        def grad_fn(p, batch, s):
            return ctx.value_and_grad(objective, p, batch)

        w = self.sgd_loop(ctx, w0, grad_fn)
        return Message.dense(w0 - w, "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = self.weighted_mean(uplinks["d"], self.client_weights(weights, self.hp.weighting))
        return self.server_step(server_state, d)


FedMLBM = register(with_server_momentum(FedMLB, "fedmlbm"))
