"""Declared hyperparameter constraints (``algorithms.core.hyper``): every registered algorithm's fields, one
error format, command-line conversion."""
import dataclasses
import math

import pytest

import algorithms
from benchmark.contract import checks as contract
from algorithms.core import hyper
from algorithms.core import make_hyper
from algorithms.core.hyper import HyperparameterError, Range, choice, param


def _message(name, field, constraint, value):
    return f"{name}: {field} must be {constraint.describe()}, got {value!r}"


@pytest.mark.parametrize("name", algorithms.names())
def test_every_declared_constraint_rejects_outside_values_in_the_one_format(name):
    contract.hyperparameters(name)  # the contract check a plugin gets too (pytest --fedrepro-plugin)


@pytest.mark.parametrize("name, args", [
    ("fedavgm", {"beta1": 0.0}), ("bherd", {"alpha": 1.0}), ("fedswa", {"rho": 0.0}), ("fedswa", {"rho": 1.0}),
    ("fedpaq", {"bits": 2}), ("fedpaq", {"bits": 16}), ("fedpaq", {"bits": 32}), ("lfl", {"q1": None}),
    ("lfl", {"q1": 1}), ("gradma", {"m": 0}), ("noisy_signsgd", {"sigma": 0.0}), ("fedprox", {"mu": 0}),
    ("mofedsam", {"alpha": 1.0}), ("fedmoswa", {"option": 1}), ("zerofl", {"sparsity": 0.0}),
])
def test_values_on_a_closed_boundary_are_accepted(name, args):
    make_hyper(algorithms.get_class(name), args)


def test_command_line_strings_are_converted_or_named_in_the_error():
    fedprox = algorithms.get_class("fedprox")
    assert make_hyper(fedprox, {"mu": "0.5"}).mu == 0.5
    assert make_hyper(fedprox, {"mu": 1}).mu == 1.0 and isinstance(make_hyper(fedprox, {"mu": 1}).mu, float)
    with pytest.raises(HyperparameterError, match=r"^fedprox: mu must be >= 0 and finite, got 'abc'$"):
        make_hyper(fedprox, {"mu": "abc"})
    with pytest.raises(HyperparameterError, match=r"^fedprox: mu must be >= 0 and finite, got True$"):
        make_hyper(fedprox, {"mu": True})  # a boolean is not a number (it was 1.0 before)
    gradma_s = algorithms.get_class("gradma_s")
    assert make_hyper(gradma_s, {"m": "10"}).m == 10 and make_hyper(gradma_s, {"m": "None"}).m is None
    with pytest.raises(HyperparameterError, match=r"gradma_s: m must be an integer >= 0 or None, got '1.5'"):
        make_hyper(gradma_s, {"m": "1.5"})
    assert make_hyper(gradma_s, {"per_layer": "on"}).per_layer is True
    with pytest.raises(HyperparameterError, match="per_layer must be true or false, got 'maybe'"):
        make_hyper(gradma_s, {"per_layer": "maybe"})


def test_cli_names_the_algorithm_and_hyperparameter(capsys):
    from benchmark.cli import main

    assert main(["run", "--algorithm", "fedprox", "--arg", "mu=abc", "--rounds", "1", "--no-progress"]) == 2
    assert "fedprox: mu must be >= 0 and finite, got 'abc'" in capsys.readouterr().err


def test_hint_and_unknown_keys():
    with pytest.raises(HyperparameterError, match=r"got 'scaffold' \(BHerd-SCAFFOLD is the algorithm bherd_scaffold\)"):
        make_hyper(algorithms.get_class("bherd"), {"base": "scaffold"})
    with pytest.raises(ValueError, match=r"fedprox: unknown algorithm_args \['beta1'\]"):
        make_hyper(algorithms.get_class("fedprox"), {"beta1": 0.5})


def test_a_variant_that_changes_a_default_keeps_its_bases_constraint():
    fields = dict((f.name, c) for f, c in hyper.fields(algorithms.get_class("bherd_random").Hyper))
    assert fields["selection"].describe() == "one of 'herding', 'random', 'closest'"
    with pytest.raises(HyperparameterError):
        make_hyper(algorithms.get_class("bherd_random"), {"selection": "topk"})


def test_a_field_without_a_constraint_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Hyper:
        a: float = param(1.0, hyper.POSITIVE)
        b: float = 2.0

    with pytest.raises(TypeError, match="b declares no constraint"):
        hyper.build("toy", Hyper, {})


def test_constraints():
    r = Range("[0, 1)")
    assert r.accepts(0) and r.accepts(0.5) and not r.accepts(1.0) and not r.accepts(True)
    assert not r.accepts(math.nan) and not r.accepts(-0.0 - 1e-300) and r.describe() == "in [0, 1)"
    assert Range("(0, inf)").describe() == "> 0 and finite" and not Range("(0, inf)").accepts(math.inf)
    i = Range("[2, 16]", integer=True)
    assert i.accepts(2) and not i.accepts(2.0) and not i.accepts(17) and i.describe() == "an integer in [2, 16]"
    c = choice(1, 2)
    assert c.accepts(1) and not c.accepts(True) and not c.accepts(1.0) and c.describe() == "one of 1, 2"
    assert hyper.Either(i, choice(32)).describe() == "an integer in [2, 16] or 32"
    with pytest.raises(ValueError, match="interval"):
        Range("0, 1")
    # the listing of every algorithm's hyperparameters with their constraints
    assert hyper.describe(algorithms.get_class("fedavgm").Hyper) == [
        ("beta1", 0.9, "in [0, 1)"), ("eta_g", 1.0, "> 0 and finite"), ("weighting", "samples",
                                                                       "one of 'samples', 'uniform'")]


def test_list_shows_every_hyperparameter_with_its_constraint(capsys):
    import re

    from benchmark.cli import main

    assert main(["list", "hyperparameters"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"\| fedavgm +\| beta1 +\| 0\.9 +\| in \[0, 1\) +\|", out)
    assert re.search(r"\| gradma +\| m +\| None +\| an integer >= 0 or None +\|", out)
    rows = [line for line in out.splitlines() if line.startswith("| ") and "algorithm" not in line]
    assert len(rows) == sum(len(dataclasses.fields(algorithms.get_class(n).Hyper)) for n in algorithms.names())
