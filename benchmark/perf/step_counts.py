"""Per-step counts of a federated round (issue 24): host syncs, kernels, bytes, FLOPs per local step, and
the bound they imply on a named GPU (``fedrepro bench --counts``).

A round is run through the engine as ``fedrepro bench`` runs it (``workloads.FederatedRound``: the job's
executor, then aggregation, counted apart as ``server``) with its local training under
:func:`benchmark.perf.counting.counting`, once with E local epochs (or S
local steps) and once with 2E (2S). What grows with the steps is the step's: per step = (count at 2E -
count at E) / (steps at 2E - steps at E), where a step is one step of all clients at once (vectorized) or
one client's step (sequential). What does not grow is the round's (set-up, aggregation).

Two settings: *clean* (every client the same size, full batches: ``local_steps``) and *padded* (FedBAT
Table 1's shape: clients of unequal size, ``local_epochs``, a partial last batch: padding rows and
masked steps in the vectorized executor).

Compiled steps (``compile=True``) are counted with :func:`benchmark.perf.counting.compiled_counting`
(``torch.profiler``: inductor's generated kernels plus the ATen operations still dispatched, e.g. the
extern ``mm``/convolution calls, and anything a graph break leaves eager), after a warm round that
compiles both shapes (E and 2E: the steps are unrolled in the graph). Their bytes and FLOPs are not
counted (None): a fused kernel's memory traffic is not seen, and the arithmetic is the uncompiled step's.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from dataclasses import dataclass

import torch
from torch.func import vmap
from torch.utils._pytree import tree_flatten

from algorithms.core import qp

from benchmark.datasets.federated_dataset import FederatedDataset
from benchmark.perf.counting import compiled_counting, counting, kernel_profile
from benchmark.perf.devices import GPUS
from benchmark.perf.workloads import FederatedRound
from benchmark.runs import plan
from benchmark.runs.experiment import Experiment
from benchmark.sim import engine


@dataclass(frozen=True)
class Setting:
    name: str  # "clean" | "padded"
    model: str
    input_shape: tuple[int, ...]
    num_classes: int
    clients: int
    batch_size: int
    sizes: tuple[int, ...]  # samples per client
    epochs: int | None  # local epochs (padded) ...
    steps: int | None  # ... or local steps (clean)


def table1_settings(model: str = "fedbat_cnn", shape=(1, 28, 28), clients: int = 10, batch: int = 64
                    ) -> list[Setting]:
    """Table 1's shapes (the FedBAT CNN, B = 64, 10 clients); clients of 40-130 images so that the
    padded setting has partial last batches and 1-3 steps per epoch (per-step counts do not depend on
    how many steps there are, and counting is slow: every operation passes through Python)."""
    sizes = tuple(40 + 10 * i for i in range(clients))
    return [Setting("clean", model, shape, 10, clients, batch, (batch * 2,) * clients, None, 1),
            Setting("padded", model, shape, 10, clients, batch, sizes, 1, None)]


def _data(s: Setting, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    clients = [(torch.randn(n, *s.input_shape, generator=g), torch.randint(0, s.num_classes, (n,), generator=g))
               for n in s.sizes]
    test = (torch.randn(s.num_classes, *s.input_shape, generator=g), torch.arange(s.num_classes))
    return FederatedDataset.from_tensors(clients, test, name="perf-synthetic", num_classes=s.num_classes)


def _round(s: Setting, algorithm: str, executor: str, scale: int, compile: bool, data):
    """One round; ``executor="batched"``: two runs (learning rates 0.01 and 0.02) as one vectorized job."""
    batched = executor == "batched"
    executor = "vectorized" if batched else executor
    exp = Experiment(algorithm=algorithm, dataset=data, model=s.model, num_clients=None,
                     clients_per_round=s.clients, rounds=1, batch_size=s.batch_size, lr=0.01, seed=0,
                     local_epochs=None if s.epochs is None else s.epochs * scale,
                     local_steps=None if s.steps is None else s.steps * scale, eval_train_samples=None,
                     divergence_factor=None, executor=executor, device="cpu",
                     **({"compile": True} if compile else {}))
    if batched:
        return FederatedRound(plan.group_job([exp, dataclasses.replace(exp, lr=0.02)]))
    return FederatedRound(exp)


def _steps(fr, executor: str) -> int:
    jobs = [j for p in fr.plans for j in p.jobs]
    if executor == "sequential":  # one client's step
        return sum(j.schedule.steps for j in jobs)
    return max(j.schedule.steps for j in jobs)


def step_counts(s: Setting, algorithm: str, executor: str, compile: bool = False) -> dict:
    """Counts per local step and per round (module docstring) of ``algorithm`` on ``s`` with ``executor``."""
    counter, warm = (compiled_counting, kernel_profile) if compile else (counting, contextlib.nullcontext)
    data, counts, steps, servers = _data(s), [], [], []
    for scale in (1, 2):
        fr = _round(s, algorithm, executor, scale, compile, data)
        if scale == 1 or compile:
            with warm():
                fr()  # warm: caches (the second round shares them), compilation (a new shape)
        with counter() as c:  # the clients' local training only: the server's work (e.g. GradMA's
            outs = engine.local_training(fr.runs, fr.plans, fr.executor, fr.hypers, [()] * len(fr.runs))
        with counting() as server:  # active-set QP) varies from round to round and is counted apart
            for run, p, o in zip(fr.runs, fr.plans, outs):
                engine.aggregate(run, p.round, p.ids, p.jobs, o, p.lr)
        servers.append(server)
        counts.append(c)
        steps.append(_steps(fr, executor))
    ds = steps[1] - steps[0]
    d = counts[1] - counts[0]
    per = {k: v / ds for k, v in d.as_dict().items() if k != "sync_ops"}
    fixed = {k: counts[0].as_dict()[k] - per[k] * steps[0] for k in per}
    per["sync_ops"] = {k: v / ds for k, v in d.sync_ops.items()}
    per["kernel_ops"] = {k: v / ds for k, v in d.kernel_ops.most_common()}  # what grows with the steps
    per["op_bytes"] = {k: v / ds for k, v in d.op_bytes.most_common()}  # and the bytes each operator moves
    if compile:  # not counted (module docstring)
        per["bytes"] = per["flops"] = fixed["bytes"] = fixed["flops"] = None
    return {"setting": s.name, "model": s.model, "algorithm": algorithm, "executor": executor,
            "compile": compile, "clients": s.clients, "batch_size": s.batch_size, "per_step": per,
            "per_round": fixed, "round_sync_ops": dict(counts[0].sync_ops),
            "server": servers[0].as_dict()}  # aggregation of the first round (not per step)


def bound(per_step: dict, gpu: str = "H100-SXM", tf32: bool = False) -> dict:
    """Lower bounds (seconds) on one step on ``gpu``: launches, memory traffic (unfused), arithmetic (None
    where not counted: compiled steps, whose bound is then not stated)."""
    g = GPUS[gpu]
    t = {"launch_s": per_step["kernels"] * g["launch"],
         "memory_s": None if per_step["bytes"] is None else per_step["bytes"] / g["bandwidth"],
         "compute_s": None if per_step["flops"] is None else per_step["flops"] / (g["tf32"] if tf32 else g["fp32"])}
    t["bound"] = None if None in t.values() else max(t, key=t.get).removesuffix("_s")
    return t


def with_setting(s: Setting, **changes) -> Setting:
    return dataclasses.replace(s, **changes)


def count_table(algorithms=("fedavg", "fedbat", "gradma"), executors=("sequential", "vectorized"),
                settings: list[Setting] | None = None, compiled: tuple[tuple[str, str, str], ...] = (),
                gpu: str = "H100-SXM", log=None) -> dict:
    """Per-step counts of every (setting, algorithm, executor), and of the (setting, algorithm, executor)
    triples in ``compiled`` with ``compile=True``; each row with its bound on ``gpu`` (:func:`bound`)."""
    settings = table1_settings() if settings is None else settings
    cells = [(s, a, e, False) for s in settings for a in algorithms for e in executors]
    cells += [(s, a, e, True) for s in settings for a in algorithms for e in executors
              if (s.name, a, e) in compiled]
    rows = []
    for s, a, e, c in cells:
        if log:
            log(f"counting {s.name} {a} {e}{' compiled' if c else ''}")
        r = step_counts(s, a, e, compile=c)
        r["bound"] = bound(r["per_step"], gpu)
        rows.append(r)
    return {"gpu": gpu, "gpu_peaks": GPUS[gpu], "load": list(os.getloadavg()), "rows": rows,
            "settings": [dataclasses.asdict(s) for s in settings]}


#: kernels per vectorized step at Table 1's setting when issue 24 was filed (main 9a676fb, "today's" in its
#: target: compiled at most 1/3 of these)
ISSUE_24_KERNELS = {"fedavg": 306, "fedbat": 635, "gradma": 943}


def compile_verdicts(result: dict) -> list[str]:
    """Markdown rows: compiled against uncompiled kernels per step, for each (setting, algorithm, executor)
    counted both ways, and issue 24's target (compiled <= 1/3 of the uncompiled count, and of the count
    when the issue was filed)."""
    plain = {(r["setting"], r["algorithm"], r["executor"]): r for r in result["rows"] if not r["compile"]}
    lines = ["| setting | algorithm | executor | kernels uncompiled | compiled | compiled / uncompiled | <= 1/3 "
             "| when filed (9a676fb) | compiled / then | <= 1/3 of then |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        u = plain.get((r["setting"], r["algorithm"], r["executor"]))
        if not r["compile"] or u is None:
            continue
        k, ku = r["per_step"]["kernels"], u["per_step"]["kernels"]
        then = ISSUE_24_KERNELS.get(r["algorithm"]) if r["setting"] == "padded" and r["executor"] == "vectorized" else None
        old = "- | - | -" if then is None else f"{then} | {k / then:.3f} | {'met' if 3 * k <= then else 'NOT met'}"
        lines.append(f"| {r['setting']} | {r['algorithm']} | {r['executor']} | {ku:.0f} | {k:.1f} | {k / ku:.3f} "
                     f"| {'met' if 3 * k <= ku else 'NOT met'} | {old} |")
    return lines if len(lines) > 2 else []


#: issue 24's targets on unfused bytes per vectorized padded step: at most this times the clean path's, and at
#: most this times the same clients' sequential steps (one client's step x clients)
BYTES_OVER_CLEAN, BYTES_OVER_SEQUENTIAL = 1.5, 2.0


def bytes_verdicts(result: dict) -> list[str]:
    """Markdown rows: per algorithm, the vectorized padded step's bytes against the vectorized clean step's
    and against the padded sequential step's x clients (the same clients one by one), with issue 24's
    targets (:data:`BYTES_OVER_CLEAN`, :data:`BYTES_OVER_SEQUENTIAL`); rows only where all three were
    counted (uncompiled)."""
    got = {(r["setting"], r["algorithm"], r["executor"]): r for r in result["rows"] if not r["compile"]}
    lines = ["| algorithm | padded vectorized | clean vectorized | padded sequential x clients | padded / clean "
             f"| <= {BYTES_OVER_CLEAN:g} | padded / sequential | <= {BYTES_OVER_SEQUENTIAL:g} |",
             "|---|---|---|---|---|---|---|---|"]
    for alg in dict.fromkeys(r["algorithm"] for r in result["rows"]):
        p, c, s = (got.get((setting, alg, e)) for setting, e in
                   (("padded", "vectorized"), ("clean", "vectorized"), ("padded", "sequential")))
        if p is None or c is None or s is None:
            continue
        bp, bc, bs = p["per_step"]["bytes"], c["per_step"]["bytes"], s["per_step"]["bytes"] * s["clients"]
        lines.append(f"| {alg} | {bp / 1e9:.3f} GB | {bc / 1e9:.3f} GB | {bs / 1e9:.3f} GB | {bp / bc:.2f} "
                     f"| {'met' if bp <= BYTES_OVER_CLEAN * bc else 'NOT met'} | {bp / bs:.2f} "
                     f"| {'met' if bp <= BYTES_OVER_SEQUENTIAL * bs else 'NOT met'} |")
    return lines if len(lines) > 2 else []


def per_op_table(result: dict, top: int = 16) -> list[str]:
    """Markdown: the operators that move the most bytes per step (unfused MB / kernels per step), one column
    per uncompiled row of ``result``; ordered by the first row's bytes."""
    rows = [r for r in result["rows"] if not r["compile"] and "op_bytes" in r["per_step"]]
    if not rows:
        return []
    ops = sorted({o for r in rows for o in r["per_step"]["op_bytes"]},
                 key=lambda o: -max(r["per_step"]["op_bytes"].get(o, 0) for r in rows[:1]))
    head = " | ".join(f"{r['algorithm']} {r['setting']} {r['executor']}" for r in rows)
    lines = [f"| operator (MB / kernels per step) | {head} |", "|---|" + "---|" * len(rows)]
    for o in ops[:top]:
        lines.append(f"| `{o}` | " + " | ".join(f"{r['per_step']['op_bytes'].get(o, 0) / 1e6:.1f} / "
                                                 f"{r['per_step']['kernel_ops'].get(o, 0):g}" for r in rows) + " |")
    lines.append("| all | " + " | ".join(f"{r['per_step']['bytes'] / 1e6:.1f} / {r['per_step']['kernels']:g}"
                                         for r in rows) + " |")
    return lines


