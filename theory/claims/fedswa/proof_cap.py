"""FedMoSWA under partial participation at the step cap of Theorem 5.2's own proof (Lemmas G.12, G.13), judged
against the value of the bound that proof unrolls, and the same runs with the update the proof analyses.

Lemma G.13 (App. G, Eq. 79) with sigma = 0, for eta_l <= min(1/(81 beta K alpha), s/(15 mu m K alpha)), alpha >= 1:

    E[||theta^t - theta*||^2 + (9 m eta~^2/s) C_t] <= (1 - mu eta~/2) E[||theta^{t-1} - theta*||^2
                                                       + (9 m eta~^2/s) C_{t-1}] - eta~ (E f(theta^{t-1}) - f*)

(eta~ = K eta_l alpha; C_t = (1/m) sum_i ||E c_i^t - grad F_i(theta*)||^2), unrolled by Theorem 5.2 into its
strongly convex rate. Dropping the non-positive last term and C_t >= 0:

    E||theta^T - theta*||^2 <= B_T := (1 - mu eta~/2)^T (||theta^0 - theta*||^2 + (9 m eta~^2/s) C_0),

with C_0 = sigma_g^2 for c_i^0 = 0 (G.4): the bound's own value, which tends to 0. The algorithm (Eq. 7, Alg. 1
line 16) averages the SAMPLED clients' c_i^+ into m; the proof's Lemma G.11 writes m^t = (1 - gamma) m^{t-1} +
gamma (1/m) sum_{i=1}^m c_i^t, an average over ALL m clients. With s < m the sampled average keeps m fluctuating
around 0 by about sqrt(gamma/s) sigma_g (fedswa.md 5.4 item 5), and the error stops decaying at a floor that
grows like sigma_g^2; with the proof's update (``fedmoswa`` with ``m_mean="all"``) it goes to 0.

The expectation in the bound is over the sampling, so the runs are one problem and independent sampling seeds,
batched into one job (``theory.runs.trace_group``). The test (``theory.verdicts.markov_fisher``, with
``stats.upper_bound`` for the other direction) compares each run's mean error over the last rounds with the
bound's mean over the same rounds.
"""
from __future__ import annotations

import math

import numpy as np

from benchmark.runs.experiment import Experiment
from theory import stats
from theory.claims import HOLDS, INCONCLUSIVE, UNINFORMATIVE, VIOLATED, CheckContext, Outcome, hypothesis
from theory.claims.fedswa.toy import (_ALPHA, _D, _GAMMA, _L, _M, _MOSWA, hetero_quadratic, problem_hypotheses,
                                      step_caps, _unit)
from theory.outcome import Setting, pick
from theory.runs import trace_group
from theory.verdicts import markov_fisher

# Toy A with mu/beta = 0.5: the bound contracts by mu eta~/2 = mu/(162 beta) per round at the cap, five times faster
# than at Toy A's mu = 0.1, so it falls far below the floor within a few thousand rounds
CAP = {"mu": 0.5, "K": 2, "s": 2, "sigma_g": 4.0, "radius": 0.3}
CAP_FULL, CAP_QUICK = Setting(2500, 6), Setting(2000, 4)
CONTROL_SEEDS = 2
LEVEL = 5e-4  # each of the two one-sided tests (Markov-Fisher, t/Hall): 1e-3 in all


def cap_lr(K: int, s: int, mu: float, alpha: float = _ALPHA, beta: float = _L, m: int = _M) -> float:
    """The largest eta_l Lemmas G.12 and G.13 allow: min(1/(81 beta K alpha), s/(15 mu m K alpha))."""
    return min(1.0 / (81 * beta * K * alpha), s / (15 * mu * m * K * alpha))


