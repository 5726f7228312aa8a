"""The paper presets' references: each one names cells that exist, and Table-style suites give every
cell exactly one reference (a typo in a match would silently drop a paper number)."""
from __future__ import annotations

import pytest

from benchmark.campaign import suite as campaign_suite

WITH_REFERENCES = [n for n in campaign_suite.suite_names() if campaign_suite.load_suite(n).references]


@pytest.mark.parametrize("name", WITH_REFERENCES)
def test_every_reference_matches_a_cell(name):
    suite = campaign_suite.load_suite(name)
    for ref in suite.references:
        n = sum(any(r is ref for r in c.references) for c in suite.cells)
        assert n >= 1, f"{name}: reference {ref.match} ({ref.source}) matches no cell"


def test_gradma_table1_is_the_whole_table():
    suite = campaign_suite.load_suite("gradma_table1")
    algs = {c.experiment.algorithm for c in suite.cells}
    assert algs == {"fedavg", "fedprox", "fedmlb", "moon", "scaffold", "gradma_w", "fedavgm", "mifa", "mifam",
                    "gradma_s", "fedproxm", "fedmlbm", "moonm", "feddyn", "mimelite", "gradma"}
    assert len(suite.cells) == 16 * 14 * 3
    assert len(suite.references) == 16 * 14
    for c in suite.cells:
        assert len(c.references) == 1, (c.experiment.algorithm, c.experiment.dataset, c.experiment.partition)
    columns = {(c.experiment.dataset, c.experiment.partition, c.experiment.clients_per_round) for c in suite.cells}
    assert len(columns) == 14
    assert ("mnist", "gradma_dirichlet:0.01", 5) in columns and ("cifar10", "gradma_dirichlet:0.01", 10) in columns
