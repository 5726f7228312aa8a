"""LFL, Sec. 3.2: the O(1/T) rates derived in lfl.md 5.6 (not stated in the paper) for tau = 1 and for Gamma = 0,
with eta(t) = alpha/(t + beta).
"""
from __future__ import annotations

from theory import stats
from theory.claims import DERIVED, INCONCLUSIVE, CheckContext, Outcome, claim
from theory.claims.lfl.formulas import lr_schedule
from theory.problems import ConvexProblem, hetero_quadratic, linear_gamma, quadratic
from theory.runs import run_lfl, seeds_for, sq_errors, start_point
from theory.verdicts import diverged, rate_verdict, rate_window, slope_summary

ALPHA = 1e-3  # false-alarm rate of every statistical claim here
RATE_TOL = 0.15  # slope tolerance of the O(1/T) checks (lfl.md recipe 8: slope in [-1.15, -0.85])


# -- O(1/T) rates (derived, lfl.md 5.6) --
# d = 50, a = mu alpha (tau - (alpha/beta)(tau - 1)) >= 8 and a start close to theta* (radius 0.1): the error
# of one run fluctuates less (more coordinates), forgets faster (relaxation time (t + beta)/a), and the window
# is not dominated by the decay of a random initial direction (which made per-seed slopes vary twice as
# much), so per-seed slopes have sd ~0.08 and 8-10 seeds can confirm slope <= -0.85.
RATE_TAU1 = {
    "num_clients": 10,
    "d": 50,
    "mu": 0.5,
    "L": 1.0,
    "sigma_g": 1.0,
    "samples_per_client": 60,
    "noise": 0.5,
    "seed": 0,
}
RATE_TAU1_RUN = {"tau": 1, "batch": 20, "alpha": 16.0, "beta": 32.0, "q1": 2, "radius": 0.1}
RATE_G0 = {
    "num_clients": 5,
    "d": 50,
    "mu": 0.5,
    "L": 1.0,
    "spread": 0.0,
    "samples_per_client": 60,
    "noise": 0.5,
    "seed": 0,
    "orthogonal_noise": True,
}
RATE_G0_RUN = {"tau": 4, "batch": 20, "alpha": 8.0, "beta": 16.0, "q1": 2, "radius": 0.1}


def _rate_runs(ctx: CheckContext, p: ConvexProblem, c: dict, name: str, args: dict, n_seeds: int, rounds: int):
    """The runs of one algorithm of ``_rate_check``: tau local steps, eta(t) = alpha/(t + beta), a start at
    distance ``c["radius"]`` from theta*, on the first ``n_seeds`` seeds."""
    return [
        run_lfl(
            p,
            name,
            args,
            rounds=rounds,
            local_steps=c["tau"],
            batch_size=c["batch"],
            lr=lr_schedule(c["alpha"], c["beta"]),
            seed=s,
            theta0=start_point(p, s, c["radius"]),
        )
        for s in seeds_for(ctx, n_seeds)
    ]


