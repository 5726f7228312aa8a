"""Seeded partitions of a labelled training set across federated clients, with statistics.

Spec strings (``parse_spec``), after NIID-Bench (Li, Diao, Chen, He 2022, "Federated Learning on Non-IID
Data Silos: An Experimental Study", Sec. 4):

- ``iid``: a seeded permutation cut into ``num_clients`` near-equal parts (sizes differ by at most 1).
- ``dirichlet:<beta>``: label-distribution skew. For each class c (ascending label order) draw
  ``p_c ~ Dir(beta * 1_N)``; a client that already holds ``>= n/N`` samples gets share 0 for this and later
  classes (balancing step), the shares are renormalised, and the class's shuffled samples are cut at
  ``floor(cumsum(p_c) * n_c)``. The whole draw is repeated until every client holds ``>= min_size`` samples
  (default 10, as in NIID-Bench), at most ``max_tries`` times.
- ``labelcnt:<k>`` (NIID-Bench's ``#C=k``): every client holds exactly k distinct labels; see ``_labelcnt``
  for the label assignment and for what happens to labels that no client holds.
- ``shards:<s>``: sort by label (ties broken by a seeded permutation), cut into ``N*s`` near-equal shards
  and give each client s random shards (McMahan et al. 2017's pathological non-IID split).
- ``quantity:<beta>``: quantity skew. Client sizes proportional to ``q ~ Dir(beta * 1_N)`` (cut at
  ``floor(cumsum(q) * n)``), redrawn until every client holds ``>= min_size`` samples; samples are iid.
- ``gradma_dirichlet:<omega>``: the label-skew split of GradMA's public code (Luo et al., CVPR 2023;
  ``LightFed/experiments/datasets/data_distributer.py``): every client first gets 2 random samples, then
  each class is split by ``Dir(omega * 1_N)`` with no balancing step and no redraw; see ``_gradma_dirichlet``.

"Class c" / "label i" below is the rank of a label value among the distinct labels present (the j-th
smallest value is class j), so labels need not be 0..K-1.

All randomness comes from one ``np.random.default_rng(seed)`` and acts on a canonical order of the samples
(by label, then by sample identity), which makes ``split`` independent of the dataset's order; see
``split`` for the exact statement.
"""
from __future__ import annotations

import hashlib
import math
import warnings

import numpy as np

__all__ = ["split", "parse_spec", "statistics", "fingerprint", "names", "describe"]

_DESCRIPTIONS = {
    "iid": "iid: a seeded random permutation cut into num_clients near-equal parts",
    "dirichlet": "dirichlet:<beta>: label skew, per-class shares ~ Dir(beta) over clients with NIID-Bench's "
                 "balancing step, redrawn until every client has >= min_size (10) samples; beta > 0, "
                 "smaller is more skewed",
    "labelcnt": "labelcnt:<k>: #C=k label skew, every client holds exactly k distinct labels (client i gets "
                "label i % K, then k-1 random others); each label's samples are split equally among "
                "its holders",
    "shards": "shards:<s>: sort by label, cut into num_clients*s equal shards, give each client s random "
              "shards",
    "quantity": "quantity:<beta>: quantity skew, client sizes ~ Dir(beta) (>= min_size each), samples iid; "
                "beta > 0",
    "gradma_dirichlet": "gradma_dirichlet:<omega>: GradMA's public-code label skew, every client first gets 2 "
                        "random samples, then each class is split by Dir(omega) over clients, no balancing and "
                        "no redraw (feasible for omega = 0.01, N = 100); omega > 0",
}
_SYNTAX = {"iid": "iid", "dirichlet": "dirichlet:<beta>", "labelcnt": "labelcnt:<k>", "shards": "shards:<s>",
           "quantity": "quantity:<beta>", "gradma_dirichlet": "gradma_dirichlet:<omega>"}
_FLOAT_KINDS = ("dirichlet", "quantity", "gradma_dirichlet")


def names() -> tuple[str, ...]:
    """The partition kinds, in the order ``fedrepro list`` shows them."""
    return tuple(_DESCRIPTIONS)


def describe(kind: str | None = None) -> dict[str, str] | str:
    """One line per kind (with its spec syntax); ``describe(kind)`` gives that kind's line."""
    if kind is None:
        return dict(_DESCRIPTIONS)
    if kind not in _DESCRIPTIONS:
        raise ValueError(f"unknown partition kind {kind!r}; known kinds: {', '.join(_DESCRIPTIONS)}")
    return _DESCRIPTIONS[kind]


