"""LFL Theorem 1, Eq. (11a)-(11c): the bound on E||theta(t) - theta*||^2 checked round by round in the non-iid
multi-step setting (tau > 1, Gamma > 0) that ``lfl.corollary1.bound_vanishes`` and ``gap_vanishes_noniid``
share (:func:`noniid_runs`, cached).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from theory.claims import HOLDS, INCONCLUSIVE, PAPER_CLAIM, UNINFORMATIVE, CheckContext, Outcome, claim, hypothesis
from theory.claims.lfl.formulas import eps_of, lr_schedule, theorem1_bound, theorem1_terms, u_stats
from theory.outcome import Setting, pick
from theory.problems import hetero_quadratic, linear_gamma
from theory.runs import grad_sq_sup, run_lfl, seeds_for, sq_errors, start_point
from theory.verdicts import bound_informative, bound_verdict, diverged

ALPHA = 1e-3  # false-alarm rate of every statistical claim here
RATE_TOL = 0.15  # slope tolerance of the O(1/T) checks (lfl.md recipe 8: slope in [-1.15, -0.85])


# -- the non-iid multi-step setting shared by theorem1.bound, bound_vanishes and gap_vanishes_noniid --
NONIID = {
    "num_clients": 5,
    "d": 10,
    "mu": 0.5,
    "L": 1.0,
    "spread": 1.0,
    "samples_per_client": 50,
    "noise": 0.3,
    "seed": 0,
}
NONIID_RUN = {"tau": 2, "batch": 10, "alpha": 4.0, "beta": 8.0, "q1": 2, "radius": math.sqrt(10.0)}


# 400 rounds: the bound (11a) falls below ||theta(0) - theta*||^2 = 10 (what an algorithm that never moves keeps)
# after about 350 rounds, so the check reaches the horizon where the bound bites
NONIID_FULL, NONIID_QUICK = Setting(400, 8), Setting(30, 3)


@functools.lru_cache(maxsize=4)
def noniid_runs(seed: int, quick: bool, algorithm: str = "lfl", rounds: int | None = None,
                 seeds: int | None = None) -> dict:
    ctx = CheckContext(seed, quick)
    base = pick(ctx, NONIID_QUICK, NONIID_FULL)
    st = Setting(rounds or base.rounds, seeds or base.seeds)
    p = hetero_quadratic(**NONIID)
    c = NONIID_RUN
    runs = [
        run_lfl(
            p,
            algorithm,
            {"q1": c["q1"], "q2": None},
            rounds=st.rounds,
            local_steps=c["tau"],
            batch_size=c["batch"],
            lr=lr_schedule(c["alpha"], c["beta"]),
            seed=s,
            theta0=start_point(p, s, c["radius"]),
            record_grads=True,
            hook=u_stats,
        )
        for s in seeds_for(ctx, st.seeds)
    ]
    return {"problem": p, "runs": runs, "setting": st, "gamma": linear_gamma(p)}


def noniid_constants(data: dict) -> dict:
    p, runs = data["problem"], data["runs"]
    c = NONIID_RUN
    G2 = grad_sq_sup(runs, len(p.data.clients))
    eps, eps_t = eps_of([np.stack(r.extra) for r in runs])
    return {
        "mu": p.mu,
        "L": p.L,
        "Gamma": data["gamma"]["Gamma"],
        "G2": G2,
        "eps": eps,
        "d": p.optimum.numel(),
        "tau": c["tau"],
        "q1": c["q1"],
        "alpha": c["alpha"],
        "beta": c["beta"],
        "eps_t": eps_t,
    }


def theorem1_hypotheses(k: dict, algorithm: str = "lfl", eta0: float | None = None) -> list:
    """Theorem 1's hypotheses in the runs (Sec. 3 and Eqs. 8-11): the step-size condition, the scope of the analysis
    (lossless uplink, all devices, SGD with eta_m^i(t) = eta(t)) and A1-A3 with the constants used."""
    eta0 = k["alpha"] / k["beta"] if eta0 is None else eta0
    cap = min(1.0, 1.0 / (k["mu"] * k["tau"]))
    return [hypothesis("0 < eta(t) <= min{1, 1/(mu tau)} for all t", "Theorem 1", 0 < eta0 <= cap * (1 + 1e-12),
                       f"max_t eta(t) = eta(0) = {eta0:.4g}, cap {cap:.4g}"),
            hypothesis("lossless uplink, all M devices every round, local SGD with eta_m^i(t) = eta(t)",
                       "Sec. 3 (scope of the analysis), Eq. (7)", True, f"{algorithm}, q2 = None, full participation"),
            hypothesis("A1, A2: every F_m L-smooth and mu-strongly convex", "Eqs. (8)-(9)", True,
                       f"quadratics with Hessian eigenvalues in [{k['mu']:g}, {k['L']:g}]"),
            hypothesis("A3: E||grad F_m(theta, xi)||^2 <= G^2 along the iterates", "Eq. (10)", True,
                       f"G^2 = {k['G2']:.4g}, measured (max over (t, m, i) of the mean over seeds)"),
            hypothesis("eps of Eq. (43) in [0, 1]", "Theorem 1, Eq. (43)", 0 <= k["eps"] <= 1,
                       f"eps = {k['eps']:.3g}, measured")]


@claim(
    "lfl.theorem1.bound",
    "lfl",
    "Theorem 1, Eq. (11a)-(11c) (lossless uplink, SGD, full participation)",
    "For 0 < eta(t) <= min{1, 1/(mu tau)}: E||theta(t) - theta*||^2 <= prod_{i=0}^{t-1} A(i) ||theta(0) - "
    "theta*||^2 + sum_{j=0}^{t-1} B(j) prod_{i=j+1}^{t-1} A(i), A(i) = 1 - mu eta(i)(tau - eta(i)(tau - 1)), "
    "B(i) = A(i) (eta(i-1) tau G / (2 q1))^2 eps d + eta(i)^2 (tau^2 + tau - 1) G^2 + (1 + mu(1 - eta(i))) "
    "eta(i)^2 G^2 tau(tau-1)(2tau-1)/6 + 2 eta(i)(tau - 1) Gamma, Gamma = F* - sum_m (B_m/B) F_m*", kind=PAPER_CLAIM)
def _theorem1_bound(ctx: CheckContext) -> Outcome:
    return theorem1_bound_check(ctx)


def theorem1_bound_check(ctx: CheckContext, algorithm: str = "lfl", rounds: int | None = None,
                         seeds: int | None = None) -> Outcome:
    data = noniid_runs(ctx.seed, ctx.quick, algorithm, rounds, seeds)
    p, runs, st = data["problem"], data["runs"], data["setting"]
    if (bad := diverged(runs)) is not None:
        return bad
    k = noniid_constants(data)
    premise = k["alpha"] / k["beta"] <= min(1.0, 1.0 / (k["mu"] * k["tau"]))
    etas = k["alpha"] / (np.arange(st.rounds) + k["beta"])
    A, B = theorem1_terms(etas, k["tau"], k["mu"], k["G2"], k["Gamma"], k["eps"], k["d"], k["q1"])
    P, C = theorem1_bound(A, B)
    err = sq_errors(p, runs)  # (S, R+1)
    x0 = err[:, 0]
    bound = P[None, :] * x0[:, None] + C[None, :]
    verdict, summ = bound_verdict((err - bound)[:, 1:], ALPHA)
    ratio = err.mean(0)[1:] / bound.mean(0)[1:]
    if not premise:
        verdict = INCONCLUSIVE
    # an algorithm that never moves keeps ||theta(0) - theta*||^2 (same constants): does it pass too?
    info = bound_informative(err.mean(0)[1:], bound.mean(0)[1:], np.full(st.rounds, x0.mean()))
    bites = np.nonzero(bound.mean(0)[1:] < x0.mean())[0]
    info["bound_below_initial_error_from_round"] = int(bites[0]) + 1 if len(bites) else None
    if verdict == HOLDS and not info["informative"]:
        verdict = UNINFORMATIVE
    r_max = float(ratio.max())
    t_all = np.arange(st.rounds + 1)
    return Outcome(
        verdict,
        f"max_t E||theta(t)-theta*||^2 / bound = {r_max:.3g} (slack >= {info['slack_bound_over_measured_min']:.3g}); "
        + (f"a frozen algorithm fails from round {info['bound_below_initial_error_from_round']}"
           if info["informative"] else "a frozen algorithm passes at every round checked"),
        {
            "slack_and_frozen_reference": info,
            "constants": {kk: v for kk, v in k.items() if kk != "eps_t"},
            "step_size_premise_met": premise,
            "x0": float(x0.mean()),
            "max_ratio": r_max,
            "argmax_round": int(np.argmax(ratio)) + 1,
            "ratio_at_last_round": float(ratio[-1]),
            "bound_at_last_round": float(bound.mean(0)[-1]),
            "error_at_last_round": float(err.mean(0)[-1]),
            "test": summ,
            "eps_t_max_over_rounds": float(k["eps_t"].max()),
        },
        f"hetero_quadratic {NONIID} (client Hessians differ, eigenvalues in [mu, L]); lfl q1={k['q1']}, "
        f"q2=None (lossless uplink), tau={k['tau']}, batch {NONIID_RUN['batch']}, all "
        f"{NONIID['num_clients']} "
        f"devices every round, eta(t) = {k['alpha']}/(t + {k['beta']}); {st.seeds} seeds x {st.rounds} "
        "rounds; "
        f"||theta(0) - theta*||^2 = {NONIID_RUN['radius'] ** 2:g}; G^2 = max over (t, m, i) of the mean over "
        "seeds of ||g||^2 and eps = max_t eps(t) (Eq. 43) measured on the same runs (plug-in, recipe 6); "
        f"per-round one-sided t/Hall tests, Bonferroni over {st.rounds} rounds",
        {
            "error_vs_bound": {
                "x": t_all.tolist(),
                "y": {
                    "E||theta(t)-theta*||^2": err.mean(0).tolist(),
                    "Theorem 1 bound (11a)": bound.mean(0).tolist(),
                },
                "xlabel": "round t",
                "ylabel": "squared distance to theta*",
                "logy": True,
                "title": "LFL Theorem 1: measured error vs printed bound",
            }
        },
        hypotheses=theorem1_hypotheses(k, algorithm),
    )
