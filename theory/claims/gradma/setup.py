"""GradMA's Corollary 1 and Theorem 1 as printed (thresholds, step sizes, conditions), the toy T-QUAD, the runs with
the Corollary's step sizes and the worker-side projection QP_l along a run (the algorithm's ``qp_l`` diagnostic)."""
from __future__ import annotations

import math

import numpy as np
import torch

from benchmark.runs.experiment import Experiment
from theory import problems
from theory.claims import CheckContext
from theory.problems import quad_hessian  # noqa: F401  (re-exported: the checks and tests use it with these runs)
from theory.runs import Diagnostics, Trace, trace


def rho_sq(prob) -> float:
    """A3's rho^2 = max_i ||grad f_i(x) - grad f(x)||^2 on T-QUAD (constant in x: shared Hessian) = max_i ||grad f_i(x*)||^2."""
    out = 0.0
    for idx in prob.data.clients:
        X = prob.data.x_train[idx].double()
        y = prob.data.y_train[idx].double()
        g = 2.0 * X.T @ (X @ prob.optimum - y) / len(idx)
        out = max(out, float(g @ g))
    return out



# --------------------------------------------------------------------------------------------------
# Printed conditions and thresholds of Theorem 1 / Corollary 1


def corollary1_tmin(N: int, S: int, I: int, beta1: float) -> dict:
    """The T threshold of Corollary 1 as printed, and with the re-derived second term (I instead of I^2).

    T >= max{160, (beta1 S (N-1) + 4N(S-1))^2 / (I^2 (1-beta1)^4 S (N-1)^2), (b + (b^2 + 1280)^0.5)^2 / 4},
    b = 128 (N-S) / ((1-beta1)^2 I^0.5 S^0.5 (N-1)).
    """
    if N < 2:
        raise ValueError("Corollary 1 needs N >= 2 workers")
    b = 128.0 * (N - S) / ((1 - beta1) ** 2 * math.sqrt(I * S) * (N - 1))
    num = (beta1 * S * (N - 1) + 4.0 * N * (S - 1)) ** 2
    t2_printed = num / (I ** 2 * (1 - beta1) ** 4 * S * (N - 1) ** 2)
    t2_rederived = num / (I * (1 - beta1) ** 4 * S * (N - 1) ** 2)
    t3 = (b + math.sqrt(b * b + 1280.0)) ** 2 / 4.0
    return {"b": b, "t1": 160.0, "t2_printed": t2_printed, "t2_rederived": t2_rederived, "t3": t3,
            "printed": max(160.0, t2_printed, t3), "rederived": max(160.0, t2_rederived, t3)}


def theorem1_conditions(eta_l: float, eta_g: float, L: float, I: int, N: int, S: int, beta1: float) -> dict:
    """The three step-size conditions of Theorem 1, evaluated exactly (values and whether each holds)."""
    samp = 0.0 if S == N else (N - S) / (S * (N - 1))
    c1 = eta_l * L * I * math.sqrt(160.0)  # <= 1
    c2_rhs = (1 - beta1) ** 2 * S * (N - 1) / (I * L * (beta1 * S * (N - 1) + 4.0 * N * (S - 1))) \
        if (beta1 * S * (N - 1) + 4.0 * N * (S - 1)) > 0 else math.inf
    c3 = 320 * I ** 2 * eta_l ** 2 * L ** 2 + 64 * I * eta_g * eta_l * L * (1 + 40 * I ** 2 * eta_l ** 2 * L ** 2) \
        / (1 - beta1) ** 2 * samp
    return {"eta_l_L_I_sqrt160": c1, "cond1": bool(c1 <= 1 + 1e-12),
            "eta_g_eta_l": eta_g * eta_l, "cond2_rhs": c2_rhs, "cond2": bool(eta_g * eta_l <= c2_rhs * (1 + 1e-12)),
            "cond3_lhs": c3, "cond3": bool(c3 <= 1 + 1e-12)}


def corollary1_steps(T: int, S: int, I: int, L: float) -> tuple[float, float]:
    """(eta_l, eta_g) = (1/(sqrt(T) L I), sqrt(S/I))."""
    return 1.0 / (math.sqrt(T) * L * I), math.sqrt(S / I)


def corollary1_eps_g(T: int, S: int, I: int, L: float) -> float:
    return I ** 0.25 / (T ** 0.75 * S ** 0.25 * L)


# --------------------------------------------------------------------------------------------------
# The worker-side projection QP_l along a run (the algorithm's "qp_l" diagnostic)


def projection_stats(diag: Diagnostics | None, shape: tuple[int, int, int] | None = None) -> dict:
    """Per-step arrays (rounds, clients, steps) from the ``qp_l`` diagnostics of a run: ||g||, the correction
    ||g~ - g||, the relative change, whether QP_l was active, and which dual variables were positive.
    ``diag=None``: an algorithm without the worker QP (g~ = g), corrections 0 in an array of ``shape``."""
    if diag is None:
        a = np.zeros((*shape, 5))
        a[..., 0] = 1.0
    else:
        a = diag.stacked("qp_l")  # (rounds, clients, steps, 5)
    g, corr = a[..., 0], a[..., 1]
    rel = corr / np.maximum(g, 1e-300)
    return {"g": g, "corr": corr, "rel": rel, "active": rel > 1e-6, "z": a[..., 2:5] > 0.5}