def parse_spec(spec: str) -> tuple[str, float | int | None]:
    """``"iid"`` -> ``("iid", None)``, ``"dirichlet:0.3"`` -> ``("dirichlet", 0.3)``, ``"labelcnt:3"`` ->
    ``("labelcnt", 3)``, ``"shards:2"`` -> ``("shards", 2)``, ``"quantity:0.5"`` -> ``("quantity", 0.5)``,
    ``"gradma_dirichlet:0.01"`` -> ``("gradma_dirichlet", 0.01)``.

    Raises ValueError for an unknown kind, a missing or extra parameter, beta / omega that is not a finite
    number > 0, or k / s that is not an integer >= 1. Limits that depend on the data (k <= number of classes,
    s * num_clients <= number of samples, ...) are checked by ``split``.
    """
    if not isinstance(spec, str):
        raise ValueError(f"a partition spec must be a string such as 'dirichlet:0.3', got {spec!r}")
    kind, sep, arg = spec.strip().partition(":")
    kind, arg = kind.strip().lower(), arg.strip()
    usage = ", ".join(_SYNTAX.values())
    if kind not in _DESCRIPTIONS:
        raise ValueError(f"unknown partition kind {kind!r} in spec {spec!r}; known specs: {usage}")
    if kind == "iid":
        if sep:
            raise ValueError(f"partition 'iid' takes no parameter, got {spec!r}")
        return "iid", None
    if not arg:
        raise ValueError(f"partition {kind!r} needs a parameter: {_SYNTAX[kind]} (got {spec!r})")
    if kind in _FLOAT_KINDS:
        symbol = "omega" if kind == "gradma_dirichlet" else "beta"
        try:
            beta = float(arg)
        except ValueError:
            raise ValueError(f"partition {kind!r}: {symbol} must be a number > 0, got {arg!r}") from None
        if not math.isfinite(beta) or beta <= 0:
            raise ValueError(f"partition {kind!r}: {symbol} must be a finite number > 0, got {arg!r}")
        return kind, beta
    try:
        value = int(arg)
    except ValueError:
        raise ValueError(f"partition {kind!r}: the parameter must be an integer >= 1, got {arg!r}") from None
    if value < 1:
        raise ValueError(f"partition {kind!r}: the parameter must be an integer >= 1, got {value}")
    return kind, value


# ----------------------------------------------------------------------------------------------- split


def split(labels, spec: str, num_clients: int, seed: int, *, min_size: int = 10, max_tries: int = 1000,
          ids=None) -> list[np.ndarray]:
    """Partition the samples of ``labels`` across ``num_clients`` clients according to ``spec``.

    Returns ``num_clients`` int64 index arrays into ``labels``, each sorted ascending and pairwise
    disjoint. Every sample is assigned to exactly one client, except under ``labelcnt:<k>`` with
    ``num_clients * k < K``, where the samples of the ``K - num_clients*k`` labels that no client can hold
    are dropped (with a warning; ``statistics`` reports them as ``num_dropped``).

    ``labels``: 1-D numpy array, torch tensor or sequence of integers. ``min_size`` and ``max_tries`` apply
    to ``dirichlet`` and ``quantity`` (smallest client size, and how many whole draws before giving up);
    ``gradma_dirichlet`` ignores them (one draw, every client holds >= 2 samples by construction).
    ``ids``: optional unique sample identities (any sortable 1-D array of length n, e.g. a content hash or
    a stable sample id); by default a sample's identity is its position.

    Determinism: the result is a function of (labels, spec, num_clients, seed, min_size, max_tries, ids).

    Order independence: the samples are first put in a canonical order, by label and then by identity,
    and all randomness acts on positions in that order, so the assignment of canonical positions to
    clients depends only on the per-class counts and the arguments. Precisely, let ``pi`` be a
    permutation of ``range(n)`` and ``labels2 = labels[pi]``, ``ids2 = ids[pi]`` (sample j of the permuted
    dataset is sample ``pi[j]`` of the original). Then for every client i::

        np.sort(pi[split(labels2, ..., ids=ids2)[i]]) == split(labels, ..., ids=ids)[i]

    i.e. the multiset of (client, sample identity) pairs is unchanged. With ``ids=None`` (identity =
    position) this exact statement holds for every ``pi`` that keeps the relative order of the samples
    within each class; for an arbitrary ``pi`` the multiset of (client, label) pairs (every client's label
    histogram) is unchanged.
    """
    y = _as_labels(labels)
    kind, param = parse_spec(spec)
    num_clients = _as_count(num_clients, "num_clients")
    seed = _as_count(seed, "seed", minimum=0)
    min_size = _as_count(min_size, "min_size", minimum=0)
    max_tries = _as_count(max_tries, "max_tries")
    n = y.size
    if num_clients > n:
        raise ValueError(f"partition {spec!r}: more clients ({num_clients}) than samples ({n})")

    if ids is None:
        canon = np.argsort(y, kind="stable")
    else:
        key = _as_1d(ids, "ids")
        if key.size != n:
            raise ValueError(f"ids has {key.size} entries but labels has {n}")
        if np.unique(key).size != n:
            raise ValueError("ids must be unique sample identities")
        canon = np.lexsort((key, y))
    _, counts = np.unique(y, return_counts=True)
    counts = counts.astype(np.int64)

    rng = np.random.default_rng(seed)
    if kind == "iid":
        ranks = np.array_split(rng.permutation(n), num_clients)
    elif kind == "dirichlet":
        ranks = _dirichlet(counts, num_clients, param, rng, min_size, max_tries)
    elif kind == "labelcnt":
        ranks = _labelcnt(counts, num_clients, param, rng)
    elif kind == "shards":
        ranks = _shards(counts, num_clients, param, rng)
    elif kind == "quantity":
        ranks = _quantity(n, num_clients, param, rng, min_size, max_tries)
    else:
        ranks = _gradma_dirichlet(counts, num_clients, param, rng)
    return [np.sort(canon[r]).astype(np.int64) for r in ranks]


