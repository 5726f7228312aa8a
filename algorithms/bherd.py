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
* ties in Algorithm 2 (line 4): the lowest index, decided in float64 with a proven rounding bound
  (``herding.greedy_herding``): a client of tau_i = 2 steps always meets one (its centered steps are c and
  -c), and without the bound rounding noise chose, differently alone and in a batched group;
* ``rescale="alpha"``: the paper's 1/alpha; ``"count"``: tau_i / k_i (exactly unbiased in scale when
  alpha * tau_i is not an integer);
* ``selection``: ``"herding"`` (Algorithm 2, the paper), ``"random"`` (a uniformly random subset of
  k_i steps, drawn from ``ctx.rng``) and ``"closest"`` (the k_i steps individually closest to the
  local mean, Fig. 1(d)'s reading): the controls recommended by ``bherd.md`` Sec. 2. They are options,
  and also registered as ``bherd_random`` and ``bherd_closest`` (configurations: BHerd with that default) so
  that a suite's algorithm list can hold them;
* ``base="fednova"`` (BHerd-FedNova, Fig. 2b; how BHerd plugs into FedNova is not specified): the
  herded, 1/alpha-rescaled update u_i is normalised by FedNova's rule (Wang et al. 2020),
  w_{t+1} = w_t + tau_eff * sum_i p_i u_i / tau_i with tau_eff = sum_i p_i tau_i (= ``"fedavg"`` when
  all tau_i are equal), also registered as ``bherd_fednova``. BHerd-SCAFFOLD (Fig. 2b) is
  ``bherd_scaffold.py``: it reuses ``HerdedSteps`` below on SCAFFOLD's corrected steps.

Local optimizer (``check_optimizer``): with base ``"fedavg"`` any (the stored steps are the steps the
optimizer applied, and only their fraction is counted). With base ``"fednova"`` FedNova's tau_i is the
effective number of steps of the local solver: tau_i for plain SGD, FedNova's ||a_i||_1 under heavy-ball
momentum (``optim.effective_steps``; the client then sends it as one fp32 scalar, as FedNova does), and Adam
(or another optimizer), for which FedNova has no ||a_i||_1, is refused before any training.

``HerdedSteps`` (local SGD with stored steps, selection, rescaling) and ``Selection`` (the
hyperparameters alpha, selection, rescale, with their constraints) are shared with ``bherd_scaffold.py``.

Not modelled here (engine-level): the paper keeps each client's batch order fixed across rounds
(non-RR) while the engine reshuffles every round (Fig. 4e: little difference), and its
tau_i = floor(E |D_i| / B) drops the last partial batch while the engine keeps it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, configure, diagnose, herding, optim, register
from .core.hyper import Range, choice, param

SELECTIONS = ("herding", "random", "closest")
BASES = ("fedavg", "fednova")
RESCALES = ("alpha", "count")
BASE = choice(*BASES, hints={"scaffold": "BHerd-SCAFFOLD is the algorithm bherd_scaffold"})


def stored_steps_loop(ctx, w0: torch.Tensor, grad_fn=None):
    """Local SGD (Eq. 3) storing each step z_s = w_s - w_{s+1} at row s of a (num_steps, d) buffer.

    ``grad_fn(p, batch, s) -> (loss, grad)`` replaces the plain gradient when given (as in
    ``Algorithm.sgd_loop``; SCAFFOLD's corrected gradient). Returns (w_K, Z, valid) where
    ``valid[s] = s < ctx.steps``; rows of masked steps are 0.

    The steps are collected in a list (row s written by the call for step s, as ``ctx.loop`` calls
    ``step`` once per s) and stacked once at the end: carrying the (num_steps, d) buffer through the
    loop would copy it at every step (O(tau^2 d) memory traffic, minutes a round for an MLP at tau = 120).
    A masked step's row is whatever the step computed (even NaN from an all-padding batch) until the
    final ``torch.where`` zeroes it.
    """
    opt = ctx.optimizer
    rows: list = [None] * ctx.num_steps

    def step(carry, batch, s):
        p, state = carry
        _, g = ctx.loss_and_grad(p, batch) if grad_fn is None else grad_fn(p, batch, s)
        p_new, state = opt.step(p, g, state, ctx.lr)
        rows[s] = p - p_new  # z_s
        return p_new, state

    w, _ = ctx.loop(step, (w0, opt.init(w0)))
    if any(r is None for r in rows):
        raise RuntimeError("stored_steps_loop: ctx.loop did not call step once for every s < num_steps")
    valid = torch.arange(ctx.num_steps, device=w0.device) < ctx.steps
    Z = torch.where(valid[:, None], torch.stack(rows), torch.zeros((), dtype=w0.dtype, device=w0.device))
    return w, Z, valid


def kept_count(alpha: float, steps: torch.Tensor) -> torch.Tensor:
    """k = round(alpha * tau), half up, at least 1 (0-d int64 tensor)."""
    return torch.floor(alpha * steps.to(torch.float64) + 0.5).to(torch.int64).clamp(min=1)


class HerdedSteps:
    """BHerd's local phase as a mixin, for any ``Algorithm`` whose ``hp`` has the fields of ``Selection``."""

    def select(self, ctx, Z: torch.Tensor, valid: torch.Tensor, k) -> torch.Tensor:
        """Boolean mask of the k kept rows of ``Z``: greedy herding (Algorithm 2) or a control."""
        if self.hp.selection == "herding":
            return herding.greedy_herding(Z, valid, k)[0]
        if self.hp.selection == "random":
            return herding.random_subset(Z, valid, k, ctx.rng.uniform((Z.shape[0],)))
        return herding.closest_subset(Z, valid, k)

    def herded_update(self, ctx, w0: torch.Tensor, grad_fn=None) -> torch.Tensor:
        """u = (1/alpha) * sum of the kept steps (``rescale="count"``: tau_i / k_i).

        Runs local SGD from ``w0`` (``grad_fn`` as in ``stored_steps_loop``), keeps k_i = round(alpha tau_i)
        of the stored steps by ``select`` and returns u, the herded estimate of w0 - w_K (with alpha = 1,
        exactly w0 - w_K).
        """
        _, Z, valid = stored_steps_loop(ctx, w0, grad_fn)
        k = kept_count(self.hp.alpha, ctx.steps)
        sel = self.select(ctx, Z, valid, k)
        # for observers: the stored steps z_l (rows: valid ones are real), which rows are real, which are kept
        diagnose(ctx, "herd_steps", Z)
        diagnose(ctx, "herd_valid", valid)
        diagnose(ctx, "herd_selected", sel)
        g = sel.to(Z.dtype) @ Z  # sum of the kept steps (eta g_i, Eq. 6)
        if self.hp.rescale == "alpha":
            return g / self.hp.alpha
        return g * (ctx.steps.to(Z.dtype) / k.to(Z.dtype))


@dataclass(frozen=True)
class Selection:
    """BHerd's selection hyperparameters, shared by every BHerd variant."""

    alpha: float = param(0.5, Range("(0, 1]"))  # fraction of the local steps kept
    selection: str = param("herding", choice(*SELECTIONS))  # herding | random | closest
    rescale: str = param("alpha", choice(*RESCALES))  # alpha (paper, 1/alpha) | count (tau_i / k_i)


@register
class BHerd(HerdedSteps, Algorithm):
    name = "bherd"

    @dataclass(frozen=True)
    class Hyper(Selection):
        base: str = param("fedavg", BASE)  # fedavg (BHerd-FedAvg) | fednova (BHerd-FedNova)

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        if hp.base == "fednova" and optim.heavy_ball(optimizer) is None:
            raise optim.refuse(cls.name, optimizer, "base='fednova' normalises by FedNova's ||a_i||_1, derived for "
                               "SGD only", "Use optimizer 'sgd' (with or without momentum), or base='fedavg'")

    def local_update(self, ctx, downlink, client_state):
        u = self.herded_update(ctx, self.receive(downlink, client_state))
        beta = optim.heavy_ball(ctx.optimizer)
        if self.hp.base == "fednova" and beta:  # FedNova's ||a_i||_1 of heavy-ball SGD, sent as FedNova does
            a = optim.effective_steps(beta, ctx.steps).reshape(1)
            return Message({"delta": (-u).to(torch.float32), "a": a}), client_state
        return Message.dense(-u, "delta"), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        d = uplinks["delta"]
        if self.hp.base == "fednova":
            tau = (uplinks["a"][:, 0] if "a" in uplinks.parts else info.steps).to(d.dtype)
            tau_eff = (weights.to(d.dtype) * tau).sum()
            delta = tau_eff * self.weighted_mean(d / tau[:, None], weights)
        else:
            delta = self.weighted_mean(d, weights)
        return {**server_state, "params": server_state["params"] + delta}


BHerdRandom = register(configure(
    BHerd, "bherd_random", "Control: a uniformly random subset of round(alpha * tau_i) steps, same rescaling.",
    selection="random"))
BHerdClosest = register(configure(
    BHerd, "bherd_closest", "Control: the round(alpha * tau_i) steps individually closest to the local mean.",
    selection="closest"))
BHerdFedNova = register(configure(
    BHerd, "bherd_fednova", "BHerd-FedNova (Fig. 2b): herded update, FedNova's normalised aggregation.",
    base="fednova"))
