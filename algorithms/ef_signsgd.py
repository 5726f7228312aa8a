"""EF-SignSGD (Karimireddy et al. 2019) in FedBAT's federated form (FedBAT paper, Section 1; App. A.2).

"EF-SignSGD adds the binarization errors from the previous round onto the current model updates before
conducting another binarization", with the step size alpha = ||m||_1 / d. Client k keeps a residual e_k
(zero at first) across rounds (per-client state in the engine):

    p = m_{t+1}^k + e_k,     C(p) = (||p||_1 / d) sign(p),     e_k <- p - C(p)

and sends C(p): one bit per entry and the fp32 scale; the server applies sum_k p'_k C(p_k) (Eq. 3 with
the sent scale). Uplink: ``compress.error_feedback`` around ``compress.get("scaled_sign")``
(``error_feedback = True`` in ``CompressedUpdate``), whose state is the client state ``residual``. With ``per_layer=True`` (default) p, the scale and e are per
compressed layer; fp32 parameters (``scope="weights"``: BatchNorm, biases) have no residual.

Open in the paper: whether the memory is per client (clients participate sporadically; here it is per
client and persists between a client's participations, as in Karimireddy et al.'s worker-side EF) and
whether alpha is per layer or per model (``per_layer``).
"""
from __future__ import annotations

from dataclasses import dataclass

from .compress import get
from .core import register
from .compress.compressed_update import SCOPE, CompressedUpdate
from .core.hyper import BOOL, param


@register
class EFSignSGD(CompressedUpdate):
    name = "ef_signsgd"
    error_feedback = True

    @dataclass(frozen=True)
    class Hyper:
        scope: str = param("weights", SCOPE)  # compress conv/linear weights only ("all": every parameter)
        per_layer: bool = param(True, BOOL)  # the scale ||p||_1/d and the residual per layer

    def make_operator(self):
        return get("scaled_sign")
