"""BHerd-SCAFFOLD (Luo et al., arXiv 2403.16557v1, Fig. 2b): BHerd's gradient selection inside SCAFFOLD
(Karimireddy et al., 2020, Alg. 1, control variates option II).

The paper plots BHerd-SCAFFOLD (Sec. 2, Fig. 2b) but never says how the two are combined (``bherd.md``
Sec. 2 item 6). This module implements the reading that ``bherd.md`` Sec. 6.1 item 6 suggests, marked as an
assumption; every choice below is ours, not the paper's:

1. **What is herded: SCAFFOLD's actual steps.** The client runs SCAFFOLD's corrected local SGD from x
   (Alg. 1 line 10, ``scaffold.py``) and stores every step it takes,

       z_l = y_l - y_{l+1} = eta_l (g_i(y_l) - c_i + c),       l = 1..K_i

   i.e. the *corrected* directions g - c_i + c, not the raw gradients g. The trajectory is SCAFFOLD's,
   unchanged by the selection (as in BHerd, Eq. 3: the selection happens afterwards).
2. **Selection and rescaling: BHerd's.** Greedy herding (Algorithm 2) on the centered z_l keeps
   k_i = round(alpha K_i) of them (half up, at least 1); their sum is rescaled by 1/alpha (Eq. 7;
   ``rescale="count"``: K_i / k_i), giving u_i, the herded estimate of x - y_{K_i}. ``selection`` =
   ``random`` / ``closest`` gives the same controls as ``bherd``. Shared code: ``bherd.HerdedSteps``.
3. **The client's model is the herded endpoint** y_i^herd = x - u_i, and from there on everything is
   SCAFFOLD's code unchanged (``Scaffold.local_update`` and ``Scaffold.aggregate``; this class only
   replaces the local solver ``sgd_loop``):

       Delta y_i = y_i^herd - x = -u_i
       c_i+ = c_i - c + (x - y_i^herd) / (K_i eta_l) = c_i - c + u_i / (K_i eta_l)      (option II)
       x <- x + eta_g sum_{i in S} p_i Delta y_i,    c <- c + (1/N) sum_{i in S} (c_i+ - c_i)

   so the control variate, like the model update, is built from the herded steps: with k_i = alpha K_i
   exactly, c_i+ = (1/k_i) sum_{l kept} g_i(y_l), the mean of the *kept raw* gradients (the correction
   -c_i + c cancels), where SCAFFOLD's c_i+ is the mean of all K_i. The alternative (c_i+ from the full
   trajectory y_{K_i}, the model update alone herded) is not implemented; the two agree at alpha = 1.
4. **Messages: SCAFFOLD's.** Down: x and c; up: (Delta y_i, Delta c_i); 2 fp32 vectors each way, as
   SCAFFOLD (herding needs K_i x d memory on the client, no extra communication).

Local optimizer: SCAFFOLD's rule and ``convention`` (``scaffold.py``), unchanged. The stored steps are the steps
the optimizer applied (under momentum, eta_l times its buffer; with ``convention="niid_bench"``, including the
correction applied after it), and under heavy-ball momentum K_i in item 3 is the momentum's effective number of
steps ||a_i||_1; Adam is refused with ``convention="exact"`` (``Scaffold.check_optimizer``).

With alpha = 1 every step is kept, u_i = x - y_{K_i}, and BHerd-SCAFFOLD is SCAFFOLD exactly (tested, also
under momentum).
Hyperparameters: BHerd's ``alpha``, ``selection``, ``rescale`` and SCAFFOLD's ``eta_g``, ``weighting``
(defaults: BHerd's alpha = 0.5 with herding, SCAFFOLD's eta_g = 1 with uniform weights).
"""
from __future__ import annotations

from dataclasses import dataclass

from .core import register
from .bherd import HerdedSteps, Selection
from .scaffold import Scaffold


@register
class BHerdScaffold(HerdedSteps, Scaffold):
    name = "bherd_scaffold"

    @dataclass(frozen=True)
    class Hyper(Selection, Scaffold.Hyper):
        """BHerd's selection and SCAFFOLD's server hyperparameters, with their declared constraints."""

    def sgd_loop(self, ctx, params, grad_fn=None):
        """BHerd as SCAFFOLD's local solver: the herded endpoint x - u (choice 3 of the docstring).

        ``Scaffold.local_update`` calls this with its corrected gradient ``grad_fn``; the steps of that
        trajectory are stored, selected and rescaled by ``HerdedSteps.herded_update``.
        """
        return params - self.herded_update(ctx, params, grad_fn)