def _cut(shares: np.ndarray, m: int) -> np.ndarray:
    """Sizes of the pieces when m items are cut at floor(cumsum(shares) * m) (NIID-Bench's rule)."""
    bounds = np.clip(np.floor(np.cumsum(shares)[:-1] * m), 0, m).astype(np.int64)
    return np.diff(np.concatenate(([0], bounds, [m])))


def _infeasible(kind, beta, num_clients, n, min_size, max_tries) -> ValueError:
    why = (f"no draw out of {max_tries} gave every one of the {num_clients} clients at least "
           f"min_size={min_size} of the {n} samples" if max_tries else
           f"{num_clients} clients x min_size={min_size} needs more than the {n} samples")
    return ValueError(f"partition '{kind}:{beta:g}' is infeasible: {why}; use fewer clients, a larger beta, "
                      f"or a smaller min_size")


def _dirichlet(counts, num_clients, beta, rng, min_size, max_tries) -> list[np.ndarray]:
    """NIID-Bench's label-distribution skew (see module docstring), on canonical positions.

    A draw in which the balancing step leaves no positive share for a class (every share of the clients
    still below n/N underflowed to 0, possible for tiny beta) counts as a failed draw.
    """
    n = int(counts.sum())
    if num_clients * min_size > n:
        raise _infeasible("dirichlet", beta, num_clients, n, min_size, 0)
    cap = n / num_clients
    alpha = np.full(num_clients, beta)
    for _ in range(max_tries):
        table = np.zeros((counts.size, num_clients), np.int64)
        sizes = np.zeros(num_clients, np.int64)
        ok = True
        for c, m in enumerate(counts):
            p = np.where(sizes < cap, rng.dirichlet(alpha), 0.0)
            total = p.sum()
            if not total > 0:
                ok = False
                break
            table[c] = _cut(p / total, int(m))
            sizes += table[c]
        if ok and sizes.min() >= min_size:
            break
    else:
        raise _infeasible("dirichlet", beta, num_clients, n, min_size, max_tries)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c, (start, m) in enumerate(zip(starts, counts)):
        shuffled = start + rng.permutation(int(m))
        for i, piece in enumerate(np.split(shuffled, np.cumsum(table[c])[:-1])):
            pieces[i].append(piece)
    return [np.concatenate(p) for p in pieces]


def _quantity(n, num_clients, beta, rng, min_size, max_tries) -> list[np.ndarray]:
    """Quantity skew: sizes cut from q ~ Dir(beta * 1_N), redrawn until all >= min_size; samples iid."""
    if num_clients * min_size > n:
        raise _infeasible("quantity", beta, num_clients, n, min_size, 0)
    alpha = np.full(num_clients, beta)
    for _ in range(max_tries):
        sizes = _cut(rng.dirichlet(alpha), n)
        if sizes.min() >= min_size:
            break
    else:
        raise _infeasible("quantity", beta, num_clients, n, min_size, max_tries)
    return np.split(rng.permutation(n), np.cumsum(sizes)[:-1])


