"""FedSWA / FedMoSWA (Liu et al., ICML 2025), Sec. 5: Theorem 5.2 (optimization error) and Theorem 5.1
(generalization via uniform stability), checked on the project's fedswa / fedmoswa code through the engine.

Summary of the theory: ../shared/papers/fedswa.md, Sec. 5. The toy is fedswa.md's Toy A: heterogeneous
quadratics F_i(theta) = mean_j (x_ij . theta - y_ij)^2 whose Hessians H_i = diag(h_i) DIFFER across clients
(h_i a random permutation of linspace(mu, L, d)), so that FedAvg-type local training has a client-drift fixed
point away from theta* (with one shared Hessian, as in ``problems.quadratic``, local GD steps commute with
averaging and FedAvg has no drift at all, so that toy cannot show what Theorem 5.2 is about). Every F_i is
mu-strongly convex and L-smooth (beta = L), client optima are w_i* = w0 + scale * u_i and the scale is set so
that the G.4 heterogeneity (1/m) sum_i ||grad F_i(theta*)||^2 equals sigma_g^2 exactly.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from benchmark.runs.experiment import Experiment
from benchmark.datasets.federated_dataset import FederatedDataset
from theory import stats
from theory.claims import HOLDS, PAPER_CLAIM, UNINFORMATIVE, CheckContext, Outcome, claim
from theory.problems import ConvexProblem, bias_free_linear
from theory.runs import trace
from theory.verdicts import verdict_from

PAPER = "fedswa"


# --------------------------------------------------------------------------------------------------
# Toy A: heterogeneous quadratics


def hetero_quadratic(num_clients: int = 8, d: int = 10, mu: float = 0.1, L: float = 1.0, sigma_g: float = 1.0,
                     samples_per_client: int = 20, noise: float = 0.0, seed: int = 0) -> ConvexProblem:
    """Quadratics with client-specific Hessians diag(h_i), h_i a permutation of linspace(mu, L, d).

    The random draws do not depend on sigma_g (it only scales the client offsets), so runs that differ only
    in sigma_g are paired. ``meta`` of the dataset holds the per-client Hessian diagonals ``h`` (m, d).
    """
    if samples_per_client < d:
        raise ValueError("samples_per_client must be >= d")
    rng = np.random.default_rng(seed)
    h = np.stack([rng.permutation(np.linspace(mu, L, d)) for _ in range(num_clients)])
    w0 = rng.normal(size=d)
    off = rng.normal(size=(num_clients, d))
    direction = (h * off).sum(0) / h.sum(0)  # theta* - w0 per unit scale (noise-free)
    g_unit = h * (direction - off)  # grad F_i(theta*) per unit scale
    scale = sigma_g / math.sqrt(np.mean((g_unit ** 2).sum(1))) if sigma_g > 0 else 0.0
    w_i = w0 + scale * off
    n = samples_per_client
    clients, xs, ys = [], [], []
    for i in range(num_clients):
        q, _ = np.linalg.qr(rng.normal(size=(n, d)))
        X = math.sqrt(n) * q * np.sqrt(h[i] / 2.0)  # X^T X / n = diag(h_i) / 2: Hessian of the MSE = diag(h_i)
        y = X @ w_i[i] + noise * rng.normal(size=n)
        X32, y32 = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
        clients.append((X32, y32))
        xs.append(X32.double().numpy())
        ys.append(y32.double().numpy())
    Xa, ya = np.concatenate(xs), np.concatenate(ys)
    w_star = np.linalg.solve(Xa.T @ Xa, Xa.T @ ya)
    f_star = float(np.mean((Xa @ w_star - ya) ** 2))
    grads = [2 * x.T @ (x @ w_star - y) / len(y) for x, y in zip(xs, ys)]
    sg = float(math.sqrt(np.mean([g @ g for g in grads])))
    data = FederatedDataset.from_tensors(clients, clients[0], task="regression",
                                         name=f"hetero_quadratic(m={num_clients},d={d},sg={sigma_g},s={seed})")
    data.meta["h"] = h
    Xt, yt = torch.tensor(Xa), torch.tensor(ya)

    def objective(w: torch.Tensor) -> float:
        return float(torch.mean((Xt @ w.double().cpu().reshape(-1) - yt) ** 2))

    return ConvexProblem("hetero_quadratic", data, bias_free_linear(d), torch.tensor(w_star), f_star, mu, L, sg, objective)


def _unit(d: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(10_000 + seed)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    return v / v.norm()


def _run(prob: ConvexProblem, algorithm: str, args: dict, *, s: int, K: int, lr: float, T: int, seed: int,
         init: torch.Tensor | None, batch_size: int | None = None, weight_decay: float = 0.0) -> np.ndarray:
    """||theta_t - theta*||^2 for t = 0..T (the engine's run of the project's algorithm)."""
    exp = Experiment(algorithm=algorithm, dataset=prob.data, num_clients=None, model=prob.model,
                     clients_per_round=s, rounds=T, local_steps=K, batch_size=batch_size, lr=lr,
                     algorithm_args=args, weight_decay=weight_decay, seed=seed, device="cpu", eval_every=T,
                     eval_train_samples=None)
    tr = trace(exp, init=init)
    if tr.status != "ok":
        return np.full(T + 1, np.inf)
    return ((tr.params - prob.optimum) ** 2).sum(1).numpy()


_M, _D, _MU, _L, _K = 8, 10, 0.1, 1.0, 5
_ALPHA, _GAMMA = 1.5, 0.2  # paper defaults (Sec. 6.1)
_MOSWA = {"rho": 1.0, "alpha": _ALPHA, "gamma": _GAMMA, "option": 2}  # constant local LR: the proofs' setting
_FEDSWA = {"rho": 0.1, "alpha": _ALPHA}  # the paper's FedSWA


def _eta_tilde_ok(lr: float, K: int, alpha: float, beta: float, s: int, m: int, mu: float) -> dict:
    bound = min(1.0 / (beta * K * alpha), s / (mu * m * K * alpha))
    return {"eta_l": lr, "eta_max_thm52": bound, "eta_ok": bool(lr <= bound * (1 + 1e-12)),
            "T_min_thm52": max(beta / mu, m / s)}


def _sigma_sweep(ctx: CheckContext, s: int, T: int, R: int, sigmas, algs: dict, tail: int | None):
    """errors[alg] (R, len(sigmas)): ||theta_T - theta*||^2 (tail=None) or its mean over the last ``tail`` rounds."""
    lr = 1.0 / (2 * _L * _K * _ALPHA)
    out = {a: np.zeros((R, len(sigmas))) for a in algs}
    curves = {}
    d2 = np.zeros((R, len(sigmas)))
    for r in range(R):
        pseed = 100 * ctx.seed + r
        delta = _unit(_D, pseed)
        for j, sg in enumerate(sigmas):
            prob = hetero_quadratic(_M, _D, _MU, _L, sg, 20, 0.0, pseed)
            d2[r, j] = 1.0 + prob.sigma_g ** 2 / (2 * _L ** 2)  # D^2 of Thm 5.2 with c_i^0 = 0, ||theta0 - theta*|| = 1
            for name, (alg, args) in algs.items():
                e = _run(prob, alg, args, s=s, K=_K, lr=lr, T=T, seed=pseed, init=prob.optimum + delta)
                out[name][r, j] = e[-1] if tail is None else float(np.mean(e[-tail:]))
                if r == 0 and sg == sigmas[-1]:
                    curves[name] = e.tolist()
    return out, curves, d2, lr


@claim("fedswa.thm52.sigma_g_free_full", PAPER, "Theorem 5.2 (strongly convex), full participation",
       "eps_opt = O(sigma^2/(mu T K s) (1 + s/alpha^2) + (m mu/s) D^2 exp(-(s/m + mu/beta) T)) 'is not affected by the "
       "data heterogeneity sigma_g'. With s = m and sigma = 0 (full gradients): FedMoSWA's ||theta_T - theta*||^2 "
       "after T rounds does not grow with sigma_g (slope of log error_T vs log sigma_g <= 0.1), while FedAvg and "
       "FedSWA (no drift correction) keep a drift floor that grows like sigma_g^2.", kind=PAPER_CLAIM)
def _sigma_g_full(ctx: CheckContext) -> Outcome:
    return sigma_g_full(ctx)


def _converged(err0: np.ndarray) -> dict:
    """The checked algorithm at sigma_g = 0 (no heterogeneity) from ||theta_0 - theta*||^2 = 1: an algorithm that
    never moves keeps error 1 at every sigma_g, so it would pass a 'does not grow with sigma_g' test; requiring
    convergence here (error below 1e-2) makes the check fail for it."""
    med = float(np.median(err0))
    return {"error_at_sigma_g_0_median": med, "converged": bool(med <= 1e-2), "threshold": 1e-2}


def sigma_g_full(ctx: CheckContext, algorithm: str = "fedmoswa", args: dict | None = None,
                 rounds: int | None = None, seeds: int | None = None) -> Outcome:
    """``algorithm``/``args`` replace FedMoSWA as the checked algorithm (tests plant defects)."""
    T, R = (40, 3) if ctx.quick else (60, 3)
    T, R = rounds or T, seeds or R
    sigmas = [0.0, 1.0, 4.0]
    algs = {"fedmoswa": (algorithm, _MOSWA if args is None else args), "fedswa": ("fedswa", _FEDSWA),
            "fedavg": ("fedavg", {})}
    err, curves, d2, lr = _sigma_sweep(ctx, _M, T, R, sigmas, algs, None)
    pos = [j for j, sg in enumerate(sigmas) if sg > 0]
    xs = [sigmas[j] for j in pos]
    res = stats.slope_at_most(xs, err["fedmoswa"][:, pos], 0.1)
    contrast = {a: stats.slope(xs, err[a][:, pos]).to_dict() for a in ("fedswa", "fedavg")}
    verdict = verdict_from(res.passed, res.details["confirmed"])
    conv = _converged(err["fedmoswa"][:, 0])
    if verdict == HOLDS and not conv["converged"]:
        verdict = UNINFORMATIVE
    est = res.estimate
    fa = contrast["fedavg"]["estimate"]
    fs = contrast["fedswa"]["estimate"]
    key = (f"FedMoSWA error_T slope vs sigma_g {est:+.3f} (<= 0.1 required); FedSWA {fs:+.2f}, FedAvg {fa:+.2f}; "
           f"error_T at sigma_g=4: {np.median(err['fedmoswa'][:, -1]):.2e} vs FedSWA {np.median(err['fedswa'][:, -1]):.2e}")
    evidence = {"sigma_g": sigmas, "T": T, "seeds": R, "error_T": {a: v.tolist() for a, v in err.items()},
                "checked_algorithm": algorithm, "frozen_reference_convergence": conv,
                "D2_thm52": d2.tolist(), "fedmoswa_slope_test": res.to_dict(), "contrast_slopes": contrast,
                "premises": {**_eta_tilde_ok(lr, _K, _ALPHA, _L, _M, _M, _MU), "T": T, "full_participation": True,
                             "sigma": 0.0, "constant_local_lr": True, "option": "II (= the proofs' c update under a "
                             "constant LR)"},
                "reading": "sigma_g enters FedMoSWA only through D^2 (its c_i^0 = 0 lag) and the transient; FedAvg's "
                           "and FedSWA's fixed points move away from theta* by an amount linear in sigma_g."}
    series = {"error_vs_round": {"x": list(range(T + 1)), "y": curves, "xlabel": "round t",
                                 "ylabel": f"||theta_t - theta*||^2 (sigma_g={sigmas[-1]}, seed 0)", "logy": True},
              "error_T_vs_sigma_g": {"x": xs, "y": {a: np.median(v[:, pos], 0).tolist() for a, v in err.items()},
                                     "xlabel": "sigma_g", "ylabel": "||theta_T - theta*||^2 (median over seeds)",
                                     "logx": True, "logy": True}}
    cond = (f"Toy A (m={_M}, d={_D}, client Hessians diag(perm(linspace({_MU},{_L}))), beta={_L}), full participation "
            f"s=m, full local gradients (sigma=0), K={_K}, eta_l={lr:.4g} (= 1/(2 beta K alpha)), theta_0 = theta* + "
            f"unit vector, T={T}; FedMoSWA rho=1 (constant LR, as the proofs assume), alpha={_ALPHA}, gamma={_GAMMA}, "
            f"Option II; FedSWA rho=0.1, alpha={_ALPHA}; FedAvg eta_g=1; {R} problem seeds.")
    return Outcome(verdict, key, evidence, cond, series)


@claim("fedswa.thm52.sigma_g_free_partial", PAPER, "Theorem 5.2 (strongly convex), partial participation s < m",
       "Theorem 5.2 is stated with s of m clients per round (its rate has s/m): 'eps_opt is not affected by the data "
       "heterogeneity sigma_g'. With s < m and sigma = 0, the stationary error of FedMoSWA (mean ||theta_t - theta*||^2 "
       "over the last rounds) does not grow with sigma_g (slope <= 0.1). The proof covers only full participation "
       "(Lemma G.11 averages the m update over all m clients), so this is the open case.", kind=PAPER_CLAIM)
def _sigma_g_partial(ctx: CheckContext) -> Outcome:
    return sigma_g_partial(ctx)


def sigma_g_partial(ctx: CheckContext, algorithm: str = "fedmoswa", args: dict | None = None,
                    gamma_sweep: bool = True) -> Outcome:
    """``algorithm``/``args`` replace FedMoSWA as the checked algorithm (tests: SCAFFOLD's exact mean of the
    control variates repairs the sigma_g floor)."""
    T, R, tail = (60, 3, 20) if ctx.quick else (150, 3, 50)
    s = 2
    sigmas = [0.0, 1.0, 4.0]
    algs = {"fedmoswa": (algorithm, _MOSWA if args is None else args), "scaffold": ("scaffold", {}),
            "fedavg": ("fedavg", {})}
    err, curves, d2, lr = _sigma_sweep(ctx, s, T, R, sigmas, algs, tail)
    pos = [j for j, sg in enumerate(sigmas) if sg > 0]
    xs = [sigmas[j] for j in pos]
    res = stats.slope_at_most(xs, err["fedmoswa"][:, pos], 0.1)
    scaffold = stats.slope_at_most(xs, err["scaffold"][:, pos], 0.1)
    verdict = verdict_from(res.passed, res.details["confirmed"])
    conv = _converged(err["fedmoswa"][:, 0])
    if verdict == HOLDS and not conv["converged"]:
        verdict = UNINFORMATIVE
    # the heuristic of fedswa.md 5.4 item 5: floor ~ gamma sigma_g^2 / s; slope of the floor in gamma at sigma_g = 1
    gammas = ([0.05, 0.2, 0.8] if not ctx.quick else [0.05, 0.8]) if gamma_sweep else [0.05, 0.8]
    lr_g = 1.0 / (2 * _L * _K * _ALPHA)
    gfloor = np.ones((R, len(gammas)))
    for r in range(R if gamma_sweep else 0):
        pseed = 100 * ctx.seed + r
        prob = hetero_quadratic(_M, _D, _MU, _L, 1.0, 20, 0.0, pseed)
        for j, gm in enumerate(gammas):
            e = _run(prob, "fedmoswa", {**_MOSWA, "gamma": gm}, s=s, K=_K, lr=lr_g, T=T, seed=pseed,
                     init=prob.optimum + _unit(_D, pseed))
            gfloor[r, j] = float(np.mean(e[-tail:]))
    gamma_slope = stats.slope(gammas, gfloor)
    key = (f"FedMoSWA stationary error slope vs sigma_g {res.estimate:+.2f} (<= 0.1 claimed); level at sigma_g=4 "
           f"{np.median(err['fedmoswa'][:, -1]):.2e} vs SCAFFOLD {np.median(err['scaffold'][:, -1]):.2e}")
    evidence = {"sigma_g": sigmas, "s": s, "m": _M, "T": T, "tail_rounds": tail, "seeds": R,
                "checked_algorithm": algorithm, "frozen_reference_convergence": conv,
                "stationary_error": {a: v.tolist() for a, v in err.items()}, "D2_thm52": d2.tolist(),
                "fedmoswa_slope_test": res.to_dict(), "scaffold_slope_test": scaffold.to_dict(),
                "gamma_sweep_sigma_g_1": {"gamma": gammas, "stationary_error": gfloor.tolist(),
                                          "slope_vs_gamma": gamma_slope.estimate,
                                          "interval": list(gamma_slope.interval)},
                "premises": {**_eta_tilde_ok(lr, _K, _ALPHA, _L, s, _M, _MU), "T": T, "sigma": 0.0,
                             "constant_local_lr": True},
                "reading": "with s < m, m <- (1-gamma) m + gamma mean_{S_t} c_i^+ is an average over the SAMPLED clients "
                           "only, whose c_i^+ -> grad F_i(theta*) (spread sigma_g) do not average to 0, so m keeps "
                           "fluctuating by about sqrt(gamma/s) sigma_g (fedswa.md 5.4 item 5); SCAFFOLD's c stays the exact "
                           "mean of all c_i and has no such floor."}
    series = {"error_vs_round": {"x": list(range(T + 1)), "y": curves, "xlabel": "round t",
                                 "ylabel": f"||theta_t - theta*||^2 (s={s} of {_M}, sigma_g={sigmas[-1]}, seed 0)",
                                 "logy": True},
              "stationary_vs_sigma_g": {"x": xs, "y": {a: np.median(v[:, pos], 0).tolist() for a, v in err.items()},
                                        "xlabel": "sigma_g", "ylabel": f"mean error, last {tail} rounds",
                                        "logx": True, "logy": True}}
    cond = (f"Toy A (m={_M}, d={_D}), s={s} clients sampled uniformly per round, full local gradients (sigma=0), "
            f"K={_K}, eta_l={lr:.4g}, theta_0 = theta* + unit vector, T={T}; FedMoSWA rho=1, alpha={_ALPHA}, "
            f"gamma={_GAMMA}, Option II; SCAFFOLD (server LR 1) and FedAvg as controls; {R} seeds.")
    return Outcome(verdict, key, evidence, cond, series)


def _floor(ctx, seed, *, K, alpha, s, eta_tilde, T, tail, sigma_noise, lr_fn=None):
    prob = hetero_quadratic(_M, _D, _MU, _L, 0.0, 20, sigma_noise, seed)
    lr = eta_tilde / (K * alpha) if lr_fn is None else lr_fn(eta_tilde, K, alpha)
    args = {**_MOSWA, "alpha": alpha}
    e = _run(prob, "fedmoswa", args, s=s, K=K, lr=lr, T=T, seed=seed, init=prob.optimum + _unit(_D, seed),
             batch_size=4)
    return float(np.mean(e[-tail:])), e


def predicted_floor_ratio(K: int, s: int, alpha: float) -> float:
    """The sigma^2 term of Theorem 5.2 (SC) at a fixed effective step eta~ = K eta_l alpha: (1 + s/alpha^2)/(K s)."""
    return (1.0 + s / alpha ** 2) / (K * s)


@claim("fedswa.thm52.faster_alpha_s_K", PAPER, "Theorem 5.2 (strongly convex), sigma^2 term",
       "'FedMoSWA converges faster as alpha, s and K increase': the stochastic term sigma^2/(mu T K s) (1 + s/alpha^2) "
       "falls with each of them. At a fixed effective step eta~ = K eta_l alpha (the proof's Lemma G.13 recursion), the "
       "stationary error scales like eta~ sigma^2 (1 + s/alpha^2)/(K s). Checked: the stationary error decreases in K, in "
       "alpha and in s (slope of log error vs log X <= 0, each).", kind=PAPER_CLAIM)
def _faster(ctx: CheckContext) -> Outcome:
    return faster(ctx)


def faster(ctx: CheckContext, lr_fn=None, only: tuple | None = None, seeds: int | None = None) -> Outcome:
    """``lr_fn(eta~, K, alpha) -> eta_l`` plants a wrong step size (tests); default eta~ / (K alpha)."""
    T, R, tail = (10, 2, 4) if ctx.quick else (60, 6, 30)
    R = seeds or R
    eta_tilde, noise = 0.5, 1.0
    sweeps = {"K": ([2, 4, 8], lambda v: {"K": v, "alpha": _ALPHA, "s": _M}),
              "alpha": ([1.0, 1.5, 2.0], lambda v: {"K": 4, "alpha": v, "s": _M}),
              "s": ([2, 4, 8], lambda v: {"K": 4, "alpha": _ALPHA, "s": v})}
    if ctx.quick:
        sweeps = {k: (v[0][:2], v[1]) for k, v in sweeps.items()}
    if only is not None:
        sweeps = {k: v for k, v in sweeps.items() if k in only}
    cache: dict = {}
    results, evidence, series = {}, {}, {}
    for name, (values, cfg) in sweeps.items():
        floors = np.zeros((R, len(values)))
        for r in range(R):
            for j, v in enumerate(values):
                c = cfg(v)
                k = (r, c["K"], c["alpha"], c["s"])
                if k not in cache:
                    cache[k] = _floor(ctx, 100 * ctx.seed + r, eta_tilde=eta_tilde, T=T, tail=tail,
                                      sigma_noise=noise, lr_fn=lr_fn, **c)[0]
                floors[r, j] = cache[k]
        res = stats.slope_at_most(values, floors, 0.0)
        pred = [predicted_floor_ratio(**{kk: cfg(v)[kk] for kk in ("K", "s", "alpha")}) for v in values]
        pred_slope = float(np.polyfit(np.log(values), np.log(pred), 1)[0])
        results[name] = res
        two = stats.slope(values, floors)
        evidence[name] = {"values": values, "stationary_error": floors.tolist(), "test": res.to_dict(),
                          "two_sided_interval": list(two.interval),
                          "predicted_slope_inside_interval": bool(two.interval[0] <= pred_slope <= two.interval[1]),
                          "predicted_slope_fixed_eta_tilde": pred_slope}
        series[f"floor_vs_{name}"] = {"x": values, "y": {"measured (median)": np.median(floors, 0).tolist(),
                                                         "bound's (1+s/alpha^2)/(Ks), scaled": (
                                                             np.array(pred) / pred[0] * np.median(floors[:, 0])).tolist()},
                                      "xlabel": name, "ylabel": f"mean ||theta - theta*||^2, last {tail} rounds",
                                      "logx": True, "logy": True}
    passed = all(r.passed for r in results.values())
    confirmed = all(r.details["confirmed"] for r in results.values())
    verdict = verdict_from(passed, confirmed)
    key = "; ".join(f"{n}: slope {r.estimate:+.2f} [{evidence[n]['two_sided_interval'][0]:+.2f}, "
                    f"{evidence[n]['two_sided_interval'][1]:+.2f}] (bound's {evidence[n]['predicted_slope_fixed_eta_tilde']:+.2f})"
                    for n, r in results.items())
    evidence["settings"] = {"eta_tilde": eta_tilde, "label_noise": noise, "batch_size": 4, "T": T,
                            "tail": tail, "seeds": R, "sigma_g": 0.0}
    evidence["note"] = ("at a fixed eta_l instead, raising K or alpha raises eta~ and with it the noise floor; the "
                        "comparison at fixed eta~ is the one the bound's rate term is about. The s sweep is partial "
                        "participation for s < m (sigma_g = 0 here, so no heterogeneity floor).")
    cond = (f"Toy A with sigma_g=0 (m={_M}, d={_D}, beta={_L}), label noise {noise} and minibatches of 4 of 20 samples "
            f"(sigma > 0), FedMoSWA rho=1, gamma={_GAMMA}, Option II, eta~ = K eta_l alpha = {eta_tilde} fixed "
            f"(<= 1/beta), theta_0 = theta* + unit vector, T={T}, stationary error = mean over the last {tail} rounds, "
            f"{R} seeds; defaults K=4, alpha={_ALPHA}, s={_M} when not swept.")
    return Outcome(verdict, key, evidence, cond, series)


# --------------------------------------------------------------------------------------------------
# Theorem 5.1: uniform stability on neighbouring datasets


def b_tilde(mu: float, beta: float, K: int, T: int) -> float:
    """b~ = 1 + (mu/((beta + mu) K))^{K-1} (1/T) of Theorem 5.1 (strongly convex)."""
    return 1.0 + (mu / ((beta + mu) * K)) ** (K - 1) / T


def stability_bound(m: int, n: int, beta: float, mu: float, T: int, K: int, L: float, sigma_g: float,
                    sigma: float, momentum: bool) -> float:
    """Parameter-stability bound of Thms E.3 (FedSWA) / F.3 (FedMoSWA), strongly convex:
    E||theta_T - theta'_T|| <= (2/(m n beta)) e^{1 - mu/((beta+mu) T)} (b~ L + b~ sigma_g + b~ sigma), with sigma_g
    not multiplied by b~ for FedMoSWA."""
    b = b_tilde(mu, beta, K, T)
    return 2.0 / (m * n * beta) * math.exp(1 - mu / ((beta + mu) * T)) * (
        b * L + (1.0 if momentum else b) * sigma_g + b * sigma)


def nested_clients(m: int, d: int, n_max: int, sigma_g_scale: float, noise: float, seed: int):
    """Client data for the stability check: rows x ~ N(0, diag(h_i)/2) (the law the whitened rows of Toy A
    approximate), y = x . w_i* + noise, w_i* = w0 + sigma_g_scale * u_i. Returned as arrays (m, n_max, d) and
    (m, n_max); the dataset with n samples per client is the first n rows, so datasets with different n are nested
    and the replaced sample (row j < n_min) is the same for every n."""
    rng = np.random.default_rng([seed, 51])
    h = np.stack([rng.permutation(np.linspace(0.2, 1.0, d)) for _ in range(m)])
    w0 = rng.normal(size=d)
    w_i = w0 + sigma_g_scale * rng.normal(size=(m, d))
    X = rng.normal(size=(m, n_max, d)) * np.sqrt(h / 2.0)[:, None, :]
    y = np.einsum("mnd,md->mn", X, w_i) + noise * rng.normal(size=(m, n_max))
    return X, y, h, w_i


def _dataset(X: np.ndarray, y: np.ndarray, n: int, replace: tuple | None = None) -> FederatedDataset:
    """FederatedDataset from the first n rows per client; ``replace = (client, row, x', y')``."""
    Xn, yn = X[:, :n].copy(), y[:, :n].copy()
    if replace is not None:
        c, j, xr, yr = replace
        Xn[c, j], yn[c, j] = xr, yr
    clients = [(torch.tensor(Xn[i], dtype=torch.float32), torch.tensor(yn[i], dtype=torch.float32))
               for i in range(len(Xn))]
    return FederatedDataset.from_tensors(clients, clients[0], task="regression", name=f"nested(n={n})")


def _constants_along(data: FederatedDataset, thetas: torch.Tensor, lam: float, m: int) -> dict:
    """L, sigma (C.3) and sigma_g (C.5, first moment) as maxima over the visited iterates (float64)."""
    X = data.x_train.double()
    y = data.y_train.double()
    Lmax = sig = sg = 0.0
    for th in thetas:
        per = 2 * (X @ th - y)[:, None] * X + lam * th[None, :]  # per-sample gradients of l + (lam/2)||.||^2
        Lmax = max(Lmax, float(per.norm(dim=1).max()))
        gi = torch.stack([per[idx].mean(0) for idx in data.clients])
        g = gi.mean(0)
        sg = max(sg, float((gi - g).norm(dim=1).mean()))
        for c, idx in enumerate(data.clients):
            sig = max(sig, float(((per[idx] - gi[c]) ** 2).sum(1).mean().sqrt()))
    return {"L": Lmax, "sigma": sig, "sigma_g": sg}


def _stability_setups(seed: int, m: int, d: int, ns: list, seeds: int, reps: int, sg_scale: float, noise: float,
                      lam: float) -> tuple[list, float]:
    """Per seed, the nested client data and ``reps`` neighbouring replacements (client, row, x', y'), and the
    largest per-sample smoothness beta = 2||x||^2 + lam over every row and replacement drawn."""
    setups = []  # (seed, X, y, [(client, row, x', y')])
    beta = 0.0
    for sd in range(seeds):
        pseed = 100 * seed + sd
        X, y, h, w_i = nested_clients(m, d, max(ns), sg_scale, noise, pseed)
        rng = np.random.default_rng([pseed, 52])
        reps_list = []
        for _ in range(reps):
            c, j = int(rng.integers(m)), int(rng.integers(min(ns)))
            xr = rng.normal(size=d) * np.sqrt(h[c] / 2.0)
            reps_list.append((c, j, xr, float(xr @ w_i[c] + noise * rng.normal())))
            beta = max(beta, 2 * float(xr @ xr) + lam)
        beta = max(beta, 2 * float((X ** 2).sum(-1).max()) + lam)
        setups.append((sd, X, y, reps_list))
    return setups, beta


@claim("fedswa.thm51.stability", PAPER, "Theorem 5.1 (strongly convex) via Thms E.3 / F.3",
       "Uniform stability: for S, S' differing in one sample, E||theta_T - theta'_T|| <= (2/(m n beta)) "
       "e^{1 - mu/((beta+mu)T)} (b~ L + b~ sigma_g + b~ sigma) for FedSWA and (b~ L + sigma_g + b~ sigma) for FedMoSWA "
       "(Option I), with eta_k^t <= 1/(beta K T), all clients participating, b~ = 1 + (mu/((beta+mu)K))^{K-1}/T; hence "
       "eps_gen <= L E||theta_T - theta'_T|| = O(1/(mn)). Checked: the measured ||theta_T - theta'_T|| is below the "
       "bound, and scales like 1/(mn) (slope -1 in n at fixed m).", kind=PAPER_CLAIM)
def _stability(ctx: CheckContext) -> Outcome:
    return stability(ctx)


def stability(ctx: CheckContext, truncate: int | None = None) -> Outcome:
    """``truncate``: plant a data bug (every run trains on the first ``truncate`` samples per client only, so
    ||theta_T - theta'_T|| cannot shrink with n)."""
    m, d, K, lam = 4, 5, 5, 0.1
    T = 6 if ctx.quick else 20
    ns = [10, 20, 40]
    seeds, reps = (1, 3) if ctx.quick else (2, 4)
    noise, sg_scale = 0.5, 1.0
    algs = {"fedswa": ("fedswa", {"rho": 0.1, "alpha": 1.0}, False),
            "fedmoswa": ("fedmoswa", {"rho": 0.1, "alpha": 1.0, "gamma": _GAMMA, "option": 1}, True)}
    model = bias_free_linear(d)
    setups, beta = _stability_setups(ctx.seed, m, d, ns, seeds, reps, sg_scale, noise, lam)
    mu = lam  # per-sample strong convexity of (x . theta - y)^2 + (lam/2)||theta||^2
    lr = 1.0 / (beta * K * T)
    deltas = {a: np.zeros((seeds * reps, len(ns))) for a in algs}
    ratios = {a: [] for a in algs}
    bounds = {a: {} for a in algs}
    init = torch.zeros(d, dtype=torch.float64)
    for a, (alg, args, momentum) in algs.items():
        for sd, X, y, reps_list in setups:
            def final(dset, alg=alg, args=args, sd=sd):
                exp = Experiment(algorithm=alg, dataset=dset, num_clients=None, model=model, clients_per_round=None,
                                 rounds=T, local_steps=K, batch_size=None, lr=lr, algorithm_args=args,
                                 weight_decay=lam, seed=100 * ctx.seed + sd, device="cpu", eval_every=T,
                                 eval_train_samples=None)
                return trace(exp, init=init).params

            for jn, n in enumerate(ns):
                n_used = n if truncate is None else min(n, truncate)
                base_data = _dataset(X, y, n_used)
                base = final(base_data)
                const = _constants_along(base_data, base, lam, m)
                bnd = stability_bound(m, n, beta, mu, T, K, const["L"], const["sigma_g"], const["sigma"], momentum)
                bounds[a][f"seed{sd},n={n}"] = {"bound": bnd, **const}
                for k, rep in enumerate(reps_list):
                    dlt = float((final(_dataset(X, y, n_used, rep))[-1] - base[-1]).norm())
                    deltas[a][sd * reps + k, jn] = dlt
                    ratios[a].append(dlt / bnd)
    slope_tests = {a: stats.slope(ns, deltas[a], expected=-1.0) for a in algs}
    bound_tests = {a: stats.upper_bound(np.array(ratios[a]), 1.0) for a in algs}
    passed = all(t.passed for t in slope_tests.values()) and all(t.passed for t in bound_tests.values())
    # power: the slope interval must exclude both "no dependence" (0) and the square-root rate (-1/2)
    confirmed = all(t.details["confirmed"] for t in bound_tests.values()) and all(
        t.interval[1] < -0.5 and t.interval[0] > -1.5 for t in slope_tests.values())
    verdict = verdict_from(passed, confirmed)
    key = "; ".join(f"{a}: slope in n {slope_tests[a].estimate:+.2f} [{slope_tests[a].interval[0]:+.2f}, "
                    f"{slope_tests[a].interval[1]:+.2f}] (pred -1), Delta/bound {np.mean(ratios[a]):.2f}" for a in algs)
    evidence = {"n": ns, "m": m, "seeds": seeds, "replacements_per_seed": reps, "beta": beta, "mu": mu, "eta_l": lr,
                "b_tilde": b_tilde(mu, beta, K, T), "Delta_T": {a: v.tolist() for a, v in deltas.items()},
                "slope_tests": {a: t.to_dict() for a, t in slope_tests.items()},
                "bound_tests_Delta_over_bound": {a: t.to_dict() for a, t in bound_tests.items()},
                "bounds": bounds,
                "fedmoswa_over_fedswa_Delta": float(np.mean(deltas["fedmoswa"] / deltas["fedswa"])),
                "slack_bound_over_Delta": {a: float(1 / np.mean(v)) for a, v in ratios.items()},
                "frozen_reference": "an algorithm that never moves has Delta = 0: it meets the bound, but not the 1/(mn) "
                                    "scaling the check also requires (slope -1 in n, excluding 0 and -1/2)",
                "notes": "L, sigma, sigma_g are maxima over the iterates the base run visits (the squared loss is "
                         "Lipschitz only on bounded sets); beta is the largest per-sample smoothness 2||x||^2 + lam over "
                         "every dataset used; b~ ~ 1, so the FedSWA and FedMoSWA bounds nearly coincide (fedswa.md 5.4)."}
    series = {"Delta_vs_n": {"x": ns, "y": {a: np.median(v, 0).tolist() for a, v in deltas.items()},
                             "xlabel": "n (samples per client, m fixed)", "ylabel": "||theta_T - theta'_T|| (median)",
                             "logx": True, "logy": True}}
    cond = (f"m={m} clients, d={d}, client optima w0 + {sg_scale} N(0, I), label noise {noise}, per-sample loss (x.theta - y)^2 + "
            f"({lam}/2)||theta||^2 (weight decay {lam}), full participation, full local gradients, K={K}, T={T}, "
            f"eta_l = 1/(beta K T) = {lr:.3g}, alpha=1 (the proofs' averaging), FedSWA rho=0.1, FedMoSWA rho=0.1 "
            f"Option I; client rows x ~ N(0, diag(h_i)/2), h_i a permutation of linspace(0.2, 1, d), datasets nested "
            f"in n (the first n rows); neighbouring dataset: row j < {min(ns)} of one client replaced by a fresh draw "
            f"(the same replacement for every n); coupled runs (same theta_0 = 0, seed); {seeds} seeds x {reps} "
            f"replacements.")
    return Outcome(verdict, key, evidence, cond, series)

