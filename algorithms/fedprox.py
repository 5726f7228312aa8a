"""FedProx (Li et al., 2020) and FedProxM, its server-momentum variant (GradMA paper, Appendix Alg. 5).

Local step with the proximal term mu/2 ||x - x_t||^2 (Alg. 5, FedProxM branch):

    x_{t,tau+1}^(i) = x_{t,tau}^(i) - eta_l ( grad f_i(x_{t,tau}^(i)) + mu (x_{t,tau}^(i) - x_t) )

then the server step of FedAvgM: d_{t+1} = sum_i p_i (x_t - x_{t,I}^(i)), m_{t+1} = beta1 m_t + d_{t+1},
x_{t+1} = x_t - eta_g m_{t+1}. FedProx is FedProxM with beta1 = 0 (true variants, hence one module);
FedProx(mu = 0) == FedAvg and FedProxM(mu = 0) == FedAvgM exactly (tested). The local optimizer of the
experiment applies the corrected gradient (plain SGD in the papers). ``weighting`` as in ``fedavgm``.
"""
from __future__ import annotations

from dataclasses import dataclass

from .base import Message, register
from .fedavgm import FedAvgM, check_beta, check_eta_g, check_weighting


def _check_mu(name: str, mu: float) -> None:
    if not mu >= 0:
        raise ValueError(f"{name}: mu must be >= 0, got {mu}")


@register
class FedProxM(FedAvgM):
    name = "fedproxm"

    @dataclass(frozen=True)
    class Hyper:
        mu: float = 0.01  # proximal coefficient (GradMA grid {0.001, 0.01, 0.1})
        beta1: float = 0.9
        eta_g: float = 1.0
        weighting: str = "samples"

        def validate(self):
            _check_mu("fedproxm", self.mu)
            check_beta("fedproxm", "beta1", self.beta1)
            check_eta_g("fedproxm", self.eta_g)
            check_weighting("fedproxm", self.weighting)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        mu = self.hp.mu

        def grad_fn(p, batch, s):
            loss, g = ctx.loss_and_grad(p, batch)
            return loss, g + mu * (p - w0)

        w = self.sgd_loop(ctx, w0, grad_fn)
        return Message.dense(w0 - w, "d"), client_state


@register
class FedProx(FedProxM):
    name = "fedprox"

    @dataclass(frozen=True)
    class Hyper:
        mu: float = 0.01  # proximal coefficient (GradMA grid {0.001, 0.01, 0.1})
        eta_g: float = 1.0
        weighting: str = "samples"

        def validate(self):
            _check_mu("fedprox", self.mu)
            check_eta_g("fedprox", self.eta_g)
            check_weighting("fedprox", self.weighting)
