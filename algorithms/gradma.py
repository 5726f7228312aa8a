"""GradMA (Luo et al., CVPR 2023) and its ablations GradMA-W (worker side only) and GradMA-S (server side
only). Summary: ../shared/papers/gradma.md; equations below are the paper's.

Worker_Update (Alg. 2), GradMA and GradMA-W. Worker i starts from x_0 = x_t with x_{-1} = x_t^(i), its
own local model at the end of its previous participation (x_0 at first: workers are stateful); at each
local step tau, on the step's minibatch,

    g_tau = grad f_i(x_tau),   G_tau = [grad f_i(x_{tau-1}), grad f_i(x_t), x_tau - x_t]     (Alg. 2, line 4)
    g~_tau = QP_l(g_tau, G_tau) = g_tau + G_tau z*,  z* >= 0                                (Eqs. 2-5)
    x_{tau+1} = x_tau - eta_l g~_tau                                                         (line 6)

and sends d^(i) = x_t - x_I. QP_l projects g onto {y : <y, G[j]> >= 0, j = 1..3}; it is solved exactly
and vmap-safely by ``algorithms.core.qp.project_small`` (all 2^3 active sets). The three gradients are taken
on the same minibatch (3 gradient evaluations per step, as the public code does); only the gradient at
x_tau updates BatchNorm statistics and the reported local loss.

Server_Update (Alg. 3) with mem_red (Alg. 4), GradMA and GradMA-S:

    d_{t+1} = sum_{i in S_t} p_i d^(i),   m_{t+1} = beta1 m~_t + d_{t+1}                       (Eq. 6)
    D[i] <- beta2 D[i] + d^(i) (i in S_t, already stored); d^(i) (newly stored); beta2 D[i] (i not in S_t)  (Eq. 9)
    m~_{t+1} = QP_g(m_{t+1}, D),   x_{t+1} = x_t - eta_g m~_{t+1}                               (Eq. 10)

D holds at most m worker accumulators (m = N by default). mem_red (Alg. 4): a sampled worker without a
slot takes a free one, or, when the memory is full, evicts the stored worker that is not sampled this
round with the smallest participation counter c (ties: the earliest stored, as the public code), whose
counter is reset to 0; every sampled worker's counter is incremented. QP_g is solved in ``aggregate`` by
``algorithms.core.qp`` (Lawson-Hanson active set on the float64 Gram matrix, exact; checked against scipy's
NNLS in the tests; a segment whose Gram form it cannot resolve, such as a bias feeding BatchNorm under
``per_layer``, is solved again in square-root form). m = 0 turns the memory off: m~ = m, i.e. FedAvgM
(Sec. 6.2). ``gram`` says how the server holds D and the Gram matrix G = D D^T of QP_g's dual (4):

* ``"recompute"`` (the default up to 0.4.0: the numbers of every run before 0.5.0): D as m float32 rows,
  rewritten by beta2 every round, and G recomputed from all of D every round (m x m products of length d: 75% of
  the server's CPU time at Table 1's c3, m = 100, d = 178,710, 0.21 of 0.28 s a round);
* ``"incremental"`` (the default since 0.5.0, issue 45): D[j] = scale[j] U[j], U float64 (2x the memory of D), so
  beta2 multiplies m scalars;
  only the S rows of the sampled workers change, and only their rows and columns of G = (scale scale^T) *
  U U^T are recomputed (S x m products). The same QP on the same D up to rounding: D is no longer rounded to
  float32 every round, G is summed in another order (``tests/test_qp_server.py``; the numbers move by float
  rounding, measured in the commit that made it).

GradMA-W (Alg. 7): Worker_Update, then x_{t+1} = x_t - eta_g d_{t+1} (no momentum, no memory).
GradMA-S (Alg. 8): plain local SGD, then Server_Update. Both are configurations of ``GradMA``
(``registry.configure``), not subclasses: GradMA-W fixes m = 0 and beta1 = 0 (Alg. 3 with no memory and no
momentum is Alg. 7's server step, to the bit), GradMA-S fixes the worker QP off (``Hyper.worker_qp``).
Fixed values are not hyperparameters of the variant (``gradma_w`` takes no beta1, as Alg. 7 has none).

Where the public code differs from the paper (gradma.md, Sec. 7), the paper is the default and the
code's behaviour is an option:

* ``weighting``: ``"uniform"`` p_i = 1/S (paper, Alg. 3 line 1) | ``"samples"`` p_i = n_i / sum n_j (code).
* ``per_layer``: False, one QP on the whole vector (paper) | True, one QP per parameter tensor (code).
* ``prev_model``: ``"local"``, x_{-1} = the worker's last local model (paper, and the code's GradMA_W)
  | ``"global"``, x_{-1} = x_t every round (the code's GradMA folder; workers are then stateless).
* ``rho_l``, ``rho_g``: margins of the code's QP, <p~, M_j> >= rho ||p|| ||M_j||; 0 is the paper's QP.
* QP failures: the code silently falls back to the unprojected vector. Here a solve whose KKT residual
  exceeds ``qp_tol`` is counted (worker side: a uint8 count per client in the uplink, 8 bits, since the
  server must learn it; server side: in the server state as ``qp_l_failures`` / ``qp_g_failures``) and,
  with ``on_qp_failure="raise"`` (default), stops the run with ``QPFailure``. Non-finite inputs give
  non-finite parameters (the engine reports divergence), never a silent fallback.

Weight decay (the experiment's ``weight_decay`` wd, 0 in the paper's and every committed run), GradMA and
GradMA-W: as the public code's trainer adds it, wd w to the gradient of every non-bias tensor (a tensor named
``bias`` keeps its gradient; BatchNorm's scale is decayed), in all three gradients of G_tau and in g_tau, each at
its own point (x_{tau-1}, x_t, x_tau), before QP_l; the step is then x_{tau+1} = x_tau - eta_l g~_tau with nothing
added. GradMA-S: the local optimizer's weight decay (torch.optim.SGD's, on every entry).

Local optimizer. GradMA-S: any (its local rule is plain local training). GradMA and GradMA-W: plain SGD
only (weight decay allowed, see above): QP_l makes the applied step -eta_l g~ satisfy the three
constraints of Alg. 2 (Eqs. 2-5); under momentum or Adam the applied step is the optimizer's buffer or
normalised moment, which the projection does not constrain, and the paper and its code use plain SGD.
``check_optimizer`` refuses them before any training.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch

from .core import Algorithm, Message, configure, diagnose, optim, qp, register
from .core.hyper import BOOL, MOMENTUM, NONE, NONNEGATIVE, POSITIVE, WEIGHTING, Either, Range, choice, param

PREV_MODELS = ("local", "global")
ON_FAILURE = ("raise", "count")
GRAMS = ("recompute", "incremental")
MEMORY = Either(Range("[0, inf)", integer=True), NONE)  # m: a memory size, None = N


class QPFailure(RuntimeError):
    """A GradMA QP whose KKT residual exceeded its tolerance."""


@register
class GradMA(Algorithm):
    """GradMA (Alg. 1); GradMA-W and GradMA-S are its configurations (below)."""

    name = "gradma"

    @dataclass(frozen=True)
    class Hyper:
        worker_qp: ClassVar[bool] = True  # Worker_Update (Alg. 2) with QP_l; gradma_s fixes it off (Alg. 8)
        eta_g: float = param(1.0, POSITIVE)  # global learning rate (grid {0.1, 1.0, 10.0}; code README 1.0)
        beta1: float = param(0.5, MOMENTUM)  # momentum on m~ (grid {0.1, 0.5, 0.9}; code README 0.5)
        beta2: float = param(0.5, MOMENTUM)  # decay of the memory D (grid {0.1, 0.5, 0.9}; code README 0.5)
        m: int | None = param(None, MEMORY)  # memory size; None = N (the paper's m = 100 = N); 0 = memory off
        weighting: str = param("uniform", WEIGHTING)
        prev_model: str = param("local", choice(*PREV_MODELS))
        per_layer: bool = param(False, BOOL)
        rho_l: float = param(0.0, NONNEGATIVE)
        rho_g: float = param(0.0, NONNEGATIVE)
        qp_tol: float = param(1e-6, POSITIVE)  # KKT residual of the normalised dual accepted as a solution
        on_qp_failure: str = param("raise", choice(*ON_FAILURE))
        gram: str = param("incremental", choice(*GRAMS))  # QP_g's Gram matrix of D (see the module docstring)

    def __init__(self, hp, layout, num_clients):
        super().__init__(hp, layout, num_clients)
        self.segments = [(s.start, s.stop) for s in layout.slices] if hp.per_layer else None
        m = num_clients if hp.m is None else hp.m
        if m > num_clients:
            raise ValueError(f"{self.name}: memory size m={m} exceeds the number of workers N={num_clients}")
        self.memory_size = m
        # Server_Update (Alg. 3); with m = 0 and beta1 = 0 it is x_{t+1} = x_t - eta_g d_{t+1} (Alg. 7's server)
        self.server_update = m > 0 or hp.beta1 != 0

    @classmethod
    def check_optimizer(cls, hp, optimizer):
        if hp.worker_qp and optim.heavy_ball(optimizer) != 0.0:
            raise optim.refuse(cls.name, optimizer, "the worker QP_l (Alg. 2) constrains the applied step "
                               "-eta_l g~ of plain SGD; a momentum or Adam step is not constrained by it",
                               "Use optimizer 'sgd' with momentum 0, or gradma_s (no worker QP)")

    # -- server --
    def init(self, params):
        st = {"params": params.clone()}
        if self.hp.worker_qp:
            st["qp_l_failures"] = torch.zeros((), dtype=torch.int64)
        if self.server_update:
            st["momentum"] = torch.zeros_like(params)
            st["qp_g_failures"] = torch.zeros((), dtype=torch.int64)
            st["qp_g_active"] = torch.zeros((), dtype=torch.int64)  # positive dual variables, last round
            st["qp_g_correction"] = torch.zeros(())  # ||m~ - m||, last round
            m, dev = self.memory_size, params.device
            if m > 0:
                if self.hp.gram == "incremental":  # D[j] = scale[j] U[j]; H = U U^T per segment
                    L = 1 if self.segments is None else len(self.segments)
                    st["U"] = torch.zeros(m, params.numel(), dtype=torch.float64, device=dev)
                    st["scale"] = torch.zeros(m, dtype=torch.float64, device=dev)
                    st["H"] = torch.zeros(L, m, m, dtype=torch.float64, device=dev)
                else:
                    st["D"] = torch.zeros(m, params.numel(), dtype=params.dtype, device=dev)
                st["slot_id"] = torch.full((m,), -1, dtype=torch.int64)
                st["slot_stamp"] = torch.zeros(m, dtype=torch.int64)
                st["counter"] = torch.zeros(self.num_clients, dtype=torch.int64)
                st["next_stamp"] = torch.zeros((), dtype=torch.int64)
        return st

    def aggregate(self, server_state, uplinks, weights, info):
        hp = self.hp
        st = dict(server_state)
        if hp.worker_qp:
            fails = int(uplinks["qp_fail"].to(torch.int64).sum())
            st["qp_l_failures"] = st["qp_l_failures"] + fails
            if fails and hp.on_qp_failure == "raise":
                raise QPFailure(f"{self.name}: the worker QP_l failed (KKT residual > qp_tol={hp.qp_tol}) in "
                                f"{fails} local steps of round {info.round + 1}")
        d_i = uplinks["d"]
        d = self.weighted_mean(d_i, self.client_weights(weights, hp.weighting))
        if not self.server_update:
            st["params"] = st["params"] - hp.eta_g * d
            return st
        m_vec = hp.beta1 * st["momentum"] + d
        if self.memory_size > 0:
            rows = self._mem_red(st, info)  # the slot of each sampled worker; st's bookkeeping updated
            if hp.gram == "incremental":
                st = self._memory_rows(st, d_i, rows)
                m_tilde, qinfo = qp.project_rows(m_vec, st["U"], st["scale"], st["H"], self.segments, hp.rho_g,
                                                 hp.qp_tol)
            else:
                st = self._memory_dense(st, d_i, rows)
                occupied = (st["slot_id"] >= 0).nonzero().flatten()
                D = st["D"] if len(occupied) == self.memory_size else st["D"].index_select(
                    0, occupied.to(st["D"].device))  # no copy once the memory is full
                m_tilde, qinfo = qp.project_large(m_vec, D, self.segments, hp.rho_g, hp.qp_tol)
            st["qp_g_failures"] = st["qp_g_failures"] + qinfo["failed"]
            st["qp_g_active"] = torch.tensor(qinfo["active"])
            st["qp_g_correction"] = torch.linalg.vector_norm(m_tilde - m_vec).detach().cpu()
            if qinfo["failed"] and hp.on_qp_failure == "raise":
                raise QPFailure(f"{self.name}: the server QP_g failed in round {info.round + 1} "
                                f"(KKT residual {qinfo['residual']:.3g} > qp_tol={hp.qp_tol})")
        else:
            m_tilde = m_vec
        st["momentum"] = m_tilde
        st["params"] = st["params"] - hp.eta_g * m_tilde
        return st

    def _mem_red(self, st: dict, info) -> list[tuple[int, bool]]:
        """mem_red (Alg. 4) for the sampled workers: sets st's slot bookkeeping (new tensors) and returns, per
        sampled worker in order, (its slot, whether the slot was (re)filled this round: its row starts at 0)."""
        m = self.memory_size
        ids = [int(i) for i in info.client_ids.tolist()]
        if len(ids) > m:
            raise ValueError(f"{self.name}: memory size m={m} must be >= the sampled workers S={len(ids)} "
                             "(Alg. 4 needs S <= m)")
        slot_id, stamp = st["slot_id"].tolist(), st["slot_stamp"].tolist()
        count = st["counter"].tolist()
        next_stamp = int(st["next_stamp"])
        sampled = set(ids)
        slot_of = {c: s for s, c in enumerate(slot_id) if c >= 0}
        fresh = set()
        for i in ids:
            if i in slot_of:
                count[i] += 1
                continue
            free = [s for s in range(m) if slot_id[s] < 0]
            if not free:
                # evict the non-sampled stored worker with the smallest counter (ties: earliest stored)
                _, _, s_out, c_out = min((count[c], stamp[s], s, c) for c, s in slot_of.items() if c not in sampled)
                count[c_out] = 0
                del slot_of[c_out]
                slot_id[s_out] = -1
                free = [s_out]
            s = free[0]
            slot_id[s], stamp[s] = i, next_stamp
            next_stamp += 1
            slot_of[i] = s
            count[i] += 1
            fresh.add(s)
        st.update(slot_id=torch.tensor(slot_id, dtype=torch.int64), slot_stamp=torch.tensor(stamp, dtype=torch.int64),
                  counter=torch.tensor(count, dtype=torch.int64), next_stamp=torch.tensor(next_stamp))
        return [(slot_of[i], slot_of[i] in fresh) for i in ids]

    def _memory_dense(self, st: dict, d_i: torch.Tensor, rows: list) -> dict:
        """The D update of Alg. 3 (lines 2-8) on D as m float32 rows: D <- beta2 D, then D[j] <- d^(j) for
        a slot filled this round, D[j] + d^(j) for the other sampled workers (``gram="recompute"``)."""
        D = self.hp.beta2 * st["D"]
        dev = D.device
        fresh = [s for s, new in rows if new]
        if fresh:
            D.index_fill_(0, torch.tensor(fresh, device=dev), 0.0)
        D.index_add_(0, torch.tensor([s for s, _ in rows], device=dev), d_i.to(D.dtype))
        return {**st, "D": D}

    def _memory_rows(self, st: dict, d_i: torch.Tensor, rows: list) -> dict:
        """The D update of Alg. 3 on D[j] = scale[j] U[j] (``gram="incremental"``): a worker not sampled has
        its scale multiplied by beta2 and no entry touched; a sampled worker's row becomes U[j] <- beta2
        scale[j] U[j] + d^(j) (d^(j) when its slot was filled this round), in float64, with scale 1; then the
        Gram H = U U^T (per segment) is recomputed on those S rows and columns only, S x m dot products of
        length d instead of m x m. U and H are updated in place (copying m model-sized rows every round is
        what this form saves; an observer's ``server_before`` shares them)."""
        U, H, beta2 = st["U"], st["H"], self.hp.beta2
        dev = U.device
        old = st["scale"].tolist()
        for r, (s, new) in enumerate(rows):  # row by row in place: no S x d temporaries
            if new:
                U[s].copy_(d_i[r])
            else:
                U[s].mul_(beta2 * old[s]).add_(d_i[r])
        scale = beta2 * st["scale"]
        slots = torch.tensor([s for s, _ in rows], device=dev)
        scale[slots] = 1.0
        qp.update_gram(H, U, slots, self.segments)
        return {**st, "scale": scale}

    # -- worker --
    def client_init(self, params):
        if self.hp.worker_qp and self.hp.prev_model == "local":
            return {"x_prev": params.clone()}
        return {}

    def local_update(self, ctx, downlink, client_state):
        x = self.receive(downlink, client_state)
        if not self.hp.worker_qp:
            y = self.sgd_loop(ctx, x)
            return Message.dense(x - y, "d"), client_state
        local = self.hp.prev_model == "local"
        y, fails = self.worker_update(ctx, x, client_state["x_prev"] if local else x)
        up = Message({"d": (x - y).to(torch.float32), "qp_fail": fails.clamp(max=255).to(torch.uint8)})
        return up, ({"x_prev": y} if local else client_state)

    def worker_update(self, ctx, x, x_prev):
        """Alg. 2 from x_0 = x with x_{-1} = x_prev; returns (x_I, number of failed QP_l solves)."""
        opt, hp, segments = ctx.optimizer, self.hp, self.segments
        decay = self._weight_decay(opt, x)
        if decay is not None:  # in the three gradients, before QP_l: not again in the step
            opt = dataclasses.replace(opt, weight_decay=0.0)

        def grad(w, batch, **kw):
            _, g = ctx.loss_and_grad(w, batch, **kw)
            return g if decay is None else decay(g, w)

        def step(carry, batch, s):
            p, p_prev, st, fails = carry
            g_prev = grad(p_prev, batch, update_stats=False)  # grad f_i(x_{tau-1})
            g_glob = grad(x, batch, update_stats=False)  # grad f_i(x_t)
            g = grad(p, batch)  # g_tau = grad f_i(x_tau), last: it is the logged loss
            M = torch.stack([g_prev, g_glob, p - x])
            g_tilde, z, failed = qp.project_small(g, M, segments, hp.rho_l, hp.qp_tol)
            diagnose(ctx, "qp_l", lambda: qp_l_diagnostic(g, g_tilde, z))
            p_new, st = opt.step(p, g_tilde, st, ctx.lr)
            return p_new, p, st, fails + failed

        zero = torch.zeros((), dtype=torch.int32, device=x.device)
        y, _, _, fails = ctx.loop(step, (x, x_prev, opt.init(x), zero))
        return y, fails

    def _weight_decay(self, opt, x):
        """g -> g + wd w on the entries of non-bias tensors (the public code's trainer: every tensor whose name
        is not a ``bias``, BatchNorm's scale included), or None without weight decay. ``check_optimizer`` lets
        only plain SGD through, whose ``weight_decay`` it is."""
        wd = float(getattr(opt, "weight_decay", 0.0))
        if not wd:
            return None
        keep = torch.zeros(x.shape[-1], dtype=torch.bool, device=x.device)
        for s in self.layout.slices:
            if s.name.rsplit(".", 1)[-1] != "bias":
                keep[s.start:s.stop] = True
        return lambda g, w: torch.where(keep, g + wd * w, g)


def qp_l_diagnostic(g: torch.Tensor, g_tilde: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
    """The worker-side QP_l of one local step, for observers (float64): (||g||, ||g~ - g||, then 1.0 where
    the dual variable of each column [grad f_i(x_{tau-1}), grad f_i(x_t), x_tau - x_t] is positive, in any
    segment): the size of the correction that Assumption 4 bounds by eps_l."""
    zz = z.detach().double().reshape(-1, z.shape[-1]).amax(0)
    norms = torch.stack([torch.linalg.vector_norm(g.detach().double()),
                         torch.linalg.vector_norm((g_tilde - g).detach().double())])
    return torch.cat([norms, (zz > 0).double()])


GradMAW = register(configure(GradMA, "gradma_w", fixed={"beta1": 0.0, "beta2": 0.0, "m": 0, "rho_g": 0.0,
                                                                   "gram": "recompute"}, doc=(
    "GradMA-W (Alg. 7): Worker_Update, then x_{t+1} = x_t - eta_g d_{t+1}: GradMA with its server memory and "
    "momentum fixed off (m = 0, beta1 = 0; beta2 and rho_g act on no memory).")))

GradMAS = register(configure(GradMA, "gradma_s", fixed={"worker_qp": False, "prev_model": "global", "rho_l": 0.0},
                             doc=("GradMA-S (Alg. 8): plain local training, then Server_Update: GradMA with its "
                                  "worker QP_l fixed off (stateless workers).")))
