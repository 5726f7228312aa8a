"""FedProx's Synthetic(alpha, beta), generated offline (no files needed).

* ``synthetic``: Synthetic(alpha, beta) of Li et al. 2020, "Federated Optimization in Heterogeneous Networks"
  (FedProx). d = 60, 10 classes, ``num_clients`` devices (default 30). Device k has n_k =
  floor(LogNormal(4, 2)) + 50 samples; u_k ~ N(0, alpha), B_k ~ N(0, beta); W_k ~ N(u_k, 1) (60x10),
  b_k ~ N(u_k, 1); v_k ~ N(B_k, 1) per coordinate; x ~ N(v_k, Sigma) with Sigma diagonal, Sigma_jj = j^-1.2;
  y = argmax softmax(W_k^T x + b_k). The second argument of N(., .) is used as a standard deviation, as in
  the FedProx generator (``np.random.normal(0, alpha)``); for alpha, beta in {0, 0.5, 1} the two readings
  differ only at 0.5. ``iid=True`` (FedProx's Synthetic-IID): one shared W, b ~ N(0, 1) and v = 0 for every
  device (alpha and beta unused). Each device's samples are split 80/20 (``train_frac``) into train/test;
  ``clients`` holds each device's training indices, the test set is pooled and ``meta["test_clients"]``
  holds each device's test indices. ``normalize`` is accepted and ignored (features stay raw, as in FedProx).
  Seeded by ``seed`` (numpy ``default_rng``; the distribution is
  FedProx's, the random stream is not). Note: W_k and b_k are shifted by the same u_k in every entry, which
  adds the same amount to every logit, so alpha never changes a label (softmax is shift invariant); only beta
  (through v_k) and the per-device noise in W_k, b_k, v_k make devices differ. This is a property of FedProx's
  generator, kept as is. Names ``synthetic(0.5,0.5)`` and ``synthetic_iid``
  are accepted as shorthands.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .federated_dataset import FederatedDataset
from .registry import _register

SYNTHETIC_DIM = 60
SYNTHETIC_CLASSES = 10


def synthetic_arrays(alpha: float, beta: float, num_clients: int, seed: int, iid: bool = False):
    """Per-device (X_k, y_k) numpy arrays of FedProx's Synthetic(alpha, beta) (see the module docstring)."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if alpha < 0 or beta < 0:
        raise ValueError(f"alpha and beta must be >= 0, got alpha={alpha}, beta={beta}")
    rng = np.random.default_rng(seed)
    d, c = SYNTHETIC_DIM, SYNTHETIC_CLASSES
    sizes = rng.lognormal(4, 2, num_clients).astype(np.int64) + 50
    u = rng.normal(0.0, alpha, num_clients)       # mean of W_k and b_k
    big_b = rng.normal(0.0, beta, num_clients)    # mean of v_k
    sigma_sqrt = np.power(np.arange(1, d + 1, dtype=np.float64), -1.2) ** 0.5
    if iid:
        w_shared = rng.normal(0.0, 1.0, (d, c))
        b_shared = rng.normal(0.0, 1.0, c)
    out = []
    for k in range(num_clients):
        if iid:
            w, b, v = w_shared, b_shared, np.zeros(d)
        else:
            v = rng.normal(big_b[k], 1.0, d)
            w = rng.normal(u[k], 1.0, (d, c))
            b = rng.normal(u[k], 1.0, c)
        x = v + rng.standard_normal((int(sizes[k]), d)) * sigma_sqrt
        logits = x @ w + b          # argmax of softmax == argmax of the logits
        out.append((x.astype(np.float32), logits.argmax(axis=1).astype(np.int64)))
    return out


@_register("synthetic", "FedProx Synthetic(alpha, beta): 60-dim features, 10 classes, natural clients with "
                        "log-normal sizes, 80/20 per-client split; options alpha, beta, num_clients, iid, "
                        "train_frac; seeded by seed",
           {"alpha": 1.0, "beta": 1.0, "num_clients": 30, "iid": False, "train_frac": 0.8, "normalize": True})
def _synthetic(root, download, seed, alpha, beta, num_clients, iid, train_frac, normalize):
    if not 0.0 < float(train_frac) < 1.0:
        raise ValueError(f"train_frac must be in (0, 1), got {train_frac}")
    alpha, beta, num_clients = float(alpha), float(beta), int(num_clients)
    parts = synthetic_arrays(alpha, beta, num_clients, seed, iid=bool(iid))
    xs_tr, ys_tr, xs_te, ys_te, clients, test_clients = [], [], [], [], [], []
    n_tr = n_te = 0
    for x, y in parts:
        k = int(math.floor(float(train_frac) * len(y)))
        xs_tr.append(x[:k])
        ys_tr.append(y[:k])
        xs_te.append(x[k:])
        ys_te.append(y[k:])
        clients.append(torch.arange(n_tr, n_tr + k))
        test_clients.append(torch.arange(n_te, n_te + len(y) - k))
        n_tr += k
        n_te += len(y) - k
    name = "synthetic_iid" if iid else f"synthetic({alpha:g},{beta:g})"
    meta = {"alpha": None if iid else alpha, "beta": None if iid else beta, "iid": bool(iid),
            "num_clients": num_clients, "seed": seed, "train_frac": float(train_frac),
            "client_sizes": [len(y) for _, y in parts], "test_clients": test_clients,
            "normalization": "none (raw features, as in FedProx)"}
    cat = lambda parts: torch.from_numpy(np.concatenate(parts))  # noqa: E731
    return FederatedDataset(name, cat(xs_tr), cat(ys_tr), cat(xs_te), cat(ys_te),
                            num_classes=SYNTHETIC_CLASSES, clients=clients, meta=meta)