def _rate_check(
    ctx: CheckContext, p: ConvexProblem, c: dict, algs: list[tuple[str, dict, int]], rounds: int, what: str
) -> Outcome:
    """O(1/T) check of the first algorithm of ``algs`` ((name, args, seeds)); the others are run on the
    first of the same seeds as references (their slopes and the error ratio are evidence only)."""
    tau, a, b = c["tau"], c["alpha"], c["beta"]
    cc = tau - (a / b) * (tau - 1)
    premise = {
        "alpha/beta <= min(1, 1/(mu tau))": a / b <= min(1.0, 1.0 / (p.mu * tau)),
        "mu alpha (tau - (alpha/beta)(tau-1)) > 1": p.mu * a * cc > 1,
    }
    T = rate_window(rounds)
    radius = c["radius"]
    tests, ev, series, curves = [], {}, {}, {}
    for i, (name, args, n_seeds) in enumerate(algs):
        runs = _rate_runs(ctx, p, c, name, args, n_seeds, rounds)
        if (bad := diverged(runs)) is not None:
            return bad
        err = sq_errors(p, runs)
        t, summ = slope_summary(T + b, err[:, T], -1.0 + RATE_TOL, ALPHA)
        summ["seeds"] = n_seeds
        if i == 0:
            tests.append(t)
        else:
            summ["role"] = "reference (not part of the verdict)"
        curves[name] = err
        summ["error_at_round"] = {int(r): float(err.mean(0)[r]) for r in T[[0, len(T) // 2, -1]]}
        ev[name] = summ
        series[name] = err.mean(0).tolist()
    if len(algs) == 2:  # recipe 8: the quantized/lossless ratio stays bounded (does not grow with T)
        n = min(algs[0][2], algs[1][2])
        ratio = curves[algs[0][0]][:n, T] / curves[algs[1][0]][:n, T]
        r = stats.slope(T + b, ratio, ALPHA)
        ev["ratio_first_over_second"] = {
            "mean_ratio_at_end": float(ratio[:, -1].mean()),
            "slope_of_ratio": r.estimate,
            "ci": r.interval,
        }
    verdict = rate_verdict(tests)
    if not all(premise.values()):
        verdict = INCONCLUSIVE
    ev["premises"] = premise
    ev["Gamma"] = linear_gamma(p)["Gamma"]
    first = ev[algs[0][0]]
    return Outcome(
        verdict,
        f"slope {first['slope']:.3f} [{first['two_sided_ci'][0]:.3f}, {first['two_sided_ci'][1]:.3f}]"
        + (f"; lossless {ev[algs[1][0]]['slope']:.3f}" if len(algs) == 2 else ""),
        ev,
        f"{what}; tau={tau}, batch {c['batch']}, eta(t) = {a}/(t + {b}), all devices, ||theta(0) - "
        "theta*|| = "
        f"{radius:g}; "
        f"{', '.join(f'{n} ({k} seeds)' for n, _, k in algs)} x {rounds} rounds; per-seed OLS slope of log "
        f"E||theta(T)-theta*||^2 against log(T + beta) over rounds {T[0]}..{T[-1]}; one-sided t test over "
        "seeds "
        f"of slope <= -1 + {RATE_TOL} (O(1/T) with the recipe's tolerance) for {algs[0][0]}"
        + (f"; {algs[1][0]} is a reference on the first seeds" if len(algs) == 2 else ""),
        {
            "error_vs_T": {
                "x": list(range(rounds + 1)),
                "y": series,
                "xlabel": "round T",
                "ylabel": "E||theta(T) - theta*||^2",
                "logx": True,
                "logy": True,
                "title": f"LFL O(1/T): {what}",
            }
        },
    )


@claim(
    "lfl.rate.tau1",
    "lfl",
    "Sec. 3.2 (limit claim); O(1/T) derived in lfl.md 5.6 (not stated in the paper)",
    "With tau = 1, eta(t) = alpha/(t + beta), alpha/beta <= min{1, 1/(mu tau)} and mu alpha (tau - "
    "(alpha/beta)"
    "(tau - 1)) > 1: E||theta(T) - theta*||^2 <= max{beta ||theta(0)-theta*||^2, K/(a-1)}/(T + beta) = "
    "O(1/T), "
    "so E F(theta(T)) - F* = O(1/T), for LFL (q1 = 2); the quantization only changes the constant "
    "(the LFL / lossless error ratio stays bounded)", kind=DERIVED)
def _rate_tau1(ctx: CheckContext) -> Outcome:
    return rate_tau1(ctx)


RATE_TAU1_FULL, RATE_TAU1_QUICK = (200, 10, 4), (60, 6, 2)  # rounds, seeds, reference seeds


def rate_tau1(ctx: CheckContext, algorithm: str = "lfl", rounds: int | None = None, seeds: int | None = None,
              reference: bool = True) -> Outcome:
    r0, n0, n_ref = RATE_TAU1_QUICK if ctx.quick else RATE_TAU1_FULL
    rounds, n = rounds or r0, seeds or n0
    c = RATE_TAU1_RUN
    algs = [(algorithm, {"q1": c["q1"], "q2": None}, n)] + ([("lossless", {}, n_ref)] if reference else [])
    return _rate_check(
        ctx,
        quadratic(**RATE_TAU1),
        c,
        algs,
        rounds,
        f"tau = 1, quadratic {RATE_TAU1}",
    )


@claim(
    "lfl.rate.gamma0",
    "lfl",
    "Sec. 3.2 (limit claim); O(1/T) derived in lfl.md 5.6 (not stated in the paper)",
    "With Gamma = 0 and tau > 1, eta(t) = alpha/(t + beta), alpha/beta <= min{1, 1/(mu tau)} and mu alpha "
    "(tau - (alpha/beta)(tau - 1)) > 1: E||theta(T) - theta*||^2 = O(1/T) for LFL (q1 = 2)", kind=DERIVED)
def _rate_gamma0(ctx: CheckContext) -> Outcome:
    return rate_gamma0(ctx)


RATE_G0_FULL, RATE_G0_QUICK = (150, 8), (60, 6)  # rounds, seeds


def rate_gamma0(ctx: CheckContext, algorithm: str = "lfl", rounds: int | None = None,
                seeds: int | None = None) -> Outcome:
    r0, n0 = RATE_G0_QUICK if ctx.quick else RATE_G0_FULL
    rounds, n = rounds or r0, seeds or n0
    c = RATE_G0_RUN
    return _rate_check(
        ctx,
        hetero_quadratic(**RATE_G0),
        c,
        [(algorithm, {"q1": c["q1"], "q2": None}, n)],
        rounds,
        f"Gamma = 0 with gradient noise at theta* (hetero_quadratic {RATE_G0}: every client's "
        "least-squares solution is theta*)",
    )
