"""MIFA (Gu et al., 2021) and MIFAM, its server-momentum variant (GradMA paper, Appendix Alg. 6).

Each sampled worker runs plain local SGD from x_t and reports g_{t+1}^(i) = x_t - x_{t,I}^(i). The
server memorises the latest update of every worker (G^(i) = 0 for a worker never sampled) and uses
their uniform mean over all N workers:

    d_{t+1} = (1/N) sum_{i in [N]} G^(i),    m_{t+1} = beta1 m_t + d_{t+1},    x_{t+1} = x_t - eta_g m_{t+1}

MIFA steps with x_{t+1} = x_t - eta_g d_{t+1} (``optim.ServerSGD``), MIFAM with the momentum above
(``optim.ServerMomentum``, ``with_server_momentum``). Alg. 6 keeps g_old^(i) on the worker
and sends the difference g_{t+1}^(i) - g_old^(i), accumulated into d_t on the server; here the
server keeps the N latest updates (an (N, d) tensor) and averages them directly, which is the same
d_{t+1} without the rounding drift of a running sum, at the same uplink cost (one fp32 vector).
With full participation MIFA is FedAvg with uniform weights (tested). The weights are always the
paper's uniform 1/N (Eq. 1's objective); there is no sample-size variant.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, optim, register, with_server_momentum
from .core.hyper import POSITIVE, param


@register
class MIFA(Algorithm):
    name = "mifa"
    server_optimizer = optim.ServerSGD

    @dataclass(frozen=True)
    class Hyper:
        eta_g: float = param(1.0, POSITIVE)

    def init(self, params):
        memory = torch.zeros(self.num_clients, params.numel(), dtype=params.dtype, device=params.device)
        return {**super().init(params), "memory": memory}

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        w = self.sgd_loop(ctx, w0)
        return Message.dense(w0 - w, "g"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        memory = server_state["memory"].index_copy(0, info.client_ids.to(torch.int64),
                                                   uplinks["g"].to(server_state["memory"].dtype))
        return {**self.server_step(server_state, memory.mean(0)), "memory": memory}


MIFAM = register(with_server_momentum(MIFA, "mifam"))