def lemma_g13_bound(T: int, *, mu: float, eta_tilde: float, r2: float, m: int, s: int, C0: float) -> np.ndarray:
    """B_t = (1 - mu eta~/2)^t (||theta^0 - theta*||^2 + (9 m eta~^2/s) C_0), t = 0..T (Lemma G.13 unrolled, sigma = 0)."""
    return (1 - mu * eta_tilde / 2) ** np.arange(T + 1) * (r2 + 9 * m * eta_tilde ** 2 / s * C0)


def cap_runs(ctx: CheckContext, *, m_mean: str = "sampled", lr: float | None = None, rounds: int | None = None,
             seeds: int | None = None) -> dict:
    """R sampling seeds of FedMoSWA (``m_mean``: "sampled" as in Alg. 1, "all" as in Lemma G.11) on one Toy A
    problem at ``lr`` (default: the proof's cap), batched; the errors, the bound and the hypotheses."""
    st = pick(ctx, CAP_QUICK, CAP_FULL)
    T, R = rounds or st.rounds, seeds or st.seeds
    mu, K, s = CAP["mu"], CAP["K"], CAP["s"]
    lr = cap_lr(K, s, mu) if lr is None else lr
    pseed = 100 * ctx.seed
    prob = hetero_quadratic(_M, _D, mu, _L, CAP["sigma_g"], 20, 0.0, pseed)
    init = prob.optimum + CAP["radius"] * _unit(_D, pseed)
    args = {**_MOSWA, "m_mean": m_mean}
    exps = [Experiment(algorithm="fedmoswa", dataset=prob.data, num_clients=None, model=prob.model,
                       clients_per_round=s, rounds=T, local_steps=K, batch_size=None, lr=lr, algorithm_args=args,
                       seed=10_000 * ctx.seed + i, device="cpu", eval_every=T, eval_train_samples=None)
            for i in range(R)]
    trs = trace_group(exps, init=init)
    err = np.stack([((tr.params - prob.optimum) ** 2).sum(1).numpy() if tr.status == "ok"
                    else np.full(T + 1, np.inf) for tr in trs])
    et = K * lr * _ALPHA
    bound = lemma_g13_bound(T, mu=mu, eta_tilde=et, r2=float(err[0, 0]), m=_M, s=s, C0=prob.sigma_g ** 2)
    hyps = step_caps(lr, K=K, alpha=_ALPHA, beta=_L, s=s, m=_M, mu=mu, gamma=_GAMMA, T=T, rho=_MOSWA["rho"],
                     option=_MOSWA["option"]) + problem_hypotheses(prob, s, _M)
    hyps.append(hypothesis("the algorithm as stated: m <- m + gamma (1/s) sum_{i in S_t} (c_i^+ - m)",
                           "Eq. (7), Alg. 1 line 16", m_mean == "sampled",
                           "m over the sampled clients" if m_mean == "sampled" else
                           "m over all m clients (Lemma G.11's update, not the algorithm's)"))
    return {"err": err, "bound": bound, "T": T, "R": R, "lr": lr, "eta_tilde": et, "m_mean": m_mean,
            "sigma_g": prob.sigma_g, "hypotheses": hyps, "r2": float(err[0, 0])}


