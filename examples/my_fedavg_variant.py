"""FedAvg with clipped client updates: an example plugin (README, "Add your own algorithm").

The clipping step of DP-FedAvg (McMahan, Ramage, Talwar & Zhang, "Learning Differentially Private Recurrent
Language Models", ICLR 2018, Algorithm 1, UserUpdate's projection, without the noise): client k's update
Delta_k = w_t - w_{t+1}^k is scaled to norm at most S before it is sent,

    Delta_k <- Delta_k * min(1, S / ||Delta_k||_2),

and the server applies the weighted mean as FedAvg does, w_{t+1} = w_t - eta_g sum_k p_k Delta_k
(``optim.ServerSGD``). With S large enough this is FedAvg exactly.

Use it without touching fedrepro: ``fedrepro run --plugin examples/my_fedavg_variant.py --algorithm
fedavg_clip --arg clip=0.5``, or ``plugins = ["my_fedavg_variant.py"]`` in a suite file.
"""
from dataclasses import dataclass

import torch

from algorithms import Algorithm, Message, register
from algorithms.core import optim
from algorithms.core.hyper import POSITIVE, param


@register
class FedAvgClip(Algorithm):
    name = "fedavg_clip"
    server_optimizer = optim.ServerSGD  # w <- w - eta_g d on the pseudo-gradient d

    @dataclass(frozen=True)
    class Hyper:
        clip: float = param(1.0, POSITIVE)  # S, the largest norm of a client's update
        eta_g: float = param(1.0, POSITIVE)  # server step size

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        delta = w0 - self.sgd_loop(ctx, w0)  # local SGD from the broadcast model
        # min(1, S / ||Delta||) without branching on a tensor value (vmap runs all clients at once)
        scale = torch.clamp(self.hp.clip / (delta.norm() + 1e-12), max=1.0)
        return Message.dense(delta * scale, "d"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        return self.server_step(server_state, self.weighted_mean(uplinks["d"], weights))
