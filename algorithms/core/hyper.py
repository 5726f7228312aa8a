"""Hyperparameters that declare their constraints, checked in one place with one error format.

Each field of an algorithm's frozen ``Hyper`` dataclass says which values it takes, in its metadata:

    beta1: float = param(0.9, MOMENTUM)            # in [0, 1)
    weighting: str = param("samples", WEIGHTING)   # one of 'samples', 'uniform'
    q2: int | None = param(2, Either(Range("[1, inf)", integer=True), NONE))   # an integer >= 1 or None

``build`` (called by ``algorithms.core.registry.make_hyper``) converts command-line strings by the field's
type, builds the dataclass and checks every field against its constraint. Every rejection, of a
string that does not convert or of a value outside the constraint, reads

    <algorithm>: <hyperparameter> must be <constraint>, got <value>

e.g. ``fedavgm: beta1 must be in [0, 1), got 1.0`` or ``fedprox: mu must be >= 0 and finite, got 'abc'``.
A field without a declared constraint is a programming error (``TypeError``); a variant that only
redeclares a default keeps its base's constraint. No algorithm has a constraint between two of its
fields, so there is no form for one. ``fedrepro list hyperparameters`` shows every constraint.
"""
from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Mapping

_KEY = "constraint"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_NONE = ("none", "null")


class Constraint:
    """The values one hyperparameter takes."""

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        """What the value must be, completing "<name> must be ..."."""
        raise NotImplementedError

    def outside(self) -> tuple:
        """Values the constraint rejects, closest to its boundary first (used by the tests)."""
        raise NotImplementedError

    def hint(self, value: Any) -> str | None:
        """An extra pointer for a rejected value (e.g. "did you mean algorithm X")."""
        return None


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class Range(Constraint):
    """A finite number (``integer=True``: an int) in an interval written as in mathematics, e.g.
    ``"[0, 1)"``, ``"(0, inf)"`` (positive), ``"[1, inf)"``. Booleans are not numbers."""

    interval: str
    integer: bool = False

    def __post_init__(self):
        s = self.interval.strip()
        if s[:1] not in ("[", "(") or s[-1:] not in (")", "]") or s.count(",") != 1:
            raise ValueError(f"Range: interval must look like '[0, 1)', got {self.interval!r}")
        lo, hi = (p.strip() for p in s[1:-1].split(","))
        object.__setattr__(self, "_bounds", (float(lo), float(hi), s[0] == "[", s[-1] == "]"))

    def accepts(self, v):
        if not (isinstance(v, int) and not isinstance(v, bool) if self.integer else _is_number(v)):
            return False
        lo, hi, lo_closed, hi_closed = self._bounds
        if isinstance(v, float) and not math.isfinite(v):
            return False
        return (v >= lo if lo_closed else v > lo) and (v <= hi if hi_closed else v < hi)

    def describe(self):
        lo, hi, lo_closed, _ = self._bounds
        if math.isinf(hi):
            if math.isinf(lo):
                return "an integer" if self.integer else "finite"
            bound = f"{'>=' if lo_closed else '>'} {_fmt(lo)}"
            return f"an integer {bound}" if self.integer else f"{bound} and finite"
        shown = f"in {self.interval.replace(' ', '').replace(',', ', ')}"
        return f"an integer {shown}" if self.integer else shown

    def outside(self):
        lo, hi, lo_closed, hi_closed = self._bounds
        out: list = []
        if math.isfinite(lo):
            out.append((int(lo) - 1 if self.integer else math.nextafter(lo, -math.inf)) if lo_closed else
                       (int(lo) if self.integer else lo))
        if math.isfinite(hi):
            out.append((int(hi) + 1 if self.integer else math.nextafter(hi, math.inf)) if hi_closed else
                       (int(hi) if self.integer else hi))
        if self.integer:  # a fraction inside the interval
            out.append(0.5 if not math.isfinite(lo) else lo + (0.5 if lo_closed else 1.5))
        else:
            out += [math.inf, math.nan]
        return tuple(out) + (True, "x")