# --------------------------------------------------------------------------------------------------
# Shared settings

_N, _D, _MU, _L, _SG, _NPC = 8, 10, 0.1, 1.0, 1.0, 20  # T-QUAD: workers, dimension, mu, L, sigma_g, samples
_BETA1, _BETA2 = 0.5, 0.5  # the public code's README values (gradma.md 1.7); beta1 <= 0.5 as gradma.md 5.3 advises
_COR_BETA1 = 0.0  # Corollary 1 checks: the smallest T_min (see the module docstring)
# T >= T_min: 775 for S = 4 (speedup), 573 for I = 2 at S = 6 (local steps); N = 8, beta1 = 0
SPEEDUP = {"S": [4, 8], "I": 5, "T": 800, "seeds": 4}
SPEEDUP_QUICK = {"S": [4, 8], "I": 5, "T": 12, "seeds": 2}
LOCAL = {"S": 6, "I": [2, 8], "T": 600, "seeds": 3, "control_seeds": 1}
LOCAL_QUICK = {"S": 6, "I": [2, 4], "T": 12, "seeds": 2, "control_seeds": 1}


def _tquad(ctx: CheckContext):
    return problems.quadratic(num_clients=_N, d=_D, mu=_MU, L=_L, sigma_g=_SG, samples_per_client=_NPC,
                              noise=0.0, seed=ctx.seed)


def has_worker_qp(algorithm: str) -> bool:
    import algorithms

    return bool(getattr(algorithms.get_class(algorithm).Hyper, "worker_qp", False))  # gradma_s fixes it False


def _corollary_run(prob, H, *, S: int, I: int, T: int, seed: int, executor: str = "vectorized",
                   algorithm: str = "gradma", beta1: float = _BETA1, args: dict | None = None,
                   record_qp: bool = False, rounds: int | None = None) -> tuple[np.ndarray, Trace, Diagnostics | None]:
    """One GradMA run with Corollary 1's step sizes for horizon T from x_0 = 0 (``rounds`` of them, T by default);
    returns ||grad f(x_t)||^2 for t = 0..rounds, the trace and (``record_qp``, algorithms with a worker QP) the
    QP_l diagnostics. ``args`` override the algorithm's arguments."""
    eta_l, eta_g = corollary1_steps(T, S, I, prob.L)
    record_qp = record_qp and has_worker_qp(algorithm)
    rounds = T if rounds is None else rounds
    a = {"eta_g": eta_g}
    if algorithm != "gradma_w":
        a.update(beta1=beta1, beta2=_BETA2)
    a.update(args or {})
    exp = Experiment(algorithm=algorithm, dataset=prob.data, num_clients=None, model=prob.model,
                     clients_per_round=S, rounds=rounds, local_steps=I, batch_size=None, lr=eta_l,
                     algorithm_args=a, seed=seed, device="cpu", executor=executor, eval_every=rounds,
                     eval_train_samples=None)
    keys = ("qp_g_correction",) if algorithm in ("gradma", "gradma_s") else ()
    diag = Diagnostics(["qp_l"]) if record_qp else None
    tr = trace(exp, init=torch.zeros(prob.optimum.numel(), dtype=torch.float64), server_keys=keys,
               observers=[diag] if diag is not None else ())
    G = (tr.params - prob.optimum) @ H
    return (G ** 2).sum(1).numpy(), tr, diag


def _premises(T: int, Ss, Is, L: float, beta1: float) -> dict:
    """Theorem 1's step-size conditions at Corollary 1's step sizes, and the T threshold (printed and
    re-derived): the premises the check controls."""
    out, ok = {}, True
    for S in Ss:
        for I in Is:
            eta_l, eta_g = corollary1_steps(T, S, I, L)
            cond = theorem1_conditions(eta_l, eta_g, L, I, _N, S, beta1)
            tmin = corollary1_tmin(_N, S, I, beta1)
            met = cond["cond1"] and cond["cond2"] and cond["cond3"] and T >= max(tmin["printed"], tmin["rederived"])
            ok &= met
            out[f"S={S},I={I}"] = {"T": T, "T_ok": T >= max(tmin["printed"], tmin["rederived"]),
                                   "T_min_printed": tmin["printed"], "T_min_rederived": tmin["rederived"],
                                   "cond1": cond["cond1"], "cond2": cond["cond2"], "cond3": cond["cond3"],
                                   "cond3_lhs": cond["cond3_lhs"], "met": met}
    return {"all_met": ok, "per_setting": out}


def _assumptions(T: int, eps_l_sq: float, eps_g_sq: dict) -> dict:
    """A4 and A5 with the Corollary's eps_l = T^-1/2 and eps_g, from the realized corrections: these are
    assumptions about the algorithm's own iterates, measured, not set."""
    a4 = eps_l_sq <= 1.0 / T
    a5 = all(v["realized"] <= v["required"] for v in eps_g_sq.values())
    return {"A4_eps_l_sq_realized": eps_l_sq, "A4_eps_l_sq_required": 1.0 / T, "A4_met": bool(a4),
            "A5_eps_g_sq": eps_g_sq, "A5_met": bool(a5), "all_met": bool(a4 and a5)}
