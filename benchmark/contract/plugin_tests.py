"""The contract tests that ``pytest --fedrepro-plugin my_alg.py`` collects (``benchmark.pytest_plugin``): each
check of ``benchmark.contract.checks`` on each algorithm of the plugin (``fedrepro_algorithm``)."""
from __future__ import annotations

import pytest

from benchmark.contract import checks as contract


def _check(name: str, algorithm: str) -> None:
    try:
        contract.CHECKS[name](algorithm)
    except contract.NotApplicable as e:
        pytest.skip(str(e))


def test_hyperparameters(fedrepro_algorithm):
    _check("hyperparameters", fedrepro_algorithm)


def test_executors_agree(fedrepro_algorithm):
    _check("executors_agree", fedrepro_algorithm)


def test_deterministic(fedrepro_algorithm):
    _check("deterministic", fedrepro_algorithm)


def test_record_round_trip(fedrepro_algorithm):
    _check("record_round_trip", fedrepro_algorithm)


def test_batches(fedrepro_algorithm):
    _check("batches", fedrepro_algorithm)


def test_resumes(fedrepro_algorithm):
    _check("resumes", fedrepro_algorithm)
