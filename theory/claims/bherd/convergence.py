"""BHerd's convergence statements: Theorems 1 and 2 evaluated with constants measured along the run, and the alpha
sweep of Fig. 3(a).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from benchmark.sim import executors as ex
from theory import stats
from theory.claims import (
    HOLDS,
    INCONCLUSIVE,
    NOT_REPRODUCED,
    PAPER_CLAIM,
    PREMISE,
    UNINFORMATIVE,
    CheckContext,
    Outcome,
    claim,
    hypothesis,
)
from theory.claims.bherd.formulas import theorem1_rhs, theorem2_rhs, theorem_conditions
from theory.claims.bherd.runs import BATCH, CLIENTS, DIM, LR, SAMPLES, bherd_run, toy_quadratic
from theory.problems import quad_hessian
from theory.verdicts import verdict_from

PAPER = "bherd"


def _round_quantities(prob, tr, rounds, batch: int):
    """Per round t: Delta_t, beta_t, varsigma_t^2 (A3 at w_t with the round's batches), ||grad F(w_t)||^2, and the
    largest per-batch smoothness seen."""
    data = tr.data
    X = data.x_train.double()
    y = data.y_train.double()
    exp = tr.exp
    out = {"Delta": [], "beta": [], "varsigma2": [], "grad_sq": [], "L_batch": 0.0}
    H = quad_hessian(data)
    for t, rnd in enumerate(rounds):
        w = tr.params[t]
        w_next = tr.params[t + 1]
        delta = 0.0
        vs = 0.0
        for rec in rnd:
            cum = torch.cumsum(rec["Z"], 0)  # w_t - w_(t,i)^{lambda+1}
            delta = max(delta, float(cum.norm(dim=1).max()))
            cid = rec["client"]
            sch = ex.client_schedule(tr.parts[cid], ex.minibatch_rng(exp.seed, t, cid), 1, None, batch)
            grads = []
            for b_idx, b_w in zip(sch.idx, sch.w):
                keep = b_idx[b_w > 0]
                Xb, yb = X[keep], y[keep]
                grads.append(2 * Xb.T @ (Xb @ w - yb) / len(keep))
                out["L_batch"] = max(out["L_batch"], float(torch.linalg.eigvalsh(2 * Xb.T @ Xb / len(keep)).max()))
            G = torch.stack(grads)
            vs = max(vs, float(((G - G.mean(0)) ** 2).sum(1).mean()))
        out["Delta"].append(delta)
        out["beta"].append(float((w - w_next).norm()) / max(delta, 1e-300))
        out["varsigma2"].append(vs)
        g = H @ (w - prob.optimum)
        out["grad_sq"].append(float(g @ g))
    return {k: (np.array(v) if isinstance(v, list) else v) for k, v in out.items()}


@claim("bherd.thm12.bounds", PAPER, "Theorems 1 and 2 (App. D; A1-A4)",
       "Under A1-A3 with eta <= sqrt(3) beta/(6 L tau_max) and T <= beta^2/(24 eta^2 L^2 tau_max^2): (1/T) sum_t "
       "||grad F(w_t)||^2 <= 4(F(w_1)-F*)/(alpha eta tau_max T) + varsigma^2/T + varsigma^2/(2T^2) (Thm 1); with A4 (PL, "
       "gamma) and T <= beta^2/(24 alpha eta^3 L^3 tau_max^3): F(w_T) - F* <= varsigma^2/(4 T alpha eta L tau_max gamma) + "
       "(F(w_1)-F*)/(T alpha eta L tau_max) + varsigma^2/(4 T L) (Thm 2, explicit form). Evaluated with beta (A2), "
       "varsigma^2 (A3) and L measured along the run.", kind=PAPER_CLAIM)
def _bounds(ctx: CheckContext) -> Outcome:
    return bounds_check(ctx)


def bounds_check(ctx: CheckContext, algorithm: str = "bherd") -> Outcome:
    R, T = (3, 4) if ctx.quick else (4, 20)
    alpha, batch = 0.5, BATCH
    ratios1, ratios2, info = [], [], []
    frozen1, frozen2 = [], []
    premises_ok = True
    for r in range(R):
        prob = toy_quadratic(100 * ctx.seed + r, sigma_g=0.0, noise=0.0)  # interpolation: A2 can hold with beta > 0
        tau = SAMPLES // batch
        gamma = prob.mu  # PL constant of F (Hessian eigenvalues in [mu, L])
        init = prob.optimum + 1.0
        eta = LR
        for _ in range(3):  # eta from the conditions with the beta measured at the previous eta
            tr, rounds = bherd_run(prob, alpha=alpha, selection="herding", T=T, lr=eta, batch=batch,
                                    seed=100 * ctx.seed + r, record=True, init=init, algorithm=algorithm)
            q = _round_quantities(prob, tr, rounds, batch)
            L = max(q["L_batch"], prob.L)
            beta = float(min(1.0, q["beta"].min()))
            cond = theorem_conditions(eta, beta, L, tau, T, alpha)
            if cond["eta_ok"] and cond["thm1_T_ok"] and cond["thm2_T_ok"] and cond["lemma1_ok"]:
                break
            if not beta > 0:  # A2 fails (the model does not move while clients drift): no admissible eta
                break
            eta = 0.9 * min(math.sqrt(3) * beta / (6 * L * tau), beta / (math.sqrt(24 * T) * L * tau),
                            (beta ** 2 / (24 * alpha * T * L ** 3 * tau ** 3)) ** (1 / 3))
        met = cond["eta_ok"] and cond["thm1_T_ok"] and cond["thm2_T_ok"] and cond["lemma1_ok"]
        premises_ok &= met
        F0 = prob.objective(tr.params[0]) - prob.f_star
        vs2 = float(q["varsigma2"].max())
        lhs1 = float(q["grad_sq"][:T].mean())  # w_1..w_T of the paper = params[0..T-1]
        rhs1 = theorem1_rhs(F0, alpha, eta, tau, T, vs2)
        lhs2 = prob.objective(tr.params[T - 1]) - prob.f_star  # F(w_T)
        rhs2 = theorem2_rhs(F0, alpha, eta, tau, T, vs2, L, gamma)
        ratios1.append(lhs1 / rhs1)
        ratios2.append(lhs2 / rhs2)
        # an algorithm that never moves measures ||grad F(w_1)||^2 (Thm 1) and F(w_1) - F* (Thm 2)
        frozen1.append(float(q["grad_sq"][0]) / rhs1)
        frozen2.append(F0 / rhs2)
        info.append({"eta": eta, "beta_min": beta, "beta_median": float(np.median(q["beta"])), "L": L,
                     "varsigma2": vs2, "F0": F0, "thm1_lhs": lhs1, "thm1_rhs": rhs1, "thm2_lhs": lhs2,
                     "thm2_rhs": rhs2, "rhs2_over_F0": rhs2 / F0, "conditions": cond, "premises_met": met})
    t1 = stats.upper_bound(np.array(ratios1), 1.0, alpha=5e-4)
    t2 = stats.upper_bound(np.array(ratios2), 1.0, alpha=5e-4)
    if not premises_ok:
        verdict = INCONCLUSIVE
    else:
        verdict = verdict_from(t1.passed and t2.passed, t1.details["confirmed"] and t2.details["confirmed"])
    informative = bool(np.mean(frozen1) > 1 or np.mean(frozen2) > 1)
    frozen_ref = {"frozen_thm1_lhs_over_rhs": frozen1, "frozen_thm2_lhs_over_rhs": frozen2,
                  "slack_thm1_rhs_over_lhs": float(1 / np.mean(ratios1)),
                  "slack_thm2_rhs_over_lhs": float(1 / np.mean(ratios2)), "informative": informative}
    if verdict == HOLDS and not informative:
        verdict = UNINFORMATIVE
    key = (f"Thm 1 LHS/RHS {np.mean(ratios1):.3f}, Thm 2 LHS/RHS {np.mean(ratios2):.3f}; Thm 2 RHS / (F(w_1)-F*) = "
           f"{np.median([i['rhs2_over_F0'] for i in info]):.2f}; eta = {np.median([i['eta'] for i in info]):.2g}; "
           f"a frozen algorithm {'fails' if informative else 'passes both'}")
    ev = {"per_seed": info, "thm1_test": t1.to_dict(), "thm2_test": t2.to_dict(), "premises_met_all_seeds": premises_ok,
          "slack_and_frozen_reference": frozen_ref,
          "reading": "the conditions (T bounded above by a power of beta/(eta L tau)) force a tiny eta; at that eta the "
                     "F(w_1)-F* term alone exceeds F(w_1)-F* whenever T alpha eta L tau < 1, i.e. the bound is vacuous "
                     "(RHS > initial gap) in the regime where it applies."}
    cond = (f"problems.quadratic N={CLIENTS}, d={DIM}, sigma_g=0, no label noise (interpolation, so A2 holds with beta > 0), "
            f"{SAMPLES} samples per client, batch {batch} (tau = 10), alpha={alpha}, herding, full participation, "
            f"w_1 = w* + 1, T={T}, {R} seeds; eta chosen (up to 3 re-runs) to meet the conditions with the measured "
            f"beta = min_t ||w_t - w_(t+1)||/Delta_t; varsigma^2 = max_(t,i) A3 at w_t with the round's batches; "
            f"L = max(per-batch smoothness seen, L of F); gamma = mu (PL of F); level 5e-4 per theorem.")
    return Outcome(verdict, key, ev, cond, hypotheses=_thm12_hypotheses(info, T))


def _thm12_hypotheses(info: list, T: int) -> list:
    """Theorems 1-2's conditions over every seed's run (Lemma 1, Lemma 2, the T caps) and A2's beta > 0."""
    def every(k):
        return all(i["conditions"][k] for i in info)

    etas = [i["eta"] for i in info]
    return [hypothesis("eta <= sqrt(3) beta/(6 L tau_max)", "Lemma 2, Theorems 1-2", every("eta_ok"),
                       f"eta in [{min(etas):.2g}, {max(etas):.2g}]"),
            hypothesis("T <= beta^2/(24 eta^2 L^2 tau_max^2)", "Theorem 1", every("thm1_T_ok"),
                       f"T = {T}, cap >= {min(i['conditions']['T_max_thm1'] for i in info):.3g}"),
            hypothesis("T <= beta^2/(24 alpha eta^3 L^3 tau_max^3)", "Theorem 2", every("thm2_T_ok"),
                       f"T = {T}, cap >= {min(i['conditions']['T_max_thm2'] for i in info):.3g}"),
            hypothesis("alpha eta L tau_max <= 1", "Lemma 1", every("lemma1_ok"), ""),
            hypothesis("A2: beta * Delta_t <= ||w_t - w_{t+1}|| with beta in (0, 1]", "Assumption 2",
                       all(i["beta_min"] > 0 for i in info),
                       f"measured beta = min_t ||w_t - w_(t+1)||/Delta_t >= {min(i['beta_min'] for i in info):.3g}",
                       kind=PREMISE),
            hypothesis("A1, A3, A4 (smooth, bounded minibatch variance, PL)", "Assumptions 1, 3, 4", True,
                       "a quadratic: L, varsigma^2 measured along the run, gamma = mu")]


@claim("bherd.fig3a.alpha", PAPER, "Fig. 3(a) and its text (Sec. 2.3): an empirical figure",
       "Fig. 3(a) (SVM on MNIST, Cases 1-3, B = 100, eta = 1e-4, T = 500): lowering alpha from 1.0 to 0.3 speeds up "
       "convergence, alpha = 0.1 fails to converge, alpha = 0.5 is the best threshold. Tried here on a toy, not at the "
       "figure's setting: F(w_T) - F* decreases as alpha decreases over {1.0, 0.7, 0.5, 0.3} (slope of log gap vs "
       "log(1/alpha) <= 0), and alpha = 0.1 does not converge (F(w_T) - F* >= F(w_1) - F* or divergence); random "
       "subsets of the same size as the control. An empirical figure: HOLDS when the toy reproduces it, NOT "
       "REPRODUCED when it does not.", kind=PAPER_CLAIM,
       quote="\"a reduction in the value of alpha from 1.0 to 0.3 engenders an acceleration in the convergence rate of "
             "the BHerd strategy, attributable to the mitigation of gradient deviations on each client, as delineated "
             "by Equation (1). Contrariwise, diminishing alpha further to 0.1 results in the algorithm's failure to "
             "converge [...] an alpha value of 0.5 is posited as the optimal threshold\" (Sec. 2.3, on Fig. 3(a))")
def _alpha(ctx: CheckContext) -> Outcome:
    return alpha_sweep(ctx)


def alpha_sweep(ctx: CheckContext, algorithm: str = "bherd") -> Outcome:
    R, T = (3, 15) if ctx.quick else (3, 30)
    alphas = [1.0, 0.7, 0.5, 0.3]
    gaps = {sel: np.zeros((R, len(alphas))) for sel in ("herding", "random")}
    early = np.zeros((R, len(alphas)))
    small = {sel: [] for sel in ("herding", "random")}
    curves = {}
    F0s = []
    for r in range(R):
        prob = toy_quadratic(100 * ctx.seed + r)
        init = torch.zeros(DIM, dtype=torch.float64)
        F0 = prob.objective(init) - prob.f_star
        F0s.append(F0)
        for sel in ("herding", "random"):
            for j, a in enumerate(alphas + [0.1]):
                tr, _ = bherd_run(prob, alpha=a, selection=sel, T=T, lr=LR, batch=BATCH, seed=100 * ctx.seed + r,
                                   algorithm=algorithm,
                                   record=False, init=init)
                fg = np.array([prob.objective(w) - prob.f_star for w in tr.params]) if tr.status == "ok" else None
                final = float(fg[-1]) if fg is not None and np.isfinite(fg[-1]) else math.inf
                if a == 0.1:
                    small[sel].append(final / F0)
                else:
                    gaps[sel][r, j] = final
                    if sel == "herding":
                        early[r, j] = float(fg[T // 4]) if fg is not None else math.inf
                if r == 0 and sel == "herding" and fg is not None:
                    curves[f"alpha={a}"] = np.maximum(fg, 1e-300).tolist()
    inv = [1 / a for a in alphas]
    res = stats.slope_at_most(inv, gaps["herding"], 0.0)
    ctrl = stats.slope(inv, gaps["random"])
    early_slope = stats.slope(inv, early)
    fails = [x >= 1.0 for x in small["herding"]]  # no progress (or divergence) after T rounds
    reason = ""
    if not res.passed or not any(fails):  # the gap grows as alpha shrinks, or alpha = 0.1 converges in every seed
        verdict = NOT_REPRODUCED
        reason = "; ".join(part for part in (
            "" if any(fails) else f"alpha = 0.1 converges in every seed (median (F_T-F*)/(F_1-F*) "
                                  f"{np.median(small['herding']):.2g}), where the figure shows it failing",
            "" if res.passed else "the gap grows as alpha falls",
            f"lowering alpha {'does not speed convergence' if res.estimate > 0 else 'speeds convergence'} (slope "
            f"{res.estimate:+.2f}, p = {res.p_value:.2g} at a level of {res.alpha:g})") if part) + (
            f"; at this toy (least squares, tau = 10, batch {BATCH}, eta = {LR}, T = {T}), not the figure's setting "
            "(SVM on MNIST, B = 100, eta = 1e-4, T = 500)")
    elif res.details["confirmed"] and all(fails):
        verdict = HOLDS
    else:
        verdict = INCONCLUSIVE
    key = (f"herding: slope of log(F_T - F*) vs log(1/alpha) {res.estimate:+.3f} (claim: <= 0); random control "
           f"{ctrl.estimate:+.3f}; alpha=0.1 (F_T-F*)/(F_1-F*) = {np.median(small['herding']):.2e}")
    ev = {"alphas": alphas, "final_gap": {k: v.tolist() for k, v in gaps.items()}, "F1_minus_Fstar": F0s,
          "alpha_0.1_final_over_initial": small, "alpha_0.1_fails_to_converge": fails,
          "herding_slope_test": res.to_dict(), "random_control_slope": ctrl.to_dict(),
          "early_gap_round_T/4": early.tolist(), "early_slope_herding": early_slope.estimate,
          "early_slope_interval": list(early_slope.interval),
          "best_alpha_herding_per_seed": [alphas[int(np.argmin(g))] for g in gaps["herding"]],
          "reading": "(1/alpha) g_i ~ tau_i mu_i for herding (its subset mean tracks mu_i) and in expectation for random "
                     "subsets, so the step is FedAvg's; lowering alpha adds selection error rather than step size. "
                     "The empirical claims (theory/empirical/bherd.py) run the paper's SVM setting."}
    series = {"gap_vs_round_herding": {"x": list(range(T + 1)), "y": curves, "xlabel": "round",
                                       "ylabel": "F(w_t) - F* (seed 0)", "logy": True},
              "final_gap_vs_alpha": {"x": alphas, "y": {s: np.median(v, 0).tolist() for s, v in gaps.items()},
                                     "xlabel": "alpha", "ylabel": "F(w_T) - F* (median)", "logy": True}}
    cond = (f"problems.quadratic N={CLIENTS}, d={DIM}, sigma_g=1, label noise 0.5, {SAMPLES} samples per client, batch {BATCH} "
            f"(tau = 10), eta={LR}, full participation, w_1 = 0, T={T}, {R} seeds; herding and random selection with "
            f"the paper's 1/alpha rescaling. Not the figure's setting (squared-hinge SVM on MNIST, Cases 1-3, B = 100, "
            "eta = 1e-4, T = 500).")
    return Outcome(verdict, key, ev, cond, series, reason=reason)
