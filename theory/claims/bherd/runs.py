"""BHerd's runs for the claims: the project's ``bherd`` through the benchmark's run path (``theory.runs.trace``),
with the algorithm's herding diagnostics (the stored local steps z_l, which rows are real, which were kept)
collected by an observer; and the toy quadratic the checks share.
"""
from __future__ import annotations

from benchmark.runs.experiment import Experiment
from theory import problems
from theory.runs import Diagnostics, trace

HERD_DIAGNOSTICS = ("herd_steps", "herd_valid", "herd_selected")


def herd_rounds(diag: Diagnostics) -> list[list[dict]]:
    """Per round, per sampled client: {"client", "Z" (the real stored steps z_l, float64), "sel" (kept rows),
    "k" (how many)} from the algorithm's herding diagnostics."""
    out = []
    for rnd in diag.rounds:
        recs = []
        for cid, d in rnd:
            v = d["herd_valid"][0].bool()
            sel = d["herd_selected"][0].bool()[v]
            recs.append({"client": cid, "Z": d["herd_steps"][0].double()[v].clone(), "k": int(sel.sum()),
                         "sel": sel.clone()})
        out.append(recs)
    return out


def bherd_run(prob, *, alpha: float, selection: str, T: int, lr: float, batch: int, seed: int,
               record: bool, init=None, model=None, data=None, partition: str = "auto", num_clients=None,
               algorithm: str = "bherd", args: dict | None = None, weight_decay: float = 0.0, executor: str | None = None):
    exp = Experiment(algorithm=algorithm, dataset=data if data is not None else prob.data, partition=partition,
                     num_clients=num_clients, model=model if model is not None else prob.model,
                     clients_per_round=None, rounds=T, local_epochs=1, batch_size=batch, lr=lr, weight_decay=weight_decay,
                     algorithm_args={"alpha": alpha, "selection": selection, **(args or {})}, seed=seed,
                     device="cpu", executor=executor or ("sequential" if record else "vectorized"), eval_every=T,
                     eval_train_samples=None)
    diag = Diagnostics(HERD_DIAGNOSTICS) if record else None
    tr = trace(exp, init=init, observers=[diag] if diag is not None else ())
    return tr, herd_rounds(diag) if diag is not None else []


CLIENTS, DIM, SAMPLES, BATCH, LR = 5, 10, 40, 4, 0.05  # clients, dimension, samples per client, batch (tau = 10), eta


def toy_quadratic(seed: int, sigma_g: float = 1.0, noise: float = 0.5, d: int = DIM, n: int = SAMPLES):
    return problems.quadratic(num_clients=CLIENTS, d=d, mu=0.1, L=1.0, sigma_g=sigma_g, samples_per_client=n,
                              noise=noise, seed=seed)
