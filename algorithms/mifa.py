"""MIFA (Gu et al., 2021) and MIFAM, its server-momentum variant (GradMA paper, Appendix Alg. 6).

Each sampled worker runs plain local SGD from x_t and reports g_{t+1}^(i) = x_t - x_{t,I}^(i). The
server memorises the latest update of every worker (G^(i) = 0 for a worker never sampled) and uses
their uniform mean over all N workers:

    d_{t+1} = (1/N) sum_{i in [N]} G^(i),    m_{t+1} = beta1 m_t + d_{t+1},    x_{t+1} = x_t - eta_g m_{t+1}

MIFA is MIFAM with beta1 = 0 (true variants, hence one module). Alg. 6 keeps g_old^(i) on the worker
and sends the difference g_{t+1}^(i) - g_old^(i), accumulated into d_t on the server; here the
server keeps the N latest updates (an (N, d) tensor) and averages them directly, which is the same
d_{t+1} without the rounding drift of a running sum, at the same uplink cost (one fp32 vector).
With full participation MIFA is FedAvg with uniform weights (tested). The weights are always the
paper's uniform 1/N (Eq. 1's objective); there is no sample-size variant.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import Algorithm, Message, register
from .fedavgm import check_beta, check_eta_g


@register
class MIFAM(Algorithm):
    name = "mifam"

    @dataclass(frozen=True)
    class Hyper:
        beta1: float = 0.9  # server momentum (GradMA grid {0.1, 0.5, 0.9})
        eta_g: float = 1.0

        def validate(self):
            check_beta("mifam", "beta1", self.beta1)
            check_eta_g("mifam", self.eta_g)

    @property
    def beta1(self) -> float:
        return getattr(self.hp, "beta1", 0.0)

    def init(self, params):
        return {"params": params.clone(), "momentum": torch.zeros_like(params),
                "memory": torch.zeros(self.num_clients, params.numel(), dtype=params.dtype,
                                      device=params.device)}

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(w0 - w, "g"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        memory = server_state["memory"].index_copy(0, info.client_ids.to(torch.int64),
                                                   uplinks["g"].to(server_state["memory"].dtype))
        d = memory.mean(0)
        m = self.beta1 * server_state["momentum"] + d
        return {**server_state, "params": server_state["params"] - self.hp.eta_g * m, "momentum": m,
                "memory": memory}


@register
class MIFA(MIFAM):
    name = "mifa"

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = 1.0

        def validate(self):
            check_eta_g("mifa", self.eta_g)