@dataclass(frozen=True)
class Choice(Constraint):
    """One of a fixed set of values (compared with their type: ``True`` is not ``1``).

    ``hints`` maps a rejected value to a pointer shown after the error."""

    options: tuple
    hints: Mapping[Any, str] = dataclasses.field(default_factory=dict)

    def accepts(self, v):
        return any(type(v) is type(o) and v == o for o in self.options)

    def describe(self):
        shown = ["None" if o is None else repr(o) for o in self.options]
        return shown[0] if len(shown) == 1 else f"one of {', '.join(shown)}"

    def outside(self):
        out = [h for h in self.hints]
        strings = [o for o in self.options if isinstance(o, str)]
        ints = [o for o in self.options if _is_number(o)]
        if strings or not self.options:
            out.append("x" + "".join(strings))
        if ints:
            out += [max(ints) + 1, True]
        if None not in self.options:
            out.append(None)
        return tuple(v for v in out if not self.accepts(v))

    def hint(self, v):
        try:
            return self.hints.get(v)
        except TypeError:  # unhashable value
            return None


def choice(*options, hints: Mapping[Any, str] | None = None) -> Choice:
    return Choice(tuple(options), dict(hints or {}))


@dataclass(frozen=True)
class Bool(Constraint):
    """True or False (on the command line: true/false, yes/no, on/off, 1/0)."""

    def accepts(self, v):
        return isinstance(v, bool)

    def describe(self):
        return "true or false"

    def outside(self):
        return (2, 0, "maybe", None)


@dataclass(frozen=True)
class Either(Constraint):
    """A value that one of the alternatives accepts (e.g. an integer level or None)."""

    alternatives: tuple

    def __init__(self, *alternatives: Constraint):
        object.__setattr__(self, "alternatives", tuple(alternatives))

    def accepts(self, v):
        return any(a.accepts(v) for a in self.alternatives)

    def describe(self):
        return " or ".join(a.describe() for a in self.alternatives)

    def outside(self):
        out: dict = {}  # by repr: 1, 1.0 and True are different values here
        for a in self.alternatives:
            for v in a.outside():
                if not self.accepts(v):
                    out.setdefault(repr(v), v)
        return tuple(out.values())

    def hint(self, v):
        return next((h for a in self.alternatives if (h := a.hint(v))), None)


# the constraints many algorithms share
POSITIVE = Range("(0, inf)")
NONNEGATIVE = Range("[0, inf)")
MOMENTUM = Range("[0, 1)")  # a momentum / decay coefficient beta
NONE = choice(None)
WEIGHTING = choice("samples", "uniform")  # p_i = n_i / sum n_j (the engine's weights) or 1/S
BOOL = Bool()


def param(default: Any, constraint: Constraint) -> Any:
    """A ``Hyper`` field with its default and its declared constraint."""
    if not isinstance(constraint, Constraint):
        raise TypeError(f"param: constraint must be an algorithms.core.hyper.Constraint, got {constraint!r}")
    return dataclasses.field(default=default, metadata={_KEY: constraint})


def constraint_of(f: dataclasses.Field) -> Constraint | None:
    return f.metadata.get(_KEY)


class HyperparameterError(ValueError):
    """A hyperparameter outside its declared constraint: "<algorithm>: <name> must be <...>, got <value>"."""

    def __init__(self, algorithm: str, name: str, constraint: Constraint, value: Any):
        self.algorithm, self.name, self.constraint, self.value = algorithm, name, constraint, value
        msg = f"{algorithm}: {name} must be {constraint.describe()}, got {value!r}"
        hint = constraint.hint(value)
        super().__init__(f"{msg} ({hint})" if hint else msg)


def _inherited(hyper: type, name: str) -> Constraint | None:
    """The constraint a base ``Hyper`` declares for ``name`` (a variant that only changes a default)."""
    for base in hyper.__mro__[1:]:
        if dataclasses.is_dataclass(base):
            for f in dataclasses.fields(base):
                if f.name == name and constraint_of(f) is not None:
                    return constraint_of(f)
    return None


def fields(hyper: type) -> list[tuple[dataclasses.Field, Constraint]]:
    """(field, constraint) of every hyperparameter; TypeError for a field that declares none.

    A subclass that redeclares a field with a plain default (``selection: str = "random"``) keeps
    the constraint its base declares."""
    out = []
    for f in dataclasses.fields(hyper):
        c = constraint_of(f) or _inherited(hyper, f.name)
        if c is None:
            raise TypeError(f"{hyper.__qualname__}.{f.name} declares no constraint: declare it with "
                            "algorithms.core.hyper.param(default, constraint)")
        out.append((f, c))
    return out


