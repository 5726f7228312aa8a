"""A client's minibatches for one round: the rule that picks them (``minibatch_rng``), the schedule it makes
(``client_schedule``: DataLoader semantics per epoch, or a fixed number of steps) and the number of steps it has
(``steps_for``). Both executors and the engine use these (``benchmark.sim.executors`` re-exports them, their home
before)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class Schedule:
    """Minibatch indices of one client for one round: idx (steps, B), w (steps, B), and on the host the
    number of real rows of each step (``lengths``: padding sits at the end of a batch)."""

    idx: torch.Tensor
    w: torch.Tensor
    lengths: tuple[int, ...] | None = None  # None: read from w once, when the schedule is made

    def __post_init__(self):
        if self.lengths is None:  # padding sits at the end: a step's real rows are its nonzero weights
            self.lengths = tuple(int(n) for n in (self.w != 0).sum(dim=1).tolist())

    @property
    def steps(self) -> int:
        return int(self.idx.shape[0])


def minibatch_rng(seed: int, round_: int, client_id: int) -> np.random.Generator:
    """The minibatch order of one client in one round: ``default_rng([seed, 2, round, client])`` (the one
    source of this rule: the engine, and the claims that recompute a round's minibatches, use it)."""
    return np.random.default_rng([seed, 2, round_, client_id])


def client_schedule(indices: np.ndarray, rng: np.random.Generator, local_epochs: int | None,
                    local_steps: int | None, batch_size: int | None) -> Schedule:
    """DataLoader(shuffle=True, drop_last=False) semantics per epoch, or a fixed number of steps.

    By epochs: each epoch is a fresh permutation cut into ceil(n/B) batches, the last one partial.
    By steps: permutations are concatenated and cut into full batches of B (min(B, n)).
    ``batch_size=None`` means the full local dataset every step.
    """
    n = len(indices)
    if n == 0:
        raise ValueError("a client with no samples cannot train")
    b = n if batch_size is None else min(int(batch_size), n)
    rows, lengths = [], []
    if local_steps is not None:
        need = local_steps * b
        perms = []
        while sum(len(p) for p in perms) < need:
            perms.append(indices[rng.permutation(n)])
        flat = np.concatenate(perms)[:need].reshape(local_steps, b)
        return Schedule(torch.from_numpy(flat.astype(np.int64)), torch.ones(local_steps, b), (b,) * local_steps)
    full, rem = divmod(n, b)
    for _ in range(local_epochs):  # full batches, then the partial one padded with copies of its first sample
        perm = indices[rng.permutation(n)]
        rows.append(perm[:full * b].reshape(full, b))
        lengths += [b] * full + ([rem] if rem else [])
        if rem:
            rows.append(np.concatenate([perm[full * b:], np.full(b - rem, perm[full * b])])[None])
    w = np.ones((len(lengths), b), dtype=np.float32)
    if rem:
        w[full::full + 1, rem:] = 0.0  # the last batch of every epoch: zero-weight padding
    return Schedule(torch.from_numpy(np.concatenate(rows).astype(np.int64)), torch.from_numpy(w), tuple(lengths))


def steps_for(n: int, local_epochs: int | None, local_steps: int | None, batch_size: int | None) -> int:
    if local_steps is not None:
        return local_steps
    b = n if batch_size is None else min(batch_size, n)
    return local_epochs * math.ceil(n / b)
