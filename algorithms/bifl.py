"""BiFL (Yang, Zhang & Yang 2021, "Communication-Efficient Federated Learning with Binary Neural
Networks") as FedBAT runs it (FedBAT App. B.1, Table 5): clients train a binary neural network (BNN)
locally and upload the binarized weights (``bifl``, BiFL's "Bi-UpOnly") or their full-precision latent
weights (``bifl_full``, "BiFL-Full").

Local training (BinaryConnect / BNN, Courbariaux et al. 2015, Hubara et al. 2016): the client keeps
real-valued latent weights w, starting from the broadcast global model; the forward pass uses
w_b = sign(w) in {-1, +1} (sign(0) = +1) on the binarized tensors, and the straight-through estimator
passes the gradient to w where |w| <= ``clip`` (Hubara et al.'s 1[|w| <= 1]):

    dF/dw = dF/dw_b * 1[|w| <= clip]

``binary_weights_ste`` writes this as ``sign(w).detach() + 1[|w|<=clip] (w - w.detach())`` (value exactly
sign(w)). The experiment's optimizer and learning rate step w. Activations stay real-valued (FedBAT
describes BiFL as binarizing the weights).

Uplink: ``bifl``: one bit per binarized weight (packed, 8 ceil(d_bin/8) bits) plus the fp32 parameters
that are not binarized (``compress.fp32_layers`` around the ``sign`` operator with alpha = 1); ``bifl_full``: every latent weight in fp32 (32 d bits). The server sets the global
model to the weighted mean of the uploaded weights (not updates): for ``bifl`` the mean of the +-1
weights, which becomes the clients' latent starting point in the next round. The evaluated global
model is the BNN: ``global_params`` returns sign(w) on the binarized tensors.

Choices the papers leave open, and what is done here: binarized tensors are conv/linear weights
(``scope="weights"``; BatchNorm affine parameters and biases are trained and sent in fp32); no weight
scaling factor (BNN's +-1 weights; BatchNorm follows every conv of the FedBAT models); latent weights
are not clipped after the step; BiFL's ML-based parameter update (BiFL-BiML) is not implemented.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .core import Algorithm, Message, configure, register
from .compress import SCOPES, fp32_layers, get, split_layout
from .core.hyper import BOOL, POSITIVE, choice, param


def sign_pm(w: torch.Tensor) -> torch.Tensor:
    """sign with sign(0) = +1."""
    return torch.where(w >= 0, torch.ones_like(w), -torch.ones_like(w))


def binary_weights_ste(w: torch.Tensor, clip: float) -> torch.Tensor:
    """sign(w) in value; gradient 1[|w| <= clip] (straight-through estimator)."""
    inside = (w.detach().abs() <= clip).to(w.dtype)
    return sign_pm(w.detach()) + inside * (w - w.detach())


@register
class BiFL(Algorithm):
    name = "bifl"

    @dataclass(frozen=True)
    class Hyper:
        full: bool = param(False, BOOL)  # True: BiFL-Full, upload the fp32 latent weights
        clip: float = param(1.0, POSITIVE)  # STE passes the gradient where |w| <= clip (Hubara et al. 2016)
        scope: str = param("weights", choice(*SCOPES))  # binarize conv/linear weights | "all"

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.bin_slices, self.fp_slices = split_layout(layout, hp.scope)
        self._is_bin = {s.name for s in self.bin_slices}
        # the uplink: sign(w) (+-1, sign(0) = +1) on the binarized tensors, fp32 elsewhere; or all fp32
        self.uplink = (get("identity") if hp.full
                       else fp32_layers(get("sign", alpha=1.0), layout, hp.scope))

    def binarized(self, w: torch.Tensor, ste: bool = False) -> torch.Tensor:
        """The BNN's weights: sign(w) on binarized tensors (with the STE gradient when ``ste``)."""
        pieces = []
        for s in self.layout.slices:
            x = w[..., s.start:s.stop]
            if s.name in self._is_bin:
                x = binary_weights_ste(x, float(self.hp.clip)) if ste else sign_pm(x)
            pieces.append(x)
        return torch.cat(pieces, dim=-1)

    def global_params(self, server_state):
        return self.binarized(server_state["params"])

    def encode(self, w: torch.Tensor) -> Message:
        return self.uplink.encode(w)[0]

    def decode(self, message: Message) -> torch.Tensor:
        """The uploaded weights (+-1 on binarized tensors for ``bifl``), one client."""
        return self.uplink.decode(message)

    def local_update(self, ctx, downlink, client_state):
        w0 = self.receive(downlink, client_state)

        def bnn_loss(w, model_fn, batch):
            return ctx.criterion(model_fn(self.binarized(w, ste=True), batch.x), batch)

        def grad_fn(p, batch, s):
            return ctx.value_and_grad(bnn_loss, p, batch)

        w = self.sgd_loop(ctx, w0, grad_fn)
        return self.encode(w.detach()), client_state

    def aggregate(self, server_state, uplinks, weights, info):
        ws = torch.func.vmap(self.decode)(uplinks)
        return {**server_state, "params": self.weighted_mean(ws, weights)}


BiFLFull = register(configure(BiFL, "bifl_full", "BiFL-Full: the fp32 latent weights are uploaded.", full=True))
