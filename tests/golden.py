"""Golden histories (issue 45): small runs of every algorithm on both executors, a batched group, padded batches
and the CNNs with BatchNorm and max-pooling, whose histories must stay the same bit for bit through a change
that declares itself exact. ``python -m tests.golden OUT.json`` writes them (floats as ``float.hex``, wall times
left out); ``tests/test_golden_histories.py`` compares the code with the file generated at aa98dfe on a machine whose
float32 kernels sum as this one's (``machine()``: the same code gives other last bits on another CPU's kernels, e.g.
AVX-512 against the machine the first file came from). ``python -m tests.golden --machine`` prints the fingerprint
that names a file made on this machine (``golden_histories_aa98dfe-<fingerprint>.json``)."""
from __future__ import annotations

import json
import sys

import algorithms
from benchmark.runs.experiment import Experiment

_DIGITS = dict(dataset="digits", model="mlp", num_clients=6, clients_per_round=3, rounds=2, batch_size=16,
               local_steps=3, eval_every=1, eval_train_samples=200, lr=0.05)
# padded batches (1 epoch of 29-30 samples at batch 16: a partial batch), a CNN with BatchNorm2d and pooling,
# LFL's CNN (pooling, no BatchNorm), GradMA's MLP (BatchNorm1d)
_PADDED = dict(_DIGITS, num_clients=45, clients_per_round=4, local_steps=None, local_epochs=1)
_FMNIST = dict(dataset="fmnist", dataset_args={"train_subset": 600}, num_clients=10, clients_per_round=3, rounds=2,
               local_steps=2, batch_size=16, eval_every=1, eval_train_samples=100, lr=0.05)


def cases() -> dict[str, tuple]:
    """name -> (experiments, executor): one experiment, or a batched group of several."""
    out = {}
    for name in algorithms.names():
        for ex in ("sequential", "vectorized"):
            out[f"digits/{name}/{ex}"] = ([Experiment(algorithm=name, executor=ex, seed=1, **_DIGITS)], ex)
    for name in ("fedavg", "scaffold", "fedbat", "gradma"):
        for ex in ("sequential", "vectorized"):
            out[f"padded/{name}/{ex}"] = ([Experiment(algorithm=name, executor=ex, seed=2, **_PADDED)], ex)
    for name, model, args in (("fedavg", "fedbat_cnn", {"width": 0.125}), ("fedbat", "fedbat_cnn", {"width": 0.125}),
                              ("lfl", "lfl_cnn_mnist", {"width": 0.25}), ("gradma", "gradma_mlp", {})):
        for ex in ("sequential", "vectorized"):
            out[f"fmnist/{model}/{name}/{ex}"] = ([Experiment(algorithm=name, model=model, model_args=args,
                                                              executor=ex, seed=3, **_FMNIST)], ex)
    for name in ("fedavg", "scaffold"):
        out[f"batched/{name}"] = ([Experiment(algorithm=name, executor="vectorized", seed=s, lr=lr,
                                              **{k: v for k, v in _DIGITS.items() if k != "lr"})
                                   for s, lr in ((0, 0.05), (1, 0.1), (2, 0.05))], "batched")
    return out


def machine() -> str:
    """A fingerprint of this machine's float32 kernels, one thread: a digest of the bits of a matrix product, a
    convolution, BatchNorm, log-softmax and a long sum on fixed inputs, the kernels whose summation order differs
    between CPUs (vector width, blocking) and moves a history's last bits."""
    import hashlib

    import torch
    import torch.nn.functional as F

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(64, 784, generator=g), torch.randn(200, 784, generator=g)
        img, k = torch.randn(16, 3, 28, 28, generator=g), torch.randn(8, 3, 3, 3, generator=g)
        h = F.linear(x, w)
        c = F.conv2d(img, k, padding=1)
        outs = [h, c, F.batch_norm(c, None, None, training=True), torch.log_softmax(h, 1),
                torch.randn(100003, generator=g).sum()]
        return hashlib.sha256(b"".join(t.contiguous().numpy().tobytes() for t in outs)).hexdigest()[:12]
    finally:
        torch.set_num_threads(threads)


def _hex(v):
    return float(v).hex() if isinstance(v, float) else v


def histories(exps, executor) -> list:
    """The histories (wall times left out, floats as hex) of one case."""
    from benchmark.runs.plan import run, run_group

    results = run_group(exps) if executor == "batched" else [run(exps[0], threads=1)]
    return [[{k: _hex(v) for k, v in h.items() if k != "wall_time"} for h in r.history] for r in results]


def main(path: str) -> None:
    import torch

    torch.set_num_threads(1)
    out = {name: histories(*c) for name, c in cases().items()}
    with open(path, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    print(machine()) if sys.argv[1] == "--machine" else main(sys.argv[1])
