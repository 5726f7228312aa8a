"""Why does the batched path differ on CUDA (validate: fedavg on images/fedbat_cnn, 1.6e-3 rel. loss)?"""
import dataclasses
import json
import sys

import torch

from benchmark import numerics
from benchmark.experiment import Experiment
from benchmark.plan import run, run_group
from benchmark.validate import problems

dev = sys.argv[1] if len(sys.argv) > 1 else "cuda"
alg = sys.argv[2] if len(sys.argv) > 2 else "fedavg"
kw = problems(3)["images/fedbat_cnn"]
exp = Experiment(algorithm=alg, seed=0, **kw)
g3 = [exp, dataclasses.replace(exp, seed=1, lr=exp.lr * 0.5), dataclasses.replace(exp, seed=2)]
same_lr = [exp, dataclasses.replace(exp, seed=1), dataclasses.replace(exp, seed=2)]


def losses(r):
    return [h["test_loss"] for h in r.history]


def rel(a, b):
    return [abs(x - y) / abs(x) for x, y in zip(losses(a), losses(b))]


def on(e, d, ex="vectorized"):
    return dataclasses.replace(e, device=d, executor=ex)


out = {}
with numerics.using(numerics.Numerics()):
    refs = [run(on(e, "cpu", "sequential")) for e in g3]
    cpu_b = run_group([on(e, "cpu") for e in g3])
    out["cpu batched vs cpu seq, run 0..2"] = [rel(r, b) for r, b in zip(refs, cpu_b)]
    v = run(on(exp, dev))
    out["dev vectorized vs cpu seq"] = rel(refs[0], v)
    b3 = run_group([on(e, dev) for e in g3])
    out["dev batched(3, lr differs) vs cpu seq, runs 0..2"] = [rel(r, b) for r, b in zip(refs, b3)]
    out["numerics in force at end of batched run"] = b3[0].environment["numerics"]
    b1 = run_group([on(exp, dev)])
    out["dev batched(1) vs cpu seq"] = rel(refs[0], b1[0])
    bs = run_group([on(e, dev) for e in same_lr])
    out["dev batched(3, same lr) vs cpu seq"] = rel(refs[0], bs[0])
    out["dev batched(3) vs dev vectorized"] = rel(v, b3[0])
with numerics.using(numerics.Numerics(deterministic=True)):
    bd = run_group([on(e, dev) for e in g3])
    out["dev batched(3) deterministic vs cpu seq"] = rel(refs[0], bd[0])
    vd = run(on(exp, dev))
    out["dev vectorized deterministic vs cpu seq"] = rel(refs[0], vd)
with numerics.using(numerics.Numerics(tf32=True)):
    t = run(on(exp, dev))
    out["dev vectorized TF32 on vs cpu seq (for scale)"] = rel(refs[0], t)
    tb = run_group([on(e, dev) for e in g3])
    out["dev batched(3) TF32 on vs cpu seq (for scale)"] = rel(refs[0], tb[0])
for k, v in out.items():
    print(k, ":", json.dumps(v, default=str))