def _base_types(annotation: Any) -> tuple:
    """The non-None types of an annotation (``int | None`` -> (int,))."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return tuple(a for a in typing.get_args(annotation) if a is not type(None))
    return (annotation,)


def convert(value: Any, annotation: Any) -> Any:
    """A command-line string to the field's type ("none"/"null" -> None); an int to a float field's
    float. Raises ValueError for a string that does not convert; other values pass unchanged."""
    kinds = _base_types(annotation)
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _NONE:
            return None
        if bool in kinds:
            if text not in _TRUE + _FALSE:
                raise ValueError(value)
            return text in _TRUE
        if int in kinds:
            return int(value)
        if float in kinds:
            return float(value)
        return value
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def build(algorithm: str, hyper: type, args: Mapping[str, Any]) -> Any:
    """The ``hyper`` dataclass from ``args`` (strings converted), every field checked against its
    constraint: the one place hyperparameters are validated."""
    declared = fields(hyper)
    by_name = {f.name: (f, c) for f, c in declared}
    unknown = sorted(set(args) - set(by_name))
    if unknown:
        raise ValueError(f"{algorithm}: unknown algorithm_args {unknown}; valid: {sorted(by_name) or 'none'}")
    hints = typing.get_type_hints(hyper)
    converted = {}
    for k, v in args.items():
        try:
            converted[k] = convert(v, hints.get(k, Any))
        except (ValueError, TypeError):
            raise HyperparameterError(algorithm, k, by_name[k][1], v) from None
    hp = hyper(**converted)
    for f, c in declared:
        v = getattr(hp, f.name)
        if not c.accepts(v):
            raise HyperparameterError(algorithm, f.name, c, v)
    return hp


def describe(hyper: type) -> list[tuple[str, Any, str]]:
    """(name, default, constraint) of every hyperparameter, in declaration order (``fedrepro list``)."""
    default = hyper()
    return [(f.name, getattr(default, f.name), c.describe()) for f, c in fields(hyper)]


def derive(hyper: type, defaults: Mapping[str, Any], fields_: tuple = (), qualname: str | None = None,
           fixed: Mapping[str, Any] | None = None) -> type:
    """A copy of the frozen dataclass ``hyper`` with other ``defaults`` (each field keeps its constraint),
    the extra ``fields_``, each ``(name, annotation, param(default, constraint), before)`` placed before the
    field ``before`` (None: at the end), and the ``fixed`` values: a fixed field is no longer a field (no
    ``algorithm_args`` sets it, ``fedrepro list`` does not show it) but a class attribute that ``hp.name``
    reads, as is a class constant of ``hyper`` (a ``ClassVar``), which the copy keeps unless ``fixed`` sets
    it. ``registry.configure`` builds a configuration's ``Hyper`` with it."""
    fixed = dict(fixed or {})
    hints = typing.get_type_hints(hyper)
    constants = {n: getattr(hyper, n) for n, t in hints.items() if typing.get_origin(t) is typing.ClassVar}
    declared = fields(hyper)
    names = {f.name for f, _ in declared}
    unknown = sorted(set(defaults) - names) + sorted(set(fixed) - names - set(constants))
    if unknown or set(defaults) & set(fixed):
        raise ValueError(f"derive: {hyper.__qualname__} has no hyperparameters {unknown}" if unknown else
                         f"derive: {sorted(set(defaults) & set(fixed))} cannot be both a default and fixed")
    spec = [(f.name, hints[f.name], param(defaults.get(f.name, f.default), c)) for f, c in declared
            if f.name not in fixed]
    for name, annotation, field, before in fields_:
        at = next((i for i, (n, _, _) in enumerate(spec) if n == before), len(spec))
        spec.insert(at, (name, annotation, field))
    namespace = {"__module__": hyper.__module__, **constants, **fixed}
    cls = dataclasses.make_dataclass("Hyper", spec, frozen=True, namespace=namespace)
    cls.__qualname__ = qualname or hyper.__qualname__
    return cls
