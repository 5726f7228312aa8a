"""The contract tests for free: ``pytest --fedrepro-plugin my_alg.py`` runs the generic algorithm checks
(``benchmark.contract.checks``: hyperparameter constraints, sequential vs vectorized, determinism, record round trip
and bits, batching) on every algorithm the plugin registers, one test per check and algorithm.

Registered as a pytest plugin by the ``pytest11`` entry point of fedrepro's pyproject.toml (every pytest of an
environment where fedrepro is installed has the option; without it the plugin does nothing), or by hand:
``pytest -p benchmark.pytest_plugin --fedrepro-plugin my_alg.py``. With the option and no test paths, pytest
runs only the contract tests; with paths, those too. ``--fedrepro-plugin`` is repeatable, and takes what
``--plugin`` takes (a .py file or a module name)."""
from __future__ import annotations

from pathlib import Path

import pytest

OPTION = "--fedrepro-plugin"


def pytest_addoption(parser) -> None:
    parser.getgroup("fedrepro").addoption(
        OPTION, action="append", default=[], metavar="FILE.py|MODULE",
        help="run fedrepro's algorithm contract tests on the algorithms this plugin registers (repeatable)")


def pytest_configure(config) -> None:
    specs = config.getoption(OPTION) or []
    if not specs:
        return
    from algorithms.core import plugins  # lazy: pytest loads this plugin in every session (the pytest11 entry
    # point); importing algorithms imports torch, 2.4 s CPU (measured), paid only with --fedrepro-plugin

    names = []
    for spec in specs:
        try:
            plugin = plugins.load(spec)
        except plugins.PluginError as e:
            raise pytest.UsageError(f"{OPTION} {spec}: {e}") from None
        names += plugin.names.get("algorithms", [])
    if not names:
        raise pytest.UsageError(f"{OPTION} {' '.join(specs)}: the plugin registers no algorithm "
                                "(decorate its Algorithm class with @register)")
    config._fedrepro_algorithms = sorted(set(names))
    sources = getattr(pytest.Config, "ArgsSource", None)  # pytest >= 7.2
    explicit = sources is not None and getattr(config, "args_source", None) == sources.ARGS
    contract_tests = str(Path(__file__).resolve().parent / "contract" / "plugin_tests.py")
    config.args[:] = (list(config.args) if explicit else []) + [contract_tests]


def pytest_generate_tests(metafunc) -> None:
    if "fedrepro_algorithm" in metafunc.fixturenames:
        names = getattr(metafunc.config, "_fedrepro_algorithms", None)
        if names is None:
            import algorithms

            names = algorithms.names()
        metafunc.parametrize("fedrepro_algorithm", names)