def _gradma_dirichlet(counts, num_clients, omega, rng) -> list[np.ndarray]:
    """GradMA's public-code Dirichlet split (``DataDistributer._split_dataset_by_proportion`` with
    ``data_partition_mode='non_iid_dirichlet'``), on canonical positions. The paper note (gradma.md, Sec. 3
    and code notes) reads: "a class x client matrix whose rows are drawn from Dir(omega * 1_N); each
    class's shuffled indices are split accordingly. Before that, each client receives 2 random samples
    (each from a uniformly random class), so that no client is empty. Client sizes are unequal."

    1. ``P`` (K x N): row c is ``p_c ~ Dir(omega * 1_N)``, one independent draw per class.
    2. Each class's canonical positions are shuffled (one seeded permutation per class).
    3. Two passes over clients 0..N-1 (the code's ``for _ in range(2): for client_id in range(N)``): the
       client takes one sample of a class drawn uniformly at random, removed from the pool: the last of
       that class's shuffled positions, i.e. a uniformly random sample of the class (the code pops the
       last index in dataset order and shuffles the rest afterwards: the same label histograms in
       distribution, only which sample of the class is taken differs). Every client thus holds >= 2
       samples, whatever omega. The code draws over all K classes and crashes (``pop`` from an empty list)
       when it hits an exhausted class; here the class is drawn uniformly among those with samples left,
       which is the same draw whenever the code does not crash. Needs n >= 2N.
    4. The ``m_c`` samples left in class c (in shuffled order) are cut at ``floor(cumsum(p_c)[:-1] * m_c)``
       (the code's ``np.split(c, (np.cumsum(fracs)[:-1] * len(c)).astype(int))``) and piece i goes to
       client i.
    No balancing step (unlike ``dirichlet``) and no redraw: one draw, sizes as they fall. With omega = 0.01
    and N = 100 most clients hold only their 2 initial samples plus whole classes of a few others.
    The random streams are numpy's ``default_rng(seed)``, not the code's global ``np.random`` state, so the
    split is the same procedure, not the same indices.
    """
    K = counts.size
    n = int(counts.sum())
    if n < 2 * num_clients:
        raise ValueError(f"partition 'gradma_dirichlet:{omega:g}' is infeasible: {num_clients} clients x 2 "
                         f"initial samples need {2 * num_clients} samples but there are {n}; use fewer clients")
    props = rng.dirichlet(np.full(num_clients, omega), size=K)
    if not np.all(np.isfinite(props)):  # numpy guards small alphas; never cut with a NaN share
        raise ValueError(f"partition 'gradma_dirichlet:{omega:g}': the Dirichlet draw is not finite; "
                         f"use a larger omega")
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    pools = [list(starts[c] + rng.permutation(int(counts[c]))) for c in range(K)]
    pieces: list[list[int]] = [[] for _ in range(num_clients)]
    left = counts.copy()
    for _ in range(2):
        for i in range(num_clients):
            c = int(rng.choice(np.flatnonzero(left > 0)))
            pieces[i].append(pools[c].pop())
            left[c] -= 1
    out = [np.array(p, np.int64) for p in pieces]
    for c in range(K):
        rest = np.array(pools[c], np.int64)
        for i, piece in enumerate(np.split(rest, np.cumsum(_cut(props[c], rest.size))[:-1])):
            out[i] = np.concatenate((out[i], piece))
    return out