def _fmt(v, unit: float, spec: str, suffix: str = "") -> str:
    return "-" if v is None else f"{v / unit:{spec}}{suffix}"


def markdown(result: dict, per_op: bool = False) -> str:
    """The count table as markdown (per local step: all clients at once when vectorized, one client's step
    when sequential); ``per_op``: also the bytes per operator (:func:`per_op_table`)."""
    g = result["gpu_peaks"]
    lines = [f"Per local step, counted on the CPU (load average {', '.join(f'{v:.1f}' for v in result['load'])} "
             "while counting; counts do not depend on load). Sequential: one client's step; vectorized and "
             "batched: one step of all clients.",
             "",
             f"Bound on {result['gpu']}: launch = kernels x {g['launch'] * 1e6:g} us, memory = unfused bytes / "
             f"{g['bandwidth'] / 1e12:g} TB/s, compute = FLOPs / {g['fp32'] / 1e12:g} TFLOP/s FP32 "
             f"(TF32 off: the numerics policy). Source: {g['source']}.",
             "",
             "| setting | algorithm | executor | compiled | kernels | host syncs | host tensors | bytes (unfused) "
             "| GFLOP | launch ms | memory ms | compute ms | bound | syncs per round |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        p, b = r["per_step"], r["bound"]
        lines.append(f"| {r['setting']} | {r['algorithm']} | {r['executor']} | {'yes' if r['compile'] else 'no'} "
                     f"| {p['kernels']:.0f} | {p['syncs']:g} | {p['host_tensors']:g} | {_fmt(p['bytes'], 1e9, '.2f', ' GB')} "
                     f"| {_fmt(p['flops'], 1e9, '.2f')} | {b['launch_s'] * 1e3:.2f} | {_fmt(b['memory_s'], 1e-3, '.2f')} "
                     f"| {_fmt(b['compute_s'], 1e-3, '.3f')} | {b['bound'] or '-'} | {r['per_round']['syncs']:.0f} |")
    ratios = bytes_verdicts(result)
    if ratios:
        lines += ["", "Unfused bytes per vectorized padded step against the clean path's and against the same clients "
                  "one by one (sequential padded, one client's step x clients), and issue 24's targets:", "", *ratios]
    if per_op:
        lines += ["", "Bytes per operator (unfused MB per step / kernels per step; the operators that move the "
                  "most in the first column):", "", *per_op_table(result)]
    verdicts = compile_verdicts(result)
    if verdicts:
        lines += ["", "Compiled (inductor's kernels plus the ATen calls still dispatched, counted with torch.profiler; "
                  "bytes and FLOPs not counted compiled) against uncompiled, and issue 24's target:", "", *verdicts]
    return "\n".join(lines) + "\n"


def function_counts(fn, *args) -> dict:
    """Kernels, syncs and host tensors of one call of ``fn(*args)`` eager (:func:`benchmark.perf.counting.counting`)
    and compiled (``torch.compile``, :func:`benchmark.perf.counting.compiled_counting`), with the compile time and
    the largest difference between the two results."""
    with counting() as eager:
        ref = fn(*args)
    compiled = torch.compile(fn, dynamic=False)
    t0 = time.perf_counter()
    with kernel_profile():
        compiled(*args)
    seconds = time.perf_counter() - t0
    with compiled_counting() as comp:
        out = compiled(*args)
    diff = max((float((a.double() - b.double()).abs().max()) for a, b in zip(tree_flatten(ref)[0], tree_flatten(out)[0])
                if isinstance(a, torch.Tensor) and a.numel()), default=0.0)
    return {"eager": eager.as_dict(), "compiled": comp.as_dict(), "compile_seconds": seconds, "max_abs_diff": diff,
            "eager_ops": dict(eager.kernel_ops.most_common(8)), "compiled_ops": dict(comp.kernel_ops)}


def qp_small_counts(clients: int = 10, d: int = 390880, rows: int = 3, seed: int = 0) -> dict:
    """:func:`function_counts` of GradMA's QP_l (``algorithms.core.qp.project_small``, whole vector, rho 0)
    under ``vmap`` over ``clients`` at dimension ``d`` (default: the FedBAT CNN's parameters)."""
    g = torch.Generator().manual_seed(seed)
    p, M = torch.randn(clients, d, generator=g), torch.randn(clients, rows, d, generator=g)

    def project(p, M):
        return vmap(lambda a, b: qp.project_small(a, b, None, 0.0, 1e-6))(p, M)
    return function_counts(project, p, M)
