"""BHerd (Luo et al., arXiv 2403.16557v1, "Accelerating Federated Learning by Selecting Beneficial
Herd of Local Gradients"), BHerd-FedAvg (Algorithm 3) and BHerd-FedNova.

Each client runs ordinary local SGD from w_t (Eq. 3) and stores every step it takes,

    z_l = w^l - w^{l+1} = eta * grad F_i(w^l; batch_l),     l = 1..tau_i

(for the paper's plain SGD; with momentum or weight decay in the experiment's optimizer it is the
step actually applied). The trajectory is not changed by the selection, which happens afterwards:
greedy herding (Algorithm 2, ``herding.greedy_herding``) orders the centered z_l and keeps the first
k_i = round(alpha * tau_i) of them, pi_i; their sum is eta * g_i with g_i of Eq. 6 (the selection is the
same for z_l and for the raw gradients: herding is invariant to a common positive scale). The server
applies (Eq. 7, E = 1)

    w_{t+1} = w_t - (eta / alpha) * sum_i p_i g_i,     g_i = sum_{l in pi_i} grad F_i(w^l; batch_l)

The client sends u_i = -(1 / alpha) * sum_{l in pi_i} z_l = -(eta / alpha) g_i (one fp32 vector:
FedAvg's uplink). With alpha = 1 every step is kept and BHerd is FedAvg (Eq. 8).

Choices the paper leaves open (``bherd.md`` Sec. 1.4, 6.1):

* rounding: k_i = floor(alpha * tau_i + 1/2) (half up), at least 1;
* ``rescale="alpha"``: the paper's 1/alpha; ``"count"``: tau_i / k_i (exactly unbiased in scale when
  alpha * tau_i is not an integer);
* ``selection``: ``"herding"`` (Algorithm 2, the paper), ``"random"`` (a uniformly random subset of
  k_i steps, drawn from ``ctx.rng``) and ``"closest"`` (the k_i steps individually closest to the
  local mean, Fig. 1(d)'s reading): the controls recommended by ``bherd.md`` Sec. 2. They are options,
  and also registered as ``bherd_random`` and ``bherd_closest`` (the same class with that default) so
  that a suite's algorithm list can hold them;
* ``base="fednova"`` (BHerd-FedNova, Fig. 2b; how BHerd plugs into FedNova is not specified): the
  herded, 1/alpha-rescaled update u_i is normalised by FedNova's rule (Wang et al. 2020),
  w_{t+1} = w_t + tau_eff * sum_i p_i u_i / tau_i with tau_eff = sum_i p_i tau_i (= ``"fedavg"`` when
  all tau_i are equal), also registered as ``bherd_fednova``. BHerd-SCAFFOLD is left for later (it
  needs SCAFFOLD's control variates, which live in ``scaffold.py``; bherd.md suggests herding the
  corrected directions g - c_i + c).

Not modelled here (engine-level): the paper keeps each client's batch order fixed across rounds
(non-RR) while the engine reshuffles every round (Fig. 4e: little difference), and its
tau_i = floor(E |D_i| / B) drops the last partial batch while the engine keeps it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from . import herding
from .base import Algorithm, Message, register

SELECTIONS = ("herding", "random", "closest")
BASES = ("fedavg", "fednova")
RESCALES = ("alpha", "count")


def stored_steps_loop(ctx, w0: torch.Tensor):
    """Local SGD (Eq. 3) storing each step z_s = w_s - w_{s+1} at row s of a (num_steps, d) buffer.

    Returns (w_K, Z, valid) where ``valid[s] = s < ctx.steps`` (masked steps write nothing).
    """
    opt = ctx.optimizer

    def step(carry, batch, s):
        p, state, Z = carry
        _, g = ctx.loss_and_grad(p, batch)
        p_new, state = opt.step(p, g, state, ctx.lr)
        return p_new, state, torch.cat([Z[:s], (p - p_new)[None], Z[s + 1:]])  # row s <- z_s

    Z0 = torch.zeros(ctx.num_steps, w0.shape[0], dtype=w0.dtype, device=w0.device)
    w, _, Z = ctx.loop(step, (w0, opt.init(w0), Z0))
    valid = torch.arange(ctx.num_steps, device=w0.device) < ctx.steps
    return w, Z, valid


def kept_count(alpha: float, steps: torch.Tensor) -> torch.Tensor:
    """k = round(alpha * tau), half up, at least 1 (0-d int64 tensor)."""
    return torch.floor(alpha * steps.to(torch.float64) + 0.5).to(torch.int64).clamp(min=1)


@register
class BHerd(Algorithm):
    name = "bherd"

    @dataclass(frozen=True)
    class Hyper:
        alpha: float = 0.5  # fraction of the local steps kept
        selection: str = "herding"  # herding | random | closest
        rescale: str = "alpha"  # alpha (paper, 1/alpha) | count (tau_i / k_i)
        base: str = "fedavg"  # fedavg (BHerd-FedAvg) | fednova (BHerd-FedNova)

        def validate(self):
            if not 0.0 < self.alpha <= 1.0:
                raise ValueError(f"bherd: alpha must be in (0, 1], got {self.alpha}")
            if self.selection not in SELECTIONS:
                raise ValueError(f"bherd: selection must be one of {SELECTIONS}, got {self.selection!r}")
            if self.rescale not in RESCALES:
                raise ValueError(f"bherd: rescale must be one of {RESCALES}, got {self.rescale!r}")
            if self.base not in BASES:
                raise ValueError(f"bherd: base must be one of {BASES}, got {self.base!r}")

    def select(self, ctx, Z, valid, k):
        if self.hp.selection == "herding":
            return herding.greedy_herding(Z, valid, k)[0]
        if self.hp.selection == "random":
            return herding.random_subset(Z, valid, k, ctx.rng.uniform((Z.shape[0],)))
        return herding.closest_subset(Z, valid, k)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        _, Z, valid = stored_steps_loop(ctx, w0)
        k = kept_count(self.hp.alpha, ctx.steps)
        sel = self.select(ctx, Z, valid, k)
        g = sel.to(Z.dtype) @ Z  # sum of the kept steps (eta * g_i of Eq. 6)
        if self.hp.rescale == "alpha":
            u = g / self.hp.alpha
        else:
            u = g * (ctx.steps.to(Z.dtype) / k.to(Z.dtype))
        return Message.dense(-u, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = uplinks["delta"]
        if self.hp.base == "fednova":
            tau = info.steps.to(d.dtype)
            tau_eff = (weights.to(d.dtype) * tau).sum()
            delta = tau_eff * self.weighted_mean(d / tau[:, None], weights)
        else:
            delta = self.weighted_mean(d, weights)
        return {**server_state, "params": server_state["params"] + delta}


@register
class BHerdRandom(BHerd):
    """Control: a uniformly random subset of round(alpha * tau_i) steps, same rescaling."""

    name = "bherd_random"

    @dataclass(frozen=True)
    class Hyper(BHerd.Hyper):
        selection: str = "random"


@register
class BHerdClosest(BHerd):
    """Control: the round(alpha * tau_i) steps individually closest to the local mean."""

    name = "bherd_closest"

    @dataclass(frozen=True)
    class Hyper(BHerd.Hyper):
        selection: str = "closest"


@register
class BHerdFedNova(BHerd):
    """BHerd-FedNova (Fig. 2b): herded update, FedNova's normalised aggregation."""

    name = "bherd_fednova"

    @dataclass(frozen=True)
    class Hyper(BHerd.Hyper):
        base: str = "fednova"
