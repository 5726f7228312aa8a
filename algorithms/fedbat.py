"""FedBAT: Federated Binarization-Aware Training (Li et al., ICML 2024, Sec. 3, Algorithm 1).

Each client learns its update m (starting from 0) and a per-layer step size alpha, with the binarized
update in the forward pass (Eq. 5):  min_{m, alpha} F_k(w_t + S(m, alpha)).

Binarization operator, element-wise for a layer's step size alpha > 0 (Eq. 6-7), zeta ~ U(0, 1):

    S(x, alpha) = alpha                                        if x > alpha
                  alpha (2 floor((alpha + x)/(2 alpha) + zeta) - 1)   if -alpha <= x <= alpha
                  -alpha                                       if x < -alpha

Straight-through derivatives (Eq. 8-9), floor() treated as the identity:

    dS/dx     = 1[|x| <= alpha]
    dS/dalpha = 1 (x > alpha),  -1 (x < -alpha),  2 floor((alpha + x)/(2 alpha) + zeta) - (x + alpha)/alpha  (in range)

The bits come from ``algorithms.compress.binary_code``, the function the ``binarize`` operator
(``compress.Binarize``, the operator of the theory checks) encodes with; FedBAT's uplink is the
transform ``compress.fp32_layers(layer_binarize(...), layout, scope)``: ``binary_code`` per layer with
that layer's alpha (the transform's state), the tensors outside ``scope`` in fp32.
``binarize_ste`` writes S as a differentiable expression whose value is exactly Eq. 6-7 and whose
torch.func gradients are exactly Eq. 8-9 (detached bit c = 2b - 1, plus a zero-valued term
``1[|x|<=alpha] (t - t.detach())`` with ``t = x - alpha * (x/alpha).detach()``), so it runs under
``torch.func.grad`` and ``vmap``.

Step size (Eq. 10): alpha_l = alpha'_l exp(rho * (alpha_e)_l); the learnable parameter is alpha_e, whose
gradient is rho * alpha_l * dF/dalpha_l (chain rule; autograd does it).

Local training of client k with tau_k steps (Algorithm 1; tau_k = ``ctx.steps`` differs per client):

* s < floor(phi tau_k): full-precision warm-up, m <- m - eta dF_k(w_t + m)/dm (Eq. 12);
* s = floor(phi tau_k): alpha'_l = ||m_l||_1 / d_l and alpha_e = 0 per layer (Eq. 13), then
* s >= floor(phi tau_k): binarization-aware training, forward at w_t + S(m, alpha) with a fresh zeta on
  every forward pass, m and alpha_e stepped with the STE gradients (Eq. 14).

The switch is per client with tensor ops (s is a Python int, floor(phi tau_k) a tensor; ``torch.where``
selects the binarized or the full-precision update), so one vmapped loop serves clients with different
tau_k. Uplink (Alg. 1 line 23-24, Eq. 11): a fresh stochastic binarization of the final m with the final
alpha, one bit per binarized entry (all binarized layers' bits packed into one string:
8 ceil(d_bin/8) bits) plus one fp32 alpha per binarized layer, plus the fp32 entries that are not
binarized. The server (Eq. 11) adds sum_k p'_k alpha_k mbar_k, layer by layer, and the fp32 entries'
weighted mean: exactly FedAvg's rule on the decoded updates.

Choices the paper leaves open (see ``fedbat.md`` Sec. 1.6, 7), and what is done here:

* Binarized parameters: the paper is silent; the public code binarizes only Conv2d/Linear weights and
  trains/sends BatchNorm parameters in fp32. Default ``scope="weights"`` does that (``ParamLayout`` kind
  ``"weight"``; biases and norm parameters are fp32 in the uplink, their update is trained as m without
  binarization). ``scope="all"`` binarizes every tensor.
* Local optimizer: the experiment's optimizer (``ctx.optimizer``, the paper's plain SGD) with the
  experiment's learning rate ``ctx.lr`` (paper: 0.1) steps the concatenation [m, alpha_e], i.e. alpha_e
  gets the same step size as m, as in Eq. 14 and in the public code (one SGD optimizer for the update and
  alpha). During warm-up alpha_e gets a zero gradient and stays 0. Weight decay, when configured, acts
  on m and alpha_e (the public code's shared optimizer; every FedBAT run used weight decay 0).
* Uplink noise: zeta for the upload is drawn from ``ctx.rng`` before local training (the draw does not
  depend on m, so this is the same distribution; it keeps the sequential and vectorized executors equal).
  No noise is drawn where none is used (``phi=1``: no binarized step; ``uplink="fp32"``).
* If floor(phi tau_k) >= tau_k (phi = 1) there is no binarized step: Eq. 13 is applied to the final m
  (alpha_l = ||m_l||_1/d_l) for the upload. If alpha' = 0 (m = 0 at the switch, e.g. phi = 0), S(0, 0) := 0
  and every division by alpha is guarded.
* ``alpha_clamp=True``: the public code's clamp of alpha to [5e-4, 5e-2] (inside the graph, so alpha_e's
  gradient stops at a bound). Not in the paper; off by default.
* ``alpha_mode="inf"``: the theory variant of Sec. 4 / App. C.1: alpha_l = ||m_l||_inf at every forward
  pass and for the upload, not learned (rho unused), which makes S unbiased; with ``phi=0`` it is the
  analysed algorithm.
* ``uplink="fp32"``: send the latent m in fp32 instead of its binarization (an ablation; with ``phi=1``
  FedBAT is then FedAvg up to float rounding, w_t + m vs w: tested).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from .core import Algorithm, Message, diagnose, register
from .compress import SCOPES, Replay, binary_code, fp32_layers, get, scope_layout, split_layout
from .compress.layer_binarize import layer_binarize
from .core.hyper import BOOL, NONNEGATIVE, Range, choice, param

ALPHA_MODES = ("learned", "inf")
UPLINKS = ("binary", "fp32")


def _safe(a: torch.Tensor) -> torch.Tensor:
    return torch.where(a > 0, a, torch.ones_like(a))


def binarize_ste(x: torch.Tensor, alpha: torch.Tensor, zeta: torch.Tensor) -> torch.Tensor:
    """S(x, alpha) of Eq. 6-7 in value, with exactly Eq. 8 (d/dx) and Eq. 9 (d/dalpha) as gradients.

    ``alpha`` is a scalar (one layer) or broadcasts against ``x``; ``zeta`` ~ U(0,1) has x's shape.
    Value: alpha * c (c from ``binary_code``) + 1[|x|<=alpha] * (t - t.detach()) with
    t = x - alpha * (x/alpha).detach(); the second term is exactly 0, and its gradient is 1 w.r.t. x and
    -x/alpha w.r.t. alpha inside the range, which with c gives Eq. 9's 2b - 1 - x/alpha.
    """
    c = binary_code(x, alpha, zeta)
    inside = (x.detach().abs() <= alpha.detach()).to(x.dtype)
    ratio = (x / _safe(alpha)).detach()
    t = x - alpha * ratio
    return alpha * c + inside * (t - t.detach())


def _layer_l1_means(m: torch.Tensor, slices) -> torch.Tensor:
    """(||m_l||_1 / d_l)_l for the binarized layers (Eq. 13)."""
    if not slices:
        return m[..., :0]
    return torch.stack([m[..., s.start:s.stop].abs().mean(-1) for s in slices], dim=-1)


def _layer_inf_norms(m: torch.Tensor, slices) -> torch.Tensor:
    if not slices:
        return m[..., :0]
    return torch.stack([m[..., s.start:s.stop].abs().amax(-1) for s in slices], dim=-1)


@register
class FedBAT(Algorithm):
    name = "fedbat"
    ALPHA_BOUNDS: ClassVar[tuple[float, float]] = (5e-4, 5e-2)  # the public code's clamp

    @dataclass(frozen=True)
    class Hyper:
        rho: float = param(6.0, NONNEGATIVE)  # coefficient of the step-size exponent, Eq. 10 (Sec. 5.1: 6)
        phi: float = param(0.5, Range("[0, 1]"))  # local warm-up ratio (Sec. 5.1: 0.5)
        # public code: alpha clamped to [5e-4, 5e-2] (not in the paper)
        alpha_clamp: bool = param(False, BOOL)
        # "learned" (Eq. 10) | "inf" (theory variant, alpha = ||m_l||_inf)
        alpha_mode: str = param("learned", choice(*ALPHA_MODES))
        # "binary" (the paper) | "fp32" (latent m, an ablation)
        uplink: str = param("binary", choice(*UPLINKS))
        scope: str = param("weights", choice(*SCOPES))  # binarize conv/linear weights (public code) | "all"

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.bin_slices = split_layout(layout, hp.scope)[0]  # the binarized layers (the rest stay fp32)
        self._is_bin = {s.name for s in self.bin_slices}
        self.d_bin = sum(s.numel for s in self.bin_slices)
        self.uplink = (get("identity") if hp.uplink == "fp32"
                       else fp32_layers(layer_binarize(scope_layout(layout, hp.scope)), layout, hp.scope))

    # -- the step size --
    def step_size(self, m: torch.Tensor, alpha_e: torch.Tensor, alpha0: torch.Tensor) -> torch.Tensor:
        """Per-layer alpha: Eq. 10 (optionally clamped), or ||m_l||_inf (detached) for alpha_mode="inf"."""
        if self.hp.alpha_mode == "inf":
            return _layer_inf_norms(m, self.bin_slices).detach()
        alpha = alpha0 * torch.exp(self.hp.rho * alpha_e)
        if self.hp.alpha_clamp:
            alpha = alpha.clamp(*self.ALPHA_BOUNDS)
        return alpha

    def initial_step_size(self, m: torch.Tensor) -> torch.Tensor:
        """alpha' of Eq. 13 (per layer ||m_l||_1/d_l), or ||m_l||_inf for alpha_mode="inf"."""
        if self.hp.alpha_mode == "inf":
            return _layer_inf_norms(m, self.bin_slices)
        return _layer_l1_means(m, self.bin_slices)

    def forward_update(self, m, alpha, binarize, zeta) -> torch.Tensor:
        """The update used in the forward pass: S(m_l, alpha_l) on binarized layers where ``binarize``
        (a bool tensor) holds, m itself elsewhere (fp32 layers, and warm-up)."""
        pieces, li, off = [], 0, 0
        for s in self.layout.slices:
            x = m[..., s.start:s.stop]
            if s.name in self._is_bin:
                sb = binarize_ste(x, alpha[..., li], zeta[..., off:off + s.numel])
                x = torch.where(binarize, sb, x)
                li += 1
                off += s.numel
            pieces.append(x)
        return torch.cat(pieces, dim=-1)

    # -- messages --
    def encode(self, m: torch.Tensor, alpha: torch.Tensor, zeta: torch.Tensor) -> Message:
        """The uplink: packed bits of S(m, alpha) with noise ``zeta`` (d_bin uniforms drawn before local
        training), the per-layer alphas (fp32) and the fp32 entries (or m in fp32 for ``uplink="fp32"``)."""
        if self.hp.uplink == "fp32":
            return self.uplink.encode(m)[0]
        return self.uplink.encode(m, alpha, Replay(zeta))[0]

    def decode(self, message: Message) -> torch.Tensor:
        """The update alpha_l mbar_l on binarized layers, fp32 values elsewhere (one client)."""
        return self.uplink.decode(message)

    # -- the contract --
    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)
        d = w0.shape[-1]
        n_layers = len(self.bin_slices)
        opt = ctx.optimizer
        # upload noise first: both executors then draw every zeta from the same counter position
        binary_up = self.hp.uplink == "binary"
        zeta_up = ctx.rng.uniform((self.d_bin,)).to(w0) if binary_up else None
        draws = self.hp.phi < 1  # phi = 1: no binarized step, no noise (ctx.rng then untouched, as FedAvg)
        s0 = torch.floor(self.hp.phi * ctx.steps.to(torch.float64)).to(torch.int64)  # floor(phi tau_k)

        def objective(args, model_fn, batch, alpha0, binarize, zeta):
            m, alpha_e = args
            alpha = self.step_size(m, alpha_e, alpha0)
            update = self.forward_update(m, alpha, binarize, zeta)
            return ctx.criterion(model_fn(w0 + update, batch.x), batch)

        def step(carry, batch, s):
            m, alpha_e, alpha0, state = carry
            start = s0 == s  # Eq. 13 at s = floor(phi tau_k)
            alpha0 = torch.where(start, self.initial_step_size(m).detach(), alpha0)
            alpha_e = torch.where(start, torch.zeros_like(alpha_e), alpha_e)
            binarize = s0 <= s  # Eq. 14 from s = floor(phi tau_k) on, Eq. 12 before
            # fresh noise on every forward pass
            zeta = ctx.rng.uniform((self.d_bin,)).to(m) if draws else torch.zeros_like(m[..., :self.d_bin])

            def f(args, model_fn, b):
                return objective(args, model_fn, b, alpha0, binarize, zeta)

            _, (g_m, g_e) = ctx.value_and_grad(f, (m, alpha_e), batch)
            p, state = opt.step(torch.cat([m, alpha_e], dim=-1), torch.cat([g_m, g_e], dim=-1), state, ctx.lr)
            return p[..., :d], p[..., d:], alpha0, state

        m = torch.zeros_like(w0)
        alpha_e = torch.zeros(n_layers, dtype=w0.dtype, device=w0.device)
        alpha0 = torch.zeros(n_layers, dtype=w0.dtype, device=w0.device)
        carry = (m, alpha_e, alpha0, opt.init(torch.cat([m, alpha_e], dim=-1)))
        m, alpha_e, alpha0, _ = ctx.loop(step, carry)
        if n_layers:  # no binarized step (phi = 1): Eq. 13 on the final m
            never = s0 >= ctx.steps
            alpha0 = torch.where(never, self.initial_step_size(m), alpha0)
            alpha_e = torch.where(never, torch.zeros_like(alpha_e), alpha_e)
        alpha = self.step_size(m, alpha_e, alpha0).detach()
        diagnose(ctx, "latent_update", m)  # for observers: the m and alpha the upload binarizes
        diagnose(ctx, "step_size", alpha)
        return self.encode(m.detach(), alpha, zeta_up), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        updates = torch.func.vmap(self.decode)(uplinks)
        return {**server_state, "params": server_state["params"] + self.weighted_mean(updates, weights)}
