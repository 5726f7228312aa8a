"""Golden histories (tests/golden.py): the code's histories equal, bit for bit, those generated at aa98dfe (before
issue 45's changes, all declared exact) for every algorithm on both executors, a batched group, padded batches
and the CNNs with BatchNorm and max-pooling. A change that moves a number must say so and regenerate the files.

The last bits of a history depend on the CPU's float32 kernels (their vector width and blocking), so each file is
for the machines whose kernels sum alike: ``golden_histories_aa98dfe-<fingerprint>.json`` for the machine
``tests.golden.machine()`` names (generated from aa98dfe's code on an AVX-512 Xeon, 2026-11-28, where every one of
its 110 histories equals HEAD's), and ``golden_histories_aa98dfe.json`` for the machine the first file was made on
(the sessions' and CI's until 2026-11-27; its fingerprint was not recorded), used wherever no fingerprint matches.
The AMD EPYC (AVX-512) of 2026-11-29, fingerprint affa927fc472, has its own files too: aa98dfe's histories there
fail 38 of the first file's cases and equal HEAD's in all 114 (each declared change's generated at its commit).

A change declared to move numbers (``CHANGES``) names the cases it may move; their histories after it are in
``golden_histories_<change>-<fingerprint>.json`` for the machines it was generated on, and on any other machine
those cases are skipped with the reason (the tests of the changed code itself run everywhere)."""
from __future__ import annotations

import dataclasses
import fnmatch
import json
import pathlib

import pytest

from tests.golden import cases, histories, machine

DATA = pathlib.Path(__file__).parent / "data"
MACHINE = machine()
_MINE = DATA / f"golden_histories_aa98dfe-{MACHINE}.json"
GOLDEN_FILE = _MINE if _MINE.exists() else DATA / "golden_histories_aa98dfe.json"
GOLDEN = json.loads(GOLDEN_FILE.read_text())
CASES = cases()
#: declared changes, in order: (name, the case names it may move as ``fnmatch`` patterns, what changed)
CHANGES = (
    ("qp_l_lapack", ("digits/gradma/*", "digits/gradma_w/*", "fmnist/gradma_mlp/gradma/*", "padded/gradma/*"),
     "GradMA's QP_l (issue 45): LAPACK's SVD of the 8 candidate supports on a CPU instead of the Jacobi sweeps, and "
     "p~ = p + M^T z as one float64 addmv; the multipliers move at ~1e-15, p~ by float32 rounding where they do"),
    ("numerics_0_5", ("*/vectorized", "batched/*", "digits/gradma*", "padded/gradma/*", "fmnist/gradma_mlp/*",
                      "fmnist/fedbat_cnn/*"),
     "0.5.0's numerics (issue 45): BatchNorm's recorded batch statistics from the kernel's own pass outside vmap, "
     "QP_l's QR in chunks of 32,768 entries (TSQR), GradMA's server Gram matrix kept incrementally (gram="
     "'incremental', the default), the vectorized executor's downlink one copy per client also for a run alone; "
     "on the AVX-512 Xeon of 8fe98d46af3f two cases moved: fmnist/gradma_mlp/gradma/sequential (its BatchNorm1d "
     "statistics) and fmnist/fedbat_cnn/fedavg/vectorized (its first local step's products), the others' 2 rounds "
     "end on the same bits"),
    ("fused_sgd", ("*/vectorized", "batched/*"),
     "0.5.0's numerics, continued (issue 45, ninth round): under the vectorized executor a plain chain's plain SGD "
     "step takes each layer's update inside its gradient's product (benchmark.sim.chain_grad.value_and_descend: "
     "W + (-lr g)^T h by one addmm, in place from a local loop's second step on); on the AVX-512 Xeon of "
     "8fe98d46af3f 21 of its 56 cases moved (every algorithm whose local loop is algorithms.core.base.sgd_loop or "
     "FedSWA's on an MLP or logistic regression, the padded and batched FedAvg), the others end on the same bits"),
)
_WHERE = (f"against {GOLDEN_FILE.name} (this machine's kernels: {MACHINE}; a CPU whose kernels sum otherwise needs "
          "its own file, generated from aa98dfe's code: python -m tests.golden OUT.json there)")


def test_every_case_has_a_golden_history():
    for path in DATA.glob("golden_histories_aa98dfe*.json"):  # the whole set; a declared change's files: its cases
        assert sorted(CASES) == sorted(json.loads(path.read_text())), path.name


def _moves(name: str, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _expected(name: str):
    """The golden history of ``name`` on this machine: after the last declared change that may move it (skipped
    where that change has no file for this machine), else aa98dfe's."""
    for change, patterns, what in reversed(CHANGES):
        if _moves(name, patterns):
            path = DATA / f"golden_histories_{change}-{MACHINE}.json"
            if not path.exists():
                pytest.skip(f"{name}: moved by the declared change {change} ({what}); its histories are recorded for "
                            f"other machines' kernels than this one's ({MACHINE})")
            return json.loads(path.read_text())[name]
    return GOLDEN[name]


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_history_unchanged(name):
    assert histories(*CASES[name]) == _expected(name), _WHERE


def test_every_declared_change_has_a_file_and_moves_only_its_cases():
    for change, patterns, _ in CHANGES:
        paths = list(DATA.glob(f"golden_histories_{change}-*.json"))
        assert paths, change
        for path in paths:
            assert sorted(json.loads(path.read_text())) == sorted(n for n in CASES if _moves(n, patterns))


def test_a_planted_change_is_caught():
    """The comparison can fail: FedAvg with a learning rate 0.2% higher differs from its golden history."""
    [exp], executor = CASES["digits/fedavg/vectorized"]
    assert histories([dataclasses.replace(exp, lr=exp.lr * 1.002)], executor) != GOLDEN["digits/fedavg/vectorized"]


def test_the_fingerprint_tells_kernels_apart(monkeypatch):
    """Another summation order (here: the long sum taken in two halves) gives another fingerprint."""
    import torch

    real = torch.Tensor.sum
    monkeypatch.setattr(torch.Tensor, "sum", lambda t, *a, **k: real(t[: len(t) // 2]) + real(t[len(t) // 2:])
                        if t.dim() == 1 and not a and not k else real(t, *a, **k))
    assert machine() != MACHINE
