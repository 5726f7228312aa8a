"""MOON (Li, He & Song, CVPR 2021): model-contrastive local training; MOONM adds server momentum.

"Model-Contrastive Federated Learning"; MOONM is its server-momentum variant (GradMA paper, Sec. 6.1:
the "slow-momentum variants" add Alg. 5's server momentum to the local rule).

Local objective of client i in round t (MOON, Sec. 3.3, the model-contrastive loss and the local
objective; Algorithm 1):

    l_con = -log( exp(sim(z, z_glob)/tau) / (exp(sim(z, z_glob)/tau) + exp(sim(z, z_prev)/tau)) )
    l     = l_sup(w; x, y) + mu * l_con

with sim the cosine similarity, z the representation of x by the model being trained, z_glob by the
global model w_t (the round's starting point) and z_prev by the client's own local model from its
previous participation (a buffer of one negative model, MOON's default). Local SGD on l, then
d = sum_i p_i (w_t - w_i) and the server optimizer: MOON's plain step w_{t+1} = w_t - eta_g d
(``optim.ServerSGD``), MOONM's momentum m = beta1 m + d, w_{t+1} = w_t - eta_g m (``optim.ServerMomentum``,
``with_server_momentum``). MOON(mu = 0) == FedAvg and MOONM(mu = 0) == FedAvgM (tested).

Readings (what MOON's paper fixes and what it leaves to its code):
* Representation: MOON's networks have a projection head (2-layer MLP) whose output is z; GradMA's
  (and our) models have none, so z is the input of the classifier: the flattened output of the
  last-but-one stage (``benchmark.models.stages``). A model with a single stage (logistic
  regression) has no representation and is rejected.
* The frozen models (global, previous) are evaluated on the same batch with BatchNorm normalising
  by the batch's statistics, no running-statistics update and no dropout (``ModelFn.reference``);
  MOON's code puts them in eval mode (running statistics). For BatchNorm-free models the two agree.
* Before a client's first participation its "previous model" is the initial model w_0 (every client
  starts from it), so the contrastive term is active from the first round a client is sampled in
  (it is constant, with zero gradient, in round 0 where w_0 = w_t).
* The previous model is kept per client (client state: one parameter vector) and nothing extra
  travels: the uplink is FedAvg's update.
* Defaults are MOON's: tau = 0.5 and mu = 1 (its CIFAR-100 / Tiny-ImageNet value; it uses mu = 5 on
  CIFAR-10 and tunes mu in {0.1, 1, 5, 10}). GradMA says only "hyperparameters follow [17]".
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .core import Algorithm, Message, optim, register, with_server_momentum
from .core.hyper import NONNEGATIVE, POSITIVE, WEIGHTING, param


def contrastive_loss(z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, tau: float,
                     w: torch.Tensor) -> torch.Tensor:
    """MOON's l_con per sample (positive pair: global, negative: previous), weighted mean by ``w``."""
    pos = F.cosine_similarity(z, z_glob, dim=1) / tau
    neg = F.cosine_similarity(z, z_prev, dim=1) / tau
    per = torch.logaddexp(pos, neg) - pos  # = -log(e^pos / (e^pos + e^neg))
    return (per * w).sum() / w.sum()


@register
class MOON(Algorithm):
    name = "moon"
    server_optimizer = optim.ServerSGD

    @dataclass(frozen=True)
    class Hyper:
        # weight of the contrastive loss (MOON: 5 on CIFAR-10, 1 on CIFAR-100 / Tiny)
        mu: float = param(1.0, NONNEGATIVE)
        tau: float = param(0.5, POSITIVE)  # temperature (MOON's default)
        eta_g: float = param(1.0, POSITIVE)
        weighting: str = param("samples", WEIGHTING)

    def client_init(self, params):
        return {"prev": params.clone()}

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        prev = client_state["prev"]
        mu, tau = self.hp.mu, self.hp.tau

        def objective(p, model_fn, batch):
            if model_fn.num_stages < 2:
                raise ValueError(f"{self.name} needs a model with a representation (at least two stages, "
                                 "see benchmark.models.stages); logistic regression has none")
            outs = model_fn.stages(p, batch.x)
            sup = ctx.criterion(outs[-1], batch)
            if mu == 0:
                return sup
            z = outs[-2].flatten(1)
            with torch.no_grad():
                z_glob = model_fn.reference(w0, batch.x)[-2].flatten(1)
                z_prev = model_fn.reference(prev, batch.x)[-2].flatten(1)
            return sup + mu * contrastive_loss(z, z_glob, z_prev, tau, batch.w)

        def grad_fn(p, batch, s):
            return ctx.value_and_grad(objective, p, batch)

        w = self.sgd_loop(ctx, w0, grad_fn)
        return Message.dense(w0 - w, "d"), {"prev": w}

    def aggregate(self, server_state, uplinks, weights, info):
        d = self.weighted_mean(uplinks["d"], self.client_weights(weights, self.hp.weighting))
        return self.server_step(server_state, d)


MOONM = register(with_server_momentum(MOON, "moonm"))