def judge(runs: dict) -> tuple[str, dict]:
    """VIOLATED when the runs' tail errors exceed the bound's tail (either test at ``LEVEL``); HOLDS when neither
    rejects and the t-test's upper confidence bound is below the bound (UNINFORMATIVE if an algorithm that never
    moves, error ||theta^0 - theta*||^2, would meet the bound too); else INCONCLUSIVE."""
    err, bound, T = runs["err"], runs["bound"], runs["T"]
    if not np.all(np.isfinite(err)):
        return INCONCLUSIVE, {"diverged_runs": int((~np.isfinite(err[:, -1])).sum())}
    W = T // 5
    tail, btail = err[:, -W:].mean(1), float(bound[-W:].mean())
    mid = err[:, T // 2 - W:T // 2].mean(1)
    mf = markov_fisher(tail, btail, LEVEL)
    t = stats.upper_bound(tail, btail, alpha=LEVEL)
    frozen_fails = runs["r2"] > btail
    if mf["rejected"] or not t.passed:
        verdict = VIOLATED
    elif t.details["confirmed"]:
        verdict = HOLDS if frozen_fails else UNINFORMATIVE
    else:
        verdict = INCONCLUSIVE
    ev = {"tail_rounds": [T - W + 1, T], "tail_mean_error": tail.tolist(), "bound_tail_mean": btail,
          "tail_over_bound_median": float(np.median(tail) / btail), "markov_fisher": mf, "t_test": t.to_dict(),
          "non_decay": {"error_tail_over_mid_window_median": float(np.median(tail / np.maximum(mid, 1e-300))),
                        "bound_tail_over_mid_window": float(btail / bound[T // 2 - W:T // 2].mean()),
                        "mid_rounds": [T // 2 - W + 1, T // 2]},
          "frozen_reference": {"error": runs["r2"], "fails_the_bound": bool(frozen_fails)}}
    return verdict, ev


def cap_outcome(ctx: CheckContext, *, m_mean: str = "sampled", lr: float | None = None, rounds: int | None = None,
                seeds: int | None = None) -> Outcome:
    """The proof-cap check alone: its verdict, hypotheses and evidence (tests: ``m_mean="all"`` is the control that
    flips it; an ``lr`` above the cap is outside the hypotheses)."""
    runs = cap_runs(ctx, m_mean=m_mean, lr=lr, rounds=rounds, seeds=seeds)
    verdict, ev = judge(runs)
    ev.update({"eta_l": runs["lr"], "eta_tilde": runs["eta_tilde"], "seeds": runs["R"], "T": runs["T"],
               "m_mean": m_mean, "sigma_g": runs["sigma_g"], "problem": {**CAP, "m": _M, "d": _D, "beta": _L}})
    key = (f"error over the last {runs['T'] // 5} rounds {np.median(ev.get('tail_mean_error', [math.nan])):.3g} vs "
           f"Lemma G.13's bound {ev.get('bound_tail_mean', math.nan):.3g}")
    return Outcome(verdict, key, ev, cap_conditions(runs), hypotheses=runs["hypotheses"])


def cap_conditions(runs: dict) -> str:
    return (f"Toy A with mu={CAP['mu']}, beta={_L} (client Hessians diag(perm(linspace({CAP['mu']}, {_L}, {_D})))), "
            f"m={_M}, s={CAP['s']} sampled uniformly, K={CAP['K']}, full local gradients (sigma=0), sigma_g="
            f"{CAP['sigma_g']:g}, eta_l={runs['lr']:.4g} (eta~ = K eta_l alpha = {runs['eta_tilde']:.4g}), "
            f"alpha={_ALPHA}, gamma={_GAMMA}, rho=1, Option II, theta^0 = theta* + {CAP['radius']} u, c_i^0 = m^0 = 0, "
            f"T={runs['T']}; one problem, {runs['R']} sampling seeds batched in one job; the bound B_t of Lemma "
            "G.13 unrolled; test on the mean error over the last T/5 rounds: Markov per run combined by Fisher and "
            f"a t/Hall upper-bound test, each at {LEVEL:g}.")


def cap_series(runs: dict, control: dict | None) -> dict:
    """The error of every run, the control's and the bound, every 10th round (log scale)."""
    idx = np.arange(0, runs["T"] + 1, 10)
    y = {"FedMoSWA (Alg. 1), median over seeds": np.median(runs["err"], 0)[idx].tolist(),
         "Lemma G.13 bound B_t": runs["bound"][idx].tolist()}
    if control is not None:
        y["Lemma G.11's all-clients m, median"] = np.maximum(np.median(control["err"], 0)[idx], 1e-30).tolist()
    return {"x": idx.tolist(), "y": y, "xlabel": "round t", "logy": True,
            "ylabel": f"||theta_t - theta*||^2 (s={CAP['s']} of {_M}, sigma_g={CAP['sigma_g']:g})"}