def _labelcnt(counts, num_clients, k, rng) -> list[np.ndarray]:
    """#C=k: every client holds exactly k distinct labels; each label is split equally among its holders.

    Label assignment (K classes, N clients):
    1. NIID-Bench's draw: client i holds class ``i % K`` and k-1 further distinct classes drawn uniformly
       at random from the other K-1.
    2. Coverage repair (our addition; NIID-Bench would leave such labels unused): while some class is held
       by no client and some client holds, in one of its k-1 random slots, a class that another client
       also holds, one such (client, slot), chosen uniformly at random, is given the unheld class instead
       (unheld classes are visited in random order). Client i keeps class ``i % K`` and k distinct classes.
       If ``N * k >= K`` this ends with every class held (when ``N >= K`` step 1 already covers all
       classes; when ``N < K`` the first classes are distinct, so a class held twice sits in a random slot
       of some client). If ``N * k < K`` it ends with all ``N * k`` slots distinct, and the samples of
       the ``K - N*k`` classes held by nobody are dropped (warning; ``statistics`` counts them).
    When the draw already covers every class, step 2 does nothing and the result is NIID-Bench's.
    """
    K = counts.size
    if k > K:
        raise ValueError(f"partition 'labelcnt:{k}': k={k} labels per client but the data have only "
                         f"{K} classes")
    held = np.empty((num_clients, k), np.int64)
    for i in range(num_clients):
        first = i % K
        others = np.delete(np.arange(K), first)
        held[i, 0] = first
        held[i, 1:] = rng.choice(others, size=k - 1, replace=False)
    times = np.bincount(held.ravel(), minlength=K)
    for u in rng.permutation(np.flatnonzero(times == 0)):
        slots = np.argwhere(times[held[:, 1:]] >= 2)  # (client, slot - 1)
        if slots.size == 0:
            break
        i, j = slots[rng.integers(len(slots))]
        times[held[i, j + 1]] -= 1
        held[i, j + 1] = u
        times[u] = 1

    short = [(c, int(counts[c]), int(times[c])) for c in range(K) if 0 < counts[c] < times[c]]
    if short:
        c, m, t = short[0]
        raise ValueError(f"partition 'labelcnt:{k}' is infeasible: class {c} has {m} samples but {t} holders "
                         f"among {num_clients} clients; use fewer clients or a smaller k")
    dropped = np.flatnonzero(times == 0)
    if dropped.size:
        warnings.warn(f"partition 'labelcnt:{k}' with {num_clients} clients and {K} classes: classes "
                      f"{dropped.tolist()} are held by no client; their {int(counts[dropped].sum())} samples "
                      f"are dropped", UserWarning, stacklevel=3)

    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    pieces: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for c in range(K):
        holders = np.flatnonzero((held == c).any(axis=1))
        if holders.size == 0:
            continue
        shuffled = starts[c] + rng.permutation(int(counts[c]))
        for i, piece in zip(holders, np.array_split(shuffled, holders.size)):
            pieces[i].append(piece)
    return [np.concatenate(p) for p in pieces]


def _shards(counts, num_clients, s, rng) -> list[np.ndarray]:
    """Sort by label (ties broken by a seeded permutation), cut into N*s near-equal shards (sizes differ
    by at most 1), and give each client s shards drawn at random without replacement."""
    n = int(counts.sum())
    num_shards = num_clients * s
    if num_shards > n:
        raise ValueError(f"partition 'shards:{s}': {num_clients} clients x {s} shards = {num_shards} shards "
                         f"but only {n} samples; use fewer clients or fewer shards per client")
    classes = np.repeat(np.arange(counts.size), counts)
    perm = rng.permutation(n)
    order = perm[np.argsort(classes[perm], kind="stable")]
    shards = np.array_split(order, num_shards)
    deal = rng.permutation(num_shards).reshape(num_clients, s)
    return [np.concatenate([shards[j] for j in row]) for row in deal]


# ------------------------------------------------------------------------------------------ statistics


