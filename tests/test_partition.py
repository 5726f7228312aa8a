"""Invariants of benchmark.datasets.partition: property tests (hypothesis) plus examples and error cases."""
import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from benchmark.datasets import partition as P

PROPS = settings(max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------------------------ strategies

@st.composite
def datasets(draw, min_n=1, max_n=240, max_classes=8):
    """Labels with arbitrary (not necessarily 0..K-1, possibly negative) values, in arbitrary order."""
    values = draw(st.lists(st.integers(-3, 40), min_size=1, max_size=max_classes, unique=True))
    n = draw(st.integers(min_n, max_n))
    gen = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    return np.asarray(values, np.int64)[gen.integers(0, len(values), n)]


@st.composite
def requests(draw):
    """A feasible (labels, spec, num_clients, kwargs) for every kind. Returns (labels, spec, N, kwargs)."""
    kind = draw(st.sampled_from(P.names()))
    y = draw(datasets(min_n=2))
    n, K = y.size, np.unique(y).size
    if kind == "iid":
        return y, "iid", draw(st.integers(1, min(n, 12))), {}
    if kind == "shards":
        N = draw(st.integers(1, min(n, 10)))
        return y, f"shards:{draw(st.integers(1, max(1, n // N)))}", N, {}
    if kind == "labelcnt":
        k = draw(st.integers(1, K))
        # feasible: every class has at least as many samples as it can have holders
        counts = np.unique(y, return_counts=True)[1]
        N = draw(st.integers(1, max(1, min(12, int(counts.min())))))
        return y, f"labelcnt:{k}", N, {}
    if kind == "gradma_dirichlet":  # feasible whenever n >= 2N; min_size / max_tries do not apply
        omega = draw(st.sampled_from([0.01, 0.1, 1.0, 100.0]))
        return y, f"gradma_dirichlet:{omega}", draw(st.integers(1, min(12, n // 2))), {}
    # dirichlet / quantity with a small min_size and a moderate beta, so a draw succeeds quickly
    min_size = draw(st.integers(0, min(3, n // 4)))
    N = draw(st.integers(1, max(1, min(8, n // (4 * max(min_size, 1))))))
    beta = draw(st.sampled_from([0.5, 1.0, 5.0, 100.0]))
    return y, f"{kind}:{beta}", N, {"min_size": min_size}


seeds = st.integers(0, 2**31 - 1)


def check_partition(parts, n, num_clients, allow_dropped=False):
    """Disjoint, sorted int64 arrays in [0, n) covering everything (or a subset when allow_dropped)."""
    assert isinstance(parts, list) and len(parts) == num_clients
    for p in parts:
        assert isinstance(p, np.ndarray) and p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0), "sorted ascending, no duplicates within a client"
    allidx = np.concatenate(parts)
    assert np.unique(allidx).size == allidx.size, "clients are disjoint"
    assert allidx.size == 0 or (allidx.min() >= 0 and allidx.max() < n)
    if not allow_dropped:
        assert allidx.size == n, "every sample assigned exactly once"


def split_quiet(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return P.split(*args, **kwargs)


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------- core invariants

@PROPS
@given(requests(), seeds)
def test_every_sample_assigned_once_and_deterministic(req, seed):
    y, spec, N, kw = req
    parts = split_quiet(y, spec, N, seed, **kw)
    check_partition(parts, y.size, N, allow_dropped=spec.startswith("labelcnt"))
    assert same(parts, split_quiet(y, spec, N, seed, **kw))
    assert P.fingerprint(parts) == P.fingerprint(split_quiet(y, spec, N, seed, **kw))
    stats = P.statistics(y, parts)
    assert stats["num_assigned"] + stats["num_dropped"] == y.size and stats["num_overlapping"] == 0
    kind, param = P.parse_spec(spec)
    sizes = np.array([p.size for p in parts])
    if kind == "iid":
        assert sizes.max() - sizes.min() <= 1
    elif kind in ("dirichlet", "quantity"):
        assert sizes.min() >= kw["min_size"]
    elif kind == "shards":
        shard = y.size // (N * param)
        assert np.all((sizes >= param * shard) & (sizes <= param * (shard + 1)))
    elif kind == "gradma_dirichlet":
        assert sizes.min() >= 2, "the 2 initial samples of every client"


@PROPS
@given(requests(), seeds, st.data())
def test_order_independence_with_ids(req, seed, data):
    """Permuting the dataset (labels and identities together) permutes the assignment."""
    y, spec, N, kw = req
    gen = np.random.default_rng(data.draw(seeds))
    ids = gen.permutation(10 * y.size)[: y.size]  # arbitrary unique identities
    pi = gen.permutation(y.size)
    base = split_quiet(y, spec, N, seed, ids=ids, **kw)
    permuted = split_quiet(y[pi], spec, N, seed, ids=ids[pi], **kw)
    assert same(base, [np.sort(pi[p]) for p in permuted])


@PROPS
@given(requests(), seeds, st.data())
def test_order_independence_without_ids(req, seed, data):
    """With identity = position: exact for class-order-preserving permutations, histograms for any."""
    y, spec, N, kw = req
    gen = np.random.default_rng(data.draw(seeds))
    base = split_quiet(y, spec, N, seed, **kw)
    # any permutation: every client's label multiset is unchanged
    pi = gen.permutation(y.size)
    permuted = split_quiet(y[pi], spec, N, seed, **kw)
    for a, b in zip(base, permuted):
        assert np.array_equal(np.sort(y[a]), np.sort(y[pi][b]))
    # a permutation that keeps the order within each class: exactly the permuted assignment
    pi = _interleave(y, gen)
    permuted = split_quiet(y[pi], spec, N, seed, **kw)
    assert same(base, [np.sort(pi[p]) for p in permuted])


def _interleave(y, gen):
    """A permutation pi with y[pi] shuffled but each class's samples in their original relative order."""
    new_labels = y[gen.permutation(y.size)]
    pi = np.empty(y.size, np.int64)
    for c in np.unique(y):
        pi[new_labels == c] = np.flatnonzero(y == c)
    return pi


@PROPS
@given(requests(), seeds)
def test_torch_and_list_inputs_give_the_same_split(req, seed):
    y, spec, N, kw = req
    base = split_quiet(y, spec, N, seed, **kw)
    assert same(base, split_quiet(torch.from_numpy(y), spec, N, seed, **kw))
    assert same(base, split_quiet(y.tolist(), spec, N, seed, **kw))
    assert same(base, split_quiet(y.astype(np.int32), spec, N, seed, **kw))


@settings(max_examples=30, deadline=None, database=None)
@given(st.sampled_from(["iid", "dirichlet:0.5", "labelcnt:2", "shards:2", "quantity:2", "gradma_dirichlet:0.5"]),
       seeds, seeds)
def test_different_seeds_differ(spec, s1, s2):
    assume(s1 != s2)
    y = np.repeat(np.arange(10), 40)  # 400 samples, 10 classes
    a, b = P.split(y, spec, 8, s1), P.split(y, spec, 8, s2)
    assert not same(a, b)
    assert P.fingerprint(a) != P.fingerprint(b)


# ---------------------------------------------------------------------------------- kind-specific

@PROPS
@given(datasets(min_n=30), st.data(), seeds)
def test_labelcnt_exactly_k_labels(y, data, seed):
    classes, counts = np.unique(y, return_counts=True)
    K = classes.size
    k = data.draw(st.integers(1, K))
    N = data.draw(st.integers(1, min(12, int(counts.min()))))  # every class has enough samples for N holders
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        parts = P.split(y, f"labelcnt:{k}", N, seed)
    check_partition(parts, y.size, N, allow_dropped=True)
    held = [set(np.unique(y[p]).tolist()) for p in parts]
    assert all(len(h) == k for h in held)
    assert all(classes[i % K] in h for i, h in enumerate(held)), "client i holds class i % K"
    everyone = set().union(*held)
    stats = P.statistics(y, parts)
    if N * k >= K:
        assert everyone == set(classes.tolist()), "every class is held when N*k >= K"
        check_partition(parts, y.size, N)
        assert not caught and stats["num_dropped"] == 0
    else:
        assert len(everyone) == N * k, "maximal coverage: all N*k held labels are distinct"
        dropped = ~np.isin(y, list(everyone))
        assert stats["num_dropped"] == dropped.sum() > 0
        assert np.concatenate(parts).size == y.size - dropped.sum()
        assert any("dropped" in str(w.message) for w in caught)
    # each class's samples are split as equally as possible among its holders
    for c in everyone:
        shares = [int(np.sum(y[p] == c)) for p in parts if c in set(y[p].tolist())]
        assert sum(shares) == np.sum(y == c) and max(shares) - min(shares) <= 1


def test_labelcnt_paper_settings():
    """FedBAT's Non-IID-2 shapes: 3 labels of 10, and 10 labels of 100 (N=30 leaves labels unheld in
    NIID-Bench's draw; the repair makes every label held)."""
    for K, k, N in [(10, 3, 30), (10, 3, 100), (100, 10, 30), (100, 10, 100), (10, 1, 40)]:
        y = np.repeat(np.arange(K), 5000 // K)
        parts = P.split(y, f"labelcnt:{k}", N, 1234)
        check_partition(parts, y.size, N)
        stats = P.statistics(y, parts, K)
        assert stats["classes_per_client"] == [k] * N and stats["num_dropped"] == 0


def test_labelcnt_drops_and_reports_unheld_labels():
    y = np.repeat(np.arange(10), 20)
    with pytest.warns(UserWarning, match="held by no client"):
        parts = P.split(y, "labelcnt:2", 3, 0)
    stats = P.statistics(y, parts, 10)
    assert stats["num_dropped"] == 4 * 20 and sum(stats["dropped_per_class"]) == 80
    assert stats["num_assigned"] == 120 and sum(stats["counts"]) == 120
    assert sorted(c for c, d in enumerate(stats["dropped_per_class"]) if d) == sorted(
        set(range(10)) - {int(c) for p in parts for c in np.unique(y[p])})


@PROPS
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 5), st.data(), seeds)
def test_shards_with_single_label_shards(K, m, shard, data, seed):
    """When shards never straddle classes (class sizes multiples of the shard size), a client holds at
    most s labels and exactly s * shard samples."""
    total = K * m  # number of shards
    N = data.draw(st.sampled_from([d for d in range(1, total + 1) if total % d == 0]))
    s = total // N
    y = np.repeat(np.arange(K), m * shard)
    parts = P.split(y, f"shards:{s}", N, seed)
    check_partition(parts, y.size, N)
    assert all(np.unique(y[p]).size <= s for p in parts)
    assert all(p.size == s * shard for p in parts)


@PROPS
@given(st.integers(2, 20), st.sampled_from([0.1, 0.3, 1.0]), seeds)
def test_dirichlet_default_min_size(N, beta, seed):
    y = np.repeat(np.arange(10), 100)
    try:
        parts = P.split(y, f"dirichlet:{beta}", N, seed)
    except ValueError as err:  # a legitimately infeasible request must say so
        assert "infeasible" in str(err)
        return
    check_partition(parts, y.size, N)
    assert min(p.size for p in parts) >= 10


def test_dirichlet_balancing_caps_clients():
    """A client at or above n/N before a class gets no share of it, so it exceeds n/N by at most one class."""
    y = np.repeat(np.arange(20), 50)
    n, N = y.size, 10
    for seed in range(5):
        parts = P.split(y, "dirichlet:0.1", N, seed)
        check_partition(parts, n, N)
        assert max(p.size for p in parts) < n / N + 50
    # skew grows as beta shrinks
    tv = [np.mean([P.statistics(y, P.split(y, f"dirichlet:{b}", N, s))["heterogeneity"]["tv_mean"]
                   for s in range(3)]) for b in (0.1, 1.0, 100.0)]
    assert tv[0] > tv[1] > tv[2]


def test_quantity_is_label_iid_and_size_skewed():
    y = np.repeat(np.arange(4), 500)
    parts = P.split(y, "quantity:0.5", 5, 3)
    check_partition(parts, y.size, 5)
    sizes = [p.size for p in parts]
    assert min(sizes) >= 10 and max(sizes) > 2 * min(sizes)
    big = P.split(y, "quantity:1e6", 5, 3)
    assert max(p.size for p in big) - min(p.size for p in big) <= 20


# ---------------------------------------------------------------------------------- errors

BAD_SPECS = ["", "foo", "dirichlet", "dirichlet:", "dirichlet:0", "dirichlet:-0.5", "dirichlet:nan",
             "dirichlet:inf", "dirichlet:abc", "quantity:0", "labelcnt:0", "labelcnt:-1", "labelcnt:2.5",
             "labelcnt:x", "shards:0", "shards:1.5", "iid:2", "gradma_dirichlet", "gradma_dirichlet:0",
             "gradma_dirichlet:-1", "gradma_dirichlet:nan"]


@pytest.mark.parametrize("spec", BAD_SPECS)
def test_parse_spec_rejects(spec):
    with pytest.raises(ValueError, match="partition"):
        P.parse_spec(spec)
    with pytest.raises(ValueError):
        P.split(np.arange(20) % 2, spec, 2, 0)


def test_parse_spec_accepts():
    assert P.parse_spec("iid") == ("iid", None)
    assert P.parse_spec(" Dirichlet:0.3 ") == ("dirichlet", 0.3)
    assert P.parse_spec("quantity:1e-1") == ("quantity", 0.1)
    assert P.parse_spec("labelcnt:3") == ("labelcnt", 3)
    assert P.parse_spec("shards:2") == ("shards", 2)
    assert P.parse_spec("gradma_dirichlet:0.01") == ("gradma_dirichlet", 0.01)
    assert isinstance(P.parse_spec("labelcnt:3")[1], int)


def test_impossible_requests_are_clear_value_errors():
    y = np.repeat(np.arange(4), 10)  # 40 samples, 4 classes
    cases = [
        (("iid", 41), "more clients"),
        (("labelcnt:5", 4), "only 4 classes"),
        (("shards:3", 14), "shards"),
        (("dirichlet:0.5", 5), "infeasible"),  # 5 * 10 > 40
        (("quantity:0.5", 5), "infeasible"),
        (("gradma_dirichlet:0.5", 21), "infeasible"),  # 21 clients x 2 initial samples > 40
    ]
    for (spec, N), msg in cases:
        with pytest.raises(ValueError, match=msg):
            P.split(y, spec, N, 0)
    with pytest.raises(ValueError, match="infeasible.*fewer clients"):
        P.split(y, "labelcnt:2", 40, 0)  # 80 slots over 4 classes: some class has > 10 holders
    with pytest.raises(ValueError, match="infeasible.*fewer clients.*larger beta"):
        P.split(np.zeros(40, np.int64), "dirichlet:0.01", 4, 0, max_tries=20)  # needs 10 each from one class
    with pytest.raises(ValueError, match="infeasible"):
        P.split(np.repeat(np.arange(10), 100), "quantity:0.05", 50, 0, min_size=15, max_tries=50)


@pytest.mark.parametrize("args, kwargs", [
    ((np.zeros((4, 2), np.int64), "iid", 2, 0), {}),
    ((np.array([], np.int64), "iid", 1, 0), {}),
    ((np.array([0.5, 1.0]), "iid", 1, 0), {}),
    ((np.arange(10), "iid", 0, 0), {}),
    ((np.arange(10), "iid", 2.0, 0), {}),
    ((np.arange(10), "iid", True, 0), {}),
    ((np.arange(10), "iid", 2, -1), {}),
    ((np.arange(10), "iid", 2, 0), {"ids": np.zeros(10)}),
    ((np.arange(10), "iid", 2, 0), {"ids": np.arange(9)}),
    ((np.arange(10), "dirichlet:1", 2, 0), {"min_size": -1}),
    ((np.arange(10), "dirichlet:1", 2, 0), {"max_tries": 0}),
])
def test_bad_arguments(args, kwargs):
    with pytest.raises(ValueError):
        P.split(*args, **kwargs)


# ---------------------------------------------------------------------------------- fingerprint

def test_fingerprint_golden_and_canonical():
    parts = [np.array([0, 2, 5]), np.array([1, 3]), np.array([4])]
    fp = P.fingerprint(parts)
    assert len(fp) == 16 and int(fp, 16) >= 0
    assert fp == "93ea2316e3273e10", fp  # frozen encoding: changing it invalidates stored results
    assert P.fingerprint([p[::-1].astype(np.int32) for p in parts]) == fp
    assert P.fingerprint([torch.tensor(p) for p in parts]) == fp
    assert P.fingerprint([p.tolist() for p in parts]) == fp
    assert P.fingerprint(parts[::-1]) != fp
    assert P.fingerprint([np.array([0, 2]), np.array([5, 1, 3]), np.array([4])]) != fp
    assert P.fingerprint(parts + [np.array([], np.int64)]) != fp


# ---------------------------------------------------------------------------------- statistics

@PROPS
@given(requests(), seeds)
def test_statistics_consistent_and_json(req, seed):
    y, spec, N, kw = req
    parts = split_quiet(y, spec, N, seed, **kw)
    stats = P.statistics(y, parts)
    assert json.loads(json.dumps(stats, allow_nan=False)) == stats
    hist = np.array(stats["label_histograms"])
    classes = np.array(stats["classes"])
    assert hist.shape == (N, classes.size)
    assert hist.sum(axis=1).tolist() == stats["counts"] == [p.size for p in parts]
    for row, p in zip(hist, parts):
        assert row.tolist() == [int(np.sum(y[p] == c)) for c in classes]
    assert stats["classes_per_client"] == [int(np.unique(y[p]).size) for p in parts]
    assert stats["size_min"] == min(stats["counts"]) and stats["size_max"] == max(stats["counts"])
    assert stats["size_mean"] == pytest.approx(np.mean(stats["counts"]))
    assert hist.sum() + sum(stats["dropped_per_class"]) == y.size
    het = stats["heterogeneity"]
    assert 0 <= het["tv_mean"] <= het["tv_max"] <= 1 and 0 <= het["js_mean"] <= het["js_max"] <= 1


def test_statistics_values():
    y = np.repeat(np.arange(4), 6)
    # every client holds the global distribution exactly: no heterogeneity
    flat = [np.flatnonzero(np.arange(24) % 6 // 2 == i) for i in range(3)]
    s = P.statistics(y, flat)
    assert s["heterogeneity"]["tv_mean"] == pytest.approx(0)
    assert s["heterogeneity"]["js_mean"] == pytest.approx(0)
    # one class per client, 4 balanced classes (histograms over 6 classes): TV = 3/4
    single = [np.flatnonzero(y == c) for c in range(4)]
    s = P.statistics(y, single, num_classes=6)
    assert s["heterogeneity"]["tv_mean"] == pytest.approx(0.75)
    p, q = np.array([1, 0, 0, 0, 0, 0.]), np.array([.25, .25, .25, .25, 0, 0])
    m = (p + q) / 2
    js = 0.5 * np.log2(1 / m[0]) + 0.5 * (0.25 * np.log2(0.25 / m[0]) + 0.75 * np.log2(0.25 / 0.125))
    assert s["heterogeneity"]["js_mean"] == pytest.approx(js)
    assert s["classes"] == list(range(6)) and s["label_histograms"][0] == [6, 0, 0, 0, 0, 0]
    assert s["classes_per_client"] == [1, 1, 1, 1] and s["num_dropped"] == 0
    # dropped, overlapping and empty clients are reported, not hidden
    s = P.statistics(y, [np.arange(10), np.arange(5, 12), np.array([], np.int64)])
    assert s["num_assigned"] == 12 and s["num_dropped"] == 12 and s["num_overlapping"] == 5
    assert s["num_empty_clients"] == 1 and s["size_min"] == 0
    with pytest.raises(ValueError):
        P.statistics(y, [np.array([0, 24])])
    with pytest.raises(ValueError):
        P.statistics(y, [np.arange(24)], num_classes=3)


def test_names_and_describe():
    assert P.names() == ("iid", "dirichlet", "labelcnt", "shards", "quantity", "gradma_dirichlet")
    d = P.describe()
    assert set(d) == set(P.names()) and all(isinstance(v, str) and v for v in d.values())
    assert P.describe("dirichlet").startswith("dirichlet:<beta>")
    assert P.describe("gradma_dirichlet").startswith("gradma_dirichlet:<omega>")
    with pytest.raises(ValueError):
        P.describe("nope")
