"""FedProx (Li et al., 2020) and FedProxM, its server-momentum variant (GradMA paper, Appendix Alg. 5).

Local step with the proximal term mu/2 ||x - x_t||^2 (Alg. 5, FedProxM branch):

    x_{t,tau+1}^(i) = x_{t,tau}^(i) - eta_l ( grad f_i(x_{t,tau}^(i)) + mu (x_{t,tau}^(i) - x_t) )

then d_{t+1} = sum_i p_i (x_t - x_{t,I}^(i)) and the server optimizer: FedProx's plain step
x_{t+1} = x_t - eta_g d_{t+1} (``optim.ServerSGD``); FedProxM's momentum m_{t+1} = beta1 m_t + d_{t+1},
x_{t+1} = x_t - eta_g m_{t+1} (``optim.ServerMomentum``, ``with_server_momentum``). FedProx(mu = 0) ==
FedAvg and FedProxM(mu = 0) == FedAvgM exactly (tested). The local optimizer of the experiment applies
the corrected gradient (plain SGD in the papers). ``weighting`` as in ``fedavgm``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .core import Algorithm, Message, optim, register, with_server_momentum
from .core.hyper import NONNEGATIVE, POSITIVE, WEIGHTING, param


@register
class FedProx(Algorithm):
    name = "fedprox"
    server_optimizer = optim.ServerSGD

    @dataclass(frozen=True)
    class Hyper:
        mu: float = param(0.01, NONNEGATIVE)  # proximal coefficient (GradMA grid {0.001, 0.01, 0.1})
        eta_g: float = param(1.0, POSITIVE)
        weighting: str = param("samples", WEIGHTING)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        mu = self.hp.mu

        def grad_fn(p, batch, s):
            loss, g = ctx.loss_and_grad(p, batch)
            return loss, g + mu * (p - w0)

        w = self.sgd_loop(ctx, w0, grad_fn)
        return Message.dense(w0 - w, "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = self.weighted_mean(uplinks["d"], self.client_weights(weights, self.hp.weighting))
        return self.server_step(server_state, d)


FedProxM = register(with_server_momentum(FedProx, "fedproxm"))
