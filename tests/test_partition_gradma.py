"""The ``gradma_dirichlet:<omega>`` partition (GradMA's public-code split): a transcription of the code's
loop gives the same split, the 2 initial samples make omega = 0.01 with N = 100 feasible where NIID-Bench's
``dirichlet`` (>= 10 samples per client) is not, and the kind's edge cases. The generic invariants
(disjoint cover, determinism, order independence, torch/list inputs, statistics) are the property tests
of test_partition.py, whose strategies include this kind."""
import numpy as np
import pytest

from benchmark.datasets import partition as P

MNIST_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def code_transcription(y, num_clients, omega, seed):
    """GradMA's ``DataDistributer._split_dataset_by_proportion`` (non_iid_dirichlet), written as the code
    is, with labels sorted (canonical order = position) and our random stream: proportions, each class's
    indices (shuffled), two passes of one popped sample per client from a random class, then
    ``np.split(c, (np.cumsum(fracs)[:-1] * len(c)).astype(int))`` per class."""
    rng = np.random.default_rng(seed)
    classes = np.unique(y)
    proportions = rng.dirichlet(np.full(num_clients, omega), size=classes.size)
    class_idcs = [list(np.flatnonzero(y == c)[rng.permutation(int(np.sum(y == c)))]) for c in classes]
    client_idcs = [[] for _ in range(num_clients)]
    for _ in range(2):
        for client_id in range(num_clients):
            class_id = rng.choice([k for k, c in enumerate(class_idcs) if c])
            client_idcs[client_id].append(class_idcs[class_id].pop())
    for c, fracs in zip(class_idcs, proportions):
        for i, idcs in enumerate(np.split(np.array(c, np.int64), (np.cumsum(fracs)[:-1] * len(c)).astype(int))):
            client_idcs[i].extend(idcs.tolist())
    return [np.sort(np.array(c, np.int64)) for c in client_idcs]


@pytest.mark.parametrize("omega, N, seed", [(0.01, 100, 0), (0.1, 20, 1), (1.0, 7, 2), (0.5, 30, 3)])
def test_matches_a_transcription_of_the_public_code(omega, N, seed):
    y = np.repeat(np.arange(10), [m // 20 for m in MNIST_COUNTS])
    parts = P.split(y, f"gradma_dirichlet:{omega}", N, seed)
    ref = code_transcription(y, N, omega, seed)
    assert all(np.array_equal(a, b) for a, b in zip(parts, ref))


def test_dir_001_with_100_clients_is_feasible_where_niid_bench_is_not():
    """GradMA's Table 1 columns c3-c5 and c8: MNIST / CIFAR-10 (10 classes), omega = 0.01, N = 100."""
    y = np.repeat(np.arange(10), MNIST_COUNTS)
    with pytest.raises(ValueError, match="infeasible"):
        P.split(y, "dirichlet:0.01", 100, 0, max_tries=50)
    for seed in range(3):
        parts = P.split(y, "gradma_dirichlet:0.01", 100, seed)
        stats = P.statistics(y, parts, 10)
        assert stats["num_assigned"] == y.size and stats["num_overlapping"] == 0
        assert stats["size_min"] >= 2 and stats["num_empty_clients"] == 0
        assert stats["counts"].count(2) >= 10  # clients that won no class share hold just their 2 samples
        assert stats["heterogeneity"]["tv_mean"] > 0.7  # extreme label skew
        assert max(stats["classes_per_client"]) <= 2 + 10


def test_tiny_omega_gives_each_class_to_one_client_plus_the_initial_samples():
    y = np.repeat(np.arange(5), 40)
    parts = P.split(y, "gradma_dirichlet:1e-9", 30, 4)
    sizes = np.array([p.size for p in parts])
    # Dir(1e-9) rows are one-hot: the 200 - 60 pooled samples go to at most 5 clients, whole classes
    assert (sizes == 2).sum() >= 30 - 5 and sizes.sum() == 200
    hists = np.array(P.statistics(y, parts, 5)["label_histograms"])
    assert np.all((hists > 2).sum(axis=0) <= 1)  # beyond the initial samples, a class has one holder


def test_large_omega_splits_every_class_nearly_evenly():
    y = np.repeat(np.arange(4), 1000)
    parts = P.split(y, "gradma_dirichlet:1e6", 10, 5)
    hists = np.array(P.statistics(y, parts, 4)["label_histograms"])
    assert np.all(np.abs(hists - 100) <= 5)


def test_exhausted_classes_are_skipped_for_the_initial_samples():
    """The public code would pop from an empty class list; here the initial class is drawn among the
    classes with samples left, so a class of 1 sample is handed out at most once."""
    y = np.array([0] + [1] * 9 + [2] * 10)
    for seed in range(20):
        parts = P.split(y, "gradma_dirichlet:0.1", 10, seed)  # 20 samples, 10 clients x 2: all initial
        assert [p.size for p in parts] == [2] * 10
        assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(20))


def test_min_size_and_max_tries_do_not_apply():
    y = np.repeat(np.arange(3), 10)
    base = P.split(y, "gradma_dirichlet:0.3", 12, 0)
    assert all(np.array_equal(a, b) for a, b in zip(base, P.split(y, "gradma_dirichlet:0.3", 12, 0,
                                                                     min_size=25, max_tries=1)))
    with pytest.raises(ValueError, match="2 initial samples"):
        P.split(y, "gradma_dirichlet:0.3", 16, 0)
