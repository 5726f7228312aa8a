"""The pattern shared by FedBAT's post-training compression baselines (FedBAT paper, Section 2 and
App. A.2): train locally exactly like FedAvg, compress the update m = w_{t+1}^k - w_t, send it, and let
the server apply the weighted mean of the decoded updates (FedBAT Eq. 3, the FedAvg rule Eq. 2 with
m replaced by its compressed version C(m)):

    w_{t+1} = w_t + sum_{k in S_t} p'_k C(m_{t+1}^k)

Used by ``signsgd``, ``ef_signsgd``, ``noisy_signsgd``, ``stoc_signsgd``, ``zerofl`` and ``fedpaq``; each
of them only chooses the compression operator (``algorithms.compress.get``) and its parameters, and
``ef_signsgd`` adds error feedback. The uplink is the transform ``compress.uplink(op, layout, scope,
per_layer, ef)``: ``fp32_layers(error_feedback?(per_layer?(op)))``; its state (the EF residual) is the
client state ``residual``. The update is m = w - w0 (``compress.update``, the uplink sign convention).

Choices the paper leaves open, and what is done here (the same for every baseline, and the same as
FedBAT's binarization scope, so that the bits compare like with like):

* ``scope="weights"`` (default): only conv/linear weights (``ParamLayout`` kind ``"weight"``) are
  compressed; BatchNorm affine parameters and biases travel in fp32. FedBAT's public code binarizes
  exactly this set for FedBAT itself; the paper says nothing about the baselines. ``scope="all"``
  compresses every parameter.
* ``per_layer=True`` (default): the operator is applied to each compressed tensor separately, so every
  data-dependent scale (EF-SignSGD's ||m||_1/d, Stoc-SignSGD's ||m||_inf, QSGD's ||m||_2, top-k's k) is
  per layer, like FedBAT's per-layer alpha and like a Flower client that compresses its list of
  arrays one by one. ``per_layer=False`` applies the operator once to the concatenation of the
  compressed tensors (one scale for the model).
* Bits are what is packed: each group's operator message (padding of its last byte included) plus 32
  bits per fp32 entry that is not compressed. BatchNorm running statistics are buffers averaged by
  the engine and are not counted (as for every algorithm).
* Randomness of stochastic operators comes from a child ``CounterRng`` forked from ``ctx.rng`` before
  local training (``fork_rng``), so the sequential and the vectorized executors, whose loops advance
  ``ctx.rng`` by different numbers of masked steps, draw the same compression noise. Deterministic
  operators (identity, sign, scaled sign, top-k) do not touch ``ctx.rng``, so local training draws the
  same dropout masks as FedAvg's. Whether an operator draws is its own declaration
  (``Transform.needs_rng``, propagated by the wrappers).
"""
from __future__ import annotations

import torch

from ..core import Algorithm, CounterRng, Rng
from ..core.hyper import choice
from .wrappers import SCOPES, split_layout, update, uplink

__all__ = ["SCOPES", "SCOPE", "CompressedUpdate", "fork_rng", "split_layout"]

SCOPE = choice(*SCOPES)  # the ``scope`` hyperparameter of the compressed algorithms


def fork_rng(rng: Rng) -> CounterRng:
    """A child counter-based RNG keyed by three draws of ``rng`` (63 random bits).

    Call it before the local loop: the executors run different numbers of (masked) loop steps, so a
    draw after the loop would come from a different position of ``ctx.rng`` in each executor.
    """
    u = rng.uniform((3,))
    a = (u[0] * 2.0 ** 24).to(torch.int64)
    b = (u[1] * 2.0 ** 24).to(torch.int64)
    c = (u[2] * 2.0 ** 15).to(torch.int64)
    return CounterRng(a + b * (1 << 24) + c * (1 << 48))


class CompressedUpdate(Algorithm):
    """Base class: local SGD as FedAvg, the update compressed by the uplink transform, decoded at the server.

    Subclasses set ``name``, ``Hyper`` (with ``scope`` and ``per_layer``) and ``make_operator``, and
    ``error_feedback = True`` for a residual kept per client (client state ``residual``).
    """

    error_feedback = False

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.op = self.make_operator()
        self.uplink = uplink(self.op, layout, hp.scope, hp.per_layer, ef=self.error_feedback)

    def make_operator(self):
        raise NotImplementedError

    def client_init(self, params):
        if self.uplink.stateless:
            return {}
        return {"residual": self.uplink.init(self.layout, device=params.device)}

    def encode(self, delta: torch.Tensor, rng: Rng | None, client_state: dict):
        """The uplink message of the update ``delta`` and the new client state."""
        if self.uplink.stateless:
            msg, _ = self.uplink.encode(delta, (), rng)
            return msg, client_state
        msg, residual = self.uplink.encode(delta, client_state["residual"], rng)
        return msg, {**client_state, "residual": residual}

    def decode(self, message) -> torch.Tensor:
        """The decoded update C(m), a flat vector in layout order (one client; vmap for many)."""
        return self.uplink.decode(message)

    # -- the contract --
    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        rng = fork_rng(ctx.rng) if self.uplink.needs_rng else None
        w = self.sgd_loop(ctx, w0)
        return self.encode(update(w, w0), rng, client_state)

    def aggregate(self, server_state, uplinks, weights, info):
        deltas = torch.func.vmap(self.decode)(uplinks)
        delta = self.weighted_mean(deltas, weights)
        return {**server_state, "params": server_state["params"] + delta}