def statistics(labels, parts, num_classes: int | None = None) -> dict:
    """JSON-serializable summary of a partition.

    Histograms are over ``classes``: ``range(num_classes)`` when given (labels must lie in it), else the
    distinct label values present. Keys: ``num_clients``, ``num_samples``, ``num_classes``, ``classes``,
    ``counts`` (per-client sizes), ``size_min/max/mean/std``, ``label_histograms`` (client x class),
    ``classes_per_client``, ``num_assigned`` (distinct samples held by some client), ``num_dropped``
    (samples held by no client) and ``dropped_per_class``, ``num_overlapping`` (sum of sizes minus
    ``num_assigned``; 0 for a partition), ``num_empty_clients``, and ``heterogeneity``:

    - ``tv_mean``/``tv_max``: total-variation distance ``0.5 * sum_c |P_i(c) - P(c)|`` between client i's
      label distribution and the pooled distribution P of all clients' samples, mean/max over non-empty
      clients (0 = identical, 1 = disjoint supports);
    - ``js_mean``/``js_max``: Jensen-Shannon divergence in bits (base 2, in [0, 1]) between the same.
    (Between unordered classes the earth mover's distance with the 0/1 metric equals the TV distance.)
    They are ``None`` when every client is empty.
    """
    y = _as_labels(labels)
    n = y.size
    if num_classes is None:
        classes, y_idx = np.unique(y, return_inverse=True)
    else:
        num_classes = _as_count(num_classes, "num_classes")
        if y.min() < 0 or y.max() >= num_classes:
            raise ValueError(f"labels must lie in [0, {num_classes}), got [{y.min()}, {y.max()}]")
        classes, y_idx = np.arange(num_classes), y
    C = classes.size
    idx = [_as_index(p, n) for p in parts]
    sizes = np.array([p.size for p in idx], np.int64)
    hist = np.array([np.bincount(y_idx[p], minlength=C) for p in idx], np.int64).reshape(len(idx), C)
    held = np.zeros(n, bool)
    for p in idx:
        held[p] = True
    assigned = int(held.sum())

    pooled = hist.sum(axis=0)
    tv, js = [], []
    if pooled.sum() > 0:
        q = pooled / pooled.sum()
        for h, size in zip(hist, sizes):
            if size:
                p = h / size
                tv.append(0.5 * float(np.abs(p - q).sum()))
                js.append(_js_bits(p, q))
    return {
        "num_clients": len(idx),
        "num_samples": int(n),
        "num_classes": int(C),
        "classes": [int(c) for c in classes],
        "counts": sizes.tolist(),
        "size_min": int(sizes.min()) if sizes.size else 0,
        "size_max": int(sizes.max()) if sizes.size else 0,
        "size_mean": float(sizes.mean()) if sizes.size else 0.0,
        "size_std": float(sizes.std()) if sizes.size else 0.0,
        "label_histograms": hist.tolist(),
        "classes_per_client": (hist > 0).sum(axis=1).tolist(),
        "num_assigned": assigned,
        "num_dropped": int(n - assigned),
        "dropped_per_class": np.bincount(y_idx[~held], minlength=C).tolist(),
        "num_overlapping": int(sizes.sum() - assigned),
        "num_empty_clients": int((sizes == 0).sum()),
        "heterogeneity": {
            "tv_mean": _mean(tv) if tv else None,
            "tv_max": float(np.max(tv)) if tv else None,
            "js_mean": _mean(js) if js else None,
            "js_max": float(np.max(js)) if js else None,
        },
    }


def _mean(values: list[float]) -> float:
    """The mean, kept within [min, max]: the float mean of equal values can exceed them by one ulp."""
    return float(np.clip(np.mean(values), np.min(values), np.max(values)))


def _js_bits(p: np.ndarray, q: np.ndarray) -> float:
    m = 0.5 * (p + q)

    def kl(a):
        nz = a > 0
        return float(np.sum(a[nz] * np.log2(a[nz] / m[nz])))

    return min(1.0, max(0.0, 0.5 * kl(p) + 0.5 * kl(q)))


# ----------------------------------------------------------------------------------------- fingerprint


def fingerprint(parts) -> str:
    """First 16 hex characters of the sha256 of the index maps in a canonical encoding.

    Encoding: the ASCII tag ``fedrepro.partition.v1`` and a NUL byte, the number of clients, then for each
    client in order its size and its indices sorted ascending, all as little-endian int64. So the value
    depends on which samples each client holds (and on client order), not on the container (list, numpy,
    torch), the integer dtype or the order of indices within a client.
    """
    h = hashlib.sha256(b"fedrepro.partition.v1\0")
    h.update(np.array([len(parts)], "<i8").tobytes())
    for p in parts:
        a = np.sort(_as_index(p, None)).astype("<i8")
        h.update(np.array([a.size], "<i8").tobytes())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


# ------------------------------------------------------------------------------------------- helpers


def _as_1d(values, what: str) -> np.ndarray:
    if hasattr(values, "detach"):  # torch tensor, without importing torch
        values = values.detach().cpu().numpy()
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got shape {arr.shape}")
    return arr


def _as_labels(labels) -> np.ndarray:
    y = _as_1d(labels, "labels")
    if y.size == 0:
        raise ValueError("labels is empty")
    if y.dtype.kind not in "iu":
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    return y.astype(np.int64)


def _as_index(p, n: int | None) -> np.ndarray:
    a = _as_1d(p, "a client's index array")
    if a.size == 0:
        return np.zeros(0, np.int64)
    if a.dtype.kind not in "iu":
        raise ValueError(f"client index arrays must hold integers, got dtype {a.dtype}")
    a = a.astype(np.int64)
    if a.min() < 0 or (n is not None and a.max() >= n):
        raise ValueError(f"client indices must lie in [0, {n}), got [{a.min()}, {a.max()}]")
    return a


def _as_count(value, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{what} must be >= {minimum}, got {value}")
    return int(value)
