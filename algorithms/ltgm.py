"""LTGM, "lossy transformed global model" (the LFL paper's name, Amiri et al., arXiv 2006.10672v2, Sec. 4,
for the scheme of its ref. [41], Caldas et al.): the PS applies a Walsh-Hadamard-based random linear
transform to the global model, quantizes the result with LFL's Q(., q1), and the devices invert the
transform and train from the recovered model; the uplink is LB's.

    H_n: the n x n Walsh-Hadamard matrix, n = 2^ceil(log2 d) (theta zero-padded to n entries)
    D_t: a diagonal of random signs, redrawn every round from a seed that is sent with the message
    T_t = H_n D_t / sqrt(n)   (orthonormal, so T_t^{-1} = T_t^T = D_t H_n / sqrt(n))
    PS broadcasts   (seed_t, Q(T_t pad(theta(t)), q1))
    devices train from theta_tilde(t) = first d entries of T_t^T Q(T_t pad(theta(t)), q1)
    device m sends  Q(Delta_m(t) + delta_m(t), q2) with error feedback, Delta_m relative to theta_tilde(t)
    theta(t+1)    = theta(t) + sum_m (B_m/B) Q(Delta_m(t) + delta_m(t), q2)

What the paper gives: "a linear transform to project the global model", "Walsh-Hadamard transform", later
"the random linear transform", Appendix A's quantizer at the PS, the devices apply the inverse; q1 = 50
(MNIST), 1000 (CIFAR-10). What is chosen here (lfl.md, Sec. 2 and pitfall 13): the randomised Hadamard
H D / sqrt(n) on the whole zero-padded vector, one (x_max, x_min) pair for the whole transformed vector, a
fresh sign diagonal each round (the 64-bit seed travels in the message and is counted), no error
feedback at the PS, the PS keeps and updates its exact theta(t) (Caldas et al.'s convention), the
evaluated model is theta(t). The transform itself is computed by the fast Walsh-Hadamard transform.

Bits per device and round: ``64 + 64 + 8 ceil(n/8) + 8 ceil(n ceil(log2(q1+1))/8)`` for n padded entries,
where the paper's comparison implies 64 + d' (1 + log2(q1+1)). q1 = 50: 7 bits per padded entry (ideal
6.67); q1 = 1000: 11 (ideal 10.97). For LFL's MNIST CNN (d = 130,890, n = 131,072) that is 4.71x fewer
bits than LB's 33 d (ideal 4.95x); for the CIFAR-10 CNN (d = 550,570, n = 1,048,576: the padding nearly
doubles the length) 1.58x (ideal, without padding, 3.01x). q1 = None sends the transformed model in fp32:
LTGM(q1=None) is LB's dynamics up to float rounding of the transform (tested).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .core import CounterRng, Message, register
from .compress.downlink import LEVEL, downlink_key, quantizer, round_seed
from .core.hyper import param
from .lb import LB


def fwht(x: torch.Tensor) -> torch.Tensor:
    """Unnormalised fast Walsh-Hadamard transform H_n x along the last axis (n a power of two)."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"fwht needs a power-of-two length, got {n}")
    lead = x.shape[:-1]
    h = 1
    while h < n:
        y = x.reshape(*lead, n // (2 * h), 2, h)
        x = torch.stack((y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]), dim=-2).reshape(*lead, n)
        h *= 2
    return x


def padded_length(d: int) -> int:
    """n = 2^ceil(log2 d), the length of the transformed vector."""
    return 1 << max(d - 1, 0).bit_length()


@register
class LTGM(LB):
    """LTGM ([41] in the LFL paper): randomised-Hadamard-transformed, quantized global model."""

    name = "ltgm"

    @dataclass(frozen=True)
    class Hyper:
        q1: int | None = param(50, LEVEL)  # downlink level: 50 on MNIST, 1000 on CIFAR-10 (Sec. 4)
        # uplink level: 2 on MNIST ("for all the approaches where the devices quantize")
        q2: int | None = param(2, LEVEL)

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.downlink = quantizer(hp.q1)
        self.n = padded_length(layout.size)

    def _signs(self, rng: CounterRng, device) -> torch.Tensor:
        """The random sign diagonal D_t: the first draw of the round's stream (both ends)."""
        return torch.where(rng.uniform((self.n,)).to(device) < 0.5, -1.0, 1.0)

    def transform(self, x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """T x = H D pad(x) / sqrt(n)."""
        x = torch.cat([x.to(torch.float32), x.new_zeros(self.n - x.shape[-1], dtype=torch.float32)])
        return fwht(signs * x) / math.sqrt(self.n)

    def inverse(self, y: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
        """T^T y = D H y / sqrt(n), cut back to the d model entries."""
        return (signs * fwht(y) / math.sqrt(self.n))[: self.layout.size]

    def init(self, params):
        return {"params": params.clone(), "key": downlink_key(params, self.name),
                "round": torch.zeros((), dtype=torch.int64, device=params.device)}

    def broadcast(self, server_state):
        seed = round_seed(server_state["key"], server_state["round"])
        rng = CounterRng(seed)
        params = server_state["params"]
        q, _ = self.downlink.encode(self.transform(params, self._signs(rng, params.device)), (), rng)
        return Message({**q.parts, "seed": seed}, q.meta)

    def receive(self, downlink, client_state):
        seed = downlink["seed"]
        signs = self._signs(CounterRng(seed), seed.device)
        inner = Message({k: v for k, v in downlink.parts.items() if k != "seed"}, downlink.meta)
        return self.inverse(self.downlink.decode(inner), signs)

    def aggregate(self, server_state, uplinks, weights, info):
        return {**server_state, "params": server_state["params"] + self.uplink_mean(uplinks, weights),
                "round": server_state["round"] + 1}
