"""Suite files: parse and check ``benchmark/suites/*.toml`` (or any path) into cells (format: suites/FORMAT.md).

A suite is ``[defaults]`` applied to the cartesian product of ``[matrix]`` (or the union of several
``[[matrix]]`` blocks), then ``[[override]]`` in order, then the paper's ``[[reference]]`` numbers. Every
value list may hold tables for the dict fields (``algorithm_args = [{ beta1 = 0.1 }, { beta1 = 0.5 }]``),
so hyperparameters vary like any other field.

Checked strictly, with the file and the key in every error: unknown keys anywhere (top level, defaults,
matrix, override, reference, and the keys of ``algorithm_args``, ``dataset_args`` and ``model_args``) are
errors with a did-you-mean; so is an override or reference whose ``match`` matches no cell (a typo such as
``algorithm = "fedproxx"`` would otherwise run the wrong hyperparameters silently), and a value listed
twice in a matrix list. Cells with equal configurations are one cell (same config hash).
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

import algorithms

from benchmark import datasets, models

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from algorithms.core import plugins as plugin_loader

from benchmark.runs.experiment import DICT_FIELDS, Experiment

SUITES_DIR = Path(__file__).resolve().parents[1] / "suites"
TOP_KEYS = ("name", "description", "paper", "requires", "metric", "defaults", "matrix", "override", "reference",
            "notes", "scale", "plugins", "divergence_factor")
DIVERGENCE = "divergence_factor"  # the divergence rule (benchmark.sim.engine): a number > 1, or false (off) in a suite
SCALES = ("paper", "reduced")  # "paper": the paper's own setting, its numbers are comparable; else orientation only
FIELDS = tuple(f.name for f in dataclasses.fields(Experiment))


class SuiteError(ValueError):
    pass


@dataclass
class Reference:
    match: dict
    value: float
    std: float | None = None
    source: str = ""


@dataclass
class Cell:
    experiment: Experiment
    config_hash: str
    references: list[Reference] = field(default_factory=list)


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    cells: list[Cell]
    references: list[Reference]
    metric: str = "test_accuracy"
    paper: str | None = None
    requires: str = "cpu"
    notes: dict = field(default_factory=dict)
    scale: str = "reduced"
    plugins: list = field(default_factory=list)  # the provenance of the plugins the suite file names


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.toml"))


def suite_path(name_or_path: str | Path) -> Path:
    """A shipped suite's file by name (``smoke``), or a suite file by path (``my_suites/grid.toml``)."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    cand = SUITES_DIR / f"{name_or_path}.toml"
    if cand.is_file():
        return cand
    if p.suffix == ".toml" or len(p.parts) > 1:
        raise SuiteError(f"no suite file {str(p)!r} (a path must name an existing .toml file)")
    raise SuiteError(f"unknown suite {str(name_or_path)!r}.{did_you_mean(str(name_or_path), suite_names())} Known: "
                     f"{', '.join(suite_names())}; or give the path of a suite file")


def did_you_mean(word: str, options) -> str:
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _unknown(keys, valid, where: str, what: str = "key") -> None:
    for k in keys:
        if k not in valid:
            raise SuiteError(f"{where}: unknown {what} {k!r}.{did_you_mean(k, valid)} Valid: {', '.join(valid)}")


def _check_fields(d: dict, where: str) -> None:
    _unknown(d, FIELDS, where, "key (not an Experiment field)")
    for k, v in d.items():
        if k in DICT_FIELDS and not isinstance(v, dict):
            raise SuiteError(f"{where}: {k} must be a table (e.g. {{ mu = 0.01 }}), got {v!r}")


def config_matches(match: dict, cfg: dict) -> bool:
    """Whether every key of ``match`` (an override's, a reference's, a claim's) equals the run config's value
    (dict fields: key by key)."""
    for k, v in match.items():
        if k in DICT_FIELDS:
            if any((cfg.get(k) or {}).get(kk) != vv for kk, vv in v.items()):
                return False
        elif cfg.get(k) != v:
            return False
    return True



def _apply(cfg: dict, update: dict) -> dict:
    out = copy.deepcopy(cfg)
    for k, v in update.items():
        if k in DICT_FIELDS:
            out[k] = {**out.get(k, {}), **v}
        else:
            out[k] = v
    return out


def _matrices(raw: dict, where: str) -> list[dict]:
    """The ``[matrix]`` table, or each ``[[matrix]]`` block, checked: Experiment fields, non-empty lists without
    repeats, tables for the dict fields; ``"*"`` in ``algorithm`` expanded to every registered algorithm."""
    blocks = raw.get("matrix", {})
    if not blocks:  # an empty file ran one cell of Experiment's defaults, named as if it were a suite
        raise SuiteError(f"{where}: no [matrix]: a suite is [defaults] applied to every combination of its [matrix] "
                         "lists; add one, e.g. [matrix] with seed = [0] (format: benchmark/suites/FORMAT.md)")
    blocks = blocks if isinstance(blocks, list) else [blocks]
    out = []
    for i, m in enumerate(blocks):
        at = f"{where} [matrix]" if len(blocks) == 1 else f"{where} [[matrix]] #{i + 1}"
        if not isinstance(m, dict):
            raise SuiteError(f"{at}: must be a table of lists, got {m!r}")
        _unknown(m, FIELDS, at, "key (not an Experiment field)")
        for k, v in m.items():
            one = "{ beta1 = 0.1 }" if k == "algorithm_args" else "{ ... }"
            if k in DICT_FIELDS and not (isinstance(v, list) and v and all(isinstance(x, dict) for x in v)):
                raise SuiteError(f"{at}: {k} must be a non-empty list of tables, one per value, e.g. {k} = [{one}, "
                                 f"{one.replace('0.1', '0.5')}], got {v!r}")
            if not isinstance(v, list) or not v:
                raise SuiteError(f"{at}: {k} must be a non-empty list, got {v!r}")
            seen = [json.dumps(x, sort_keys=True) for x in v]
            twice = sorted({s for s in seen if seen.count(s) > 1})
            if twice:
                raise SuiteError(f"{at}: {k} lists {', '.join(twice)} more than once")
        if "*" in m.get("algorithm", []):  # "*" stands for every registered algorithm

            rest = [a for a in m["algorithm"] if a != "*"]
            m = {**m, "algorithm": rest + [a for a in algorithms.names() if a not in rest]}
        out.append(m)
    return out


def _check_overrides(overrides, where: str) -> None:
    if not isinstance(overrides, list):
        raise SuiteError(f"{where}: override must be an array of tables ([[override]]), got {overrides!r}")
    for i, o in enumerate(overrides):
        _unknown(o, ("match", "set"), f"{where} [[override]] #{i + 1}")
        _check_fields(o.get("match", {}), f"{where} [[override]] #{i + 1} match")
        _check_fields(o.get("set", {}), f"{where} [[override]] #{i + 1} set")


def _references(raw: dict, where: str) -> list[Reference]:
    refs = []
    for i, r in enumerate(raw.get("reference", [])):
        at = f"{where} [[reference]] #{i + 1}"
        _unknown(r, ("match", "value", "std", "source"), at)
        if "value" not in r:
            raise SuiteError(f"{at}: needs match and value (std, source optional)")
        _check_fields(r.get("match", {}), f"{at} match")
        refs.append(Reference(r.get("match", {}), float(r["value"]), r.get("std"), r.get("source", "")))
    return refs


def check_option_keys(cfg: dict, where: str) -> None:
    """The keys of algorithm_args, dataset_args and model_args are the algorithm's hyperparameters, the
    dataset's options and the model's options (a typo is an error with a did-you-mean)."""
    checks = []
    if isinstance(cfg.get("algorithm"), str) and cfg["algorithm"] in algorithms.names():
        hyper = algorithms.get_class(cfg["algorithm"]).Hyper
        checks.append(("algorithm_args", f"hyperparameter of {cfg['algorithm']}", [f.name for f in dataclasses.fields(hyper)]))
    if isinstance(cfg.get("dataset"), str):
        try:
            checks.append(("dataset_args", f"option of dataset {cfg['dataset']}", list(datasets.options(cfg["dataset"]))))
        except ValueError as e:
            raise SuiteError(f"{where}: {e}") from None
    if isinstance(cfg.get("model"), str):
        if cfg["model"] not in models.names():
            raise SuiteError(f"{where}: unknown model {cfg['model']!r}.{did_you_mean(cfg['model'], models.names())} "
                             f"Known: {', '.join(models.names())}")
        checks.append(("model_args", f"option of model {cfg['model']}", list(models.SPECS[cfg["model"]].options)))
    for key, what, valid in checks:
        _unknown(cfg.get(key) or {}, valid, f"{where}: {key}", what)


def _no_match_error(at: str, match: dict, seen: list[dict]) -> SuiteError:
    """Why ``match`` matched none of the configs ``seen``: the keys whose value no config has, with a hint."""
    why = []
    for k, v in match.items():
        if k in DICT_FIELDS:
            for kk, vv in v.items():
                have = {json.dumps((c.get(k) or {}).get(kk)) for c in seen}
                if json.dumps(vv) not in have:
                    why.append(f"no cell has {k}.{kk} = {vv!r} (values: {', '.join(sorted(have))})")
            continue
        have = sorted({json.dumps(c.get(k)) for c in seen})
        if json.dumps(v) not in have:
            hint = did_you_mean(json.dumps(v), have)
            why.append(f"no cell has {k} = {v!r}.{hint} Values: {', '.join(have)}")
    return SuiteError(f"{at}: match {match} matches no cell: " + ("; ".join(why) or "no cell has all these values "
                      "at once") + ". Fix the value or remove the block.")


def _cells(where: str, defaults: dict, matrices: list[dict], overrides: list[dict], refs: list[Reference]) -> list[Cell]:
    cells, hashes = [], set()
    seen: list[list[dict]] = [[] for _ in overrides]  # the configs each override saw, for its error
    used = [False] * len(overrides)
    for m in matrices:
        keys = list(m)
        for combo in itertools.product(*(m[k] for k in keys)):
            cfg = _apply(defaults, dict(zip(keys, combo)))
            for i, o in enumerate(overrides):
                seen[i].append(cfg)
                if config_matches(o.get("match", {}), cfg):
                    used[i] = True
                    cfg = _apply(cfg, o.get("set", {}))
            check_option_keys(cfg, f"{where}: cell {cfg}")
            try:
                exp = Experiment(**divergence_rule(cfg, where))
                exp.validate()
            except (TypeError, ValueError) as e:
                raise SuiteError(f"{where}: invalid cell {cfg}: {e}") from None
            h = exp.config_hash()
            if h not in hashes:
                hashes.add(h)
                cells.append(Cell(exp, h, [r for r in refs if config_matches(r.match, cfg)]))
    for i, o in enumerate(overrides):
        if not used[i]:
            raise _no_match_error(f"{where} [[override]] #{i + 1}", o.get("match", {}), seen[i])
    for i, r in enumerate(refs):
        if not any(c.references and r in c.references for c in cells):
            raise _no_match_error(f"{where} [[reference]] #{i + 1}", r.match, [c.experiment.config() for c in cells])
    return cells


def divergence_rule(cfg: dict, where: str) -> dict:
    """``cfg`` with the suite spelling of the divergence rule made an Experiment's: ``false`` switches it off
    (None: only NaN/inf count as diverged); ``true`` names no factor and is an error."""
    v = cfg.get(DIVERGENCE)
    if v is True:
        raise SuiteError(f"{where}: {DIVERGENCE} = true names no factor: give a number > 1 (e.g. 100, the default) or "
                         "false to switch the rule off")
    return {**cfg, DIVERGENCE: None} if v is False else cfg


def load_suite(name_or_path: str | Path) -> Suite:
    """Parse and check a suite (a shipped suite's name, or the path of a suite file); errors name the file and
    the key."""
    path = suite_path(name_or_path)
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise SuiteError(f"{path}: invalid TOML: {e}") from None
    where = str(path)
    _unknown(raw, TOP_KEYS, where, "top-level key")
    if raw.get("name", path.stem) != path.stem:
        raise SuiteError(f"{where}: name {raw.get('name')!r} must equal the file name {path.stem!r}")
    if raw.get("scale", "reduced") not in SCALES:
        raise SuiteError(f"{where}: scale must be one of {SCALES} (\"paper\": the paper's own setting, so its "
                         f"references are comparable), got {raw.get('scale')!r}")
    loaded = load_plugins(raw.get("plugins", []), path, where)
    defaults = raw.get("defaults", {})
    _check_fields(defaults, f"{where} [defaults]")
    if DIVERGENCE in raw:  # the suite's divergence rule, for every cell
        if DIVERGENCE in defaults:
            raise SuiteError(f"{where}: {DIVERGENCE} is set both at the top level and in [defaults]: keep one")
        defaults = {**defaults, DIVERGENCE: raw[DIVERGENCE]}
    matrices = _matrices(raw, where)
    overrides = raw.get("override", [])
    _check_overrides(overrides, where)
    refs = _references(raw, where)
    cells = _cells(where, defaults, matrices, overrides, refs)
    if not cells:
        raise SuiteError(f"{where}: the suite has no cells ([matrix] is empty)")
    return Suite(path.stem, path, raw.get("description", ""), cells, refs, raw.get("metric", "test_accuracy"),
                 raw.get("paper"), raw.get("requires", "cpu"), raw.get("notes", {}), raw.get("scale", "reduced"),
                 loaded)


def load_plugins(specs, path: Path, where: str) -> list[dict]:
    """A suite's ``plugins = ["my_alg.py", "mypkg.algs"]``: files relative to the suite file, or module names
    (``algorithms.core.plugins``); their provenance."""
    if isinstance(specs, str) or not isinstance(specs, list) or not all(isinstance(x, str) for x in specs):
        raise SuiteError(f"{where}: plugins must be a list of file paths (relative to the suite file) or module "
                         f"names, e.g. plugins = [\"my_alg.py\"], got {specs!r}")
    out = []
    for spec in specs:
        try:
            out.append(plugin_loader.load(spec, base=path.parent).provenance())
        except plugin_loader.PluginError as e:
            raise SuiteError(f"{where}: plugins: {e}") from None
    return out


def parse_only(only: list[str]) -> dict:
    """``--only KEY=VALUE`` items as a match (values as in a suite file; ``algorithm_args.mu=0.1`` for a dict
    field's key)."""
    match: dict = {}
    for item in only:
        if "=" not in item:
            raise SuiteError(f"--only expects KEY=VALUE (e.g. dataset=fmnist), got {item!r}")
        k, v = (x.strip() for x in item.split("=", 1))
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            pass
        if "." in k:
            k, sub = k.split(".", 1)
            match.setdefault(k, {})[sub] = v
        else:
            match[k] = v
    _check_fields(match, "--only")
    return match


def select_cells(suite: Suite, only: list[str] | None) -> Suite:
    """The suite restricted to the cells matching every ``KEY=VALUE`` of ``only`` (``--only``)."""
    if not only:
        return suite
    match = parse_only(only)
    cells = [c for c in suite.cells if config_matches(match, c.experiment.config())]
    if not cells:
        raise _no_match_error(f"--only {' '.join(only)} ({suite.name}, {len(suite.cells)} cells)", match,
                              [c.experiment.config() for c in suite.cells])
    return dataclasses.replace(suite, cells=cells)


# --------------------------------------------------------------------------------------------------
# A results folder holds one suite


FOLDER_MARK = ".suite"  # which suite a results folder holds, as JSON (hidden and not *.json: not a run record)


def folder_suite(folder: str | Path) -> dict | None:
    """The suite a results folder holds, from its mark (``{"suite", "file", "version"}``), or None (no mark:
    a folder of single runs, or one written before marks existed)."""
    try:
        mark = json.loads((Path(folder) / FOLDER_MARK).read_text())
    except (OSError, ValueError):
        return None
    return mark if isinstance(mark, dict) and isinstance(mark.get("suite"), str) else None


def bind_folder(folder: str | Path, s: Suite, write: bool = True) -> None:
    """Check that ``folder`` may hold ``s``'s records, and mark it as ``s``'s (``write``). A folder holds one suite:
    another suite's records there would be mixed into one leaderboard, CSV and plots, and its report overwritten,
    so a folder marked for another suite is refused before any work."""
    from benchmark.runs import store
    from benchmark.runs.record import code_version

    folder = Path(folder)
    mark = folder_suite(folder)
    if mark is not None and mark["suite"] != s.name:
        raise SuiteError(f"{folder} holds the records of suite {mark['suite']!r} ({mark.get('file') or 'a suite file'}), "
                         f"not {s.name!r}: one folder holds one suite. Give suite {s.name} another --out folder (or "
                         f"run --suite {mark.get('file') or mark['suite']} there to resume it)")
    if not write or (mark is not None and mark.get("file") == str(s.path.resolve())):
        return
    try:  # an aid to readers, not a record: a folder that cannot take it is reported by the runner's own check
        store.write_json_atomic(folder / FOLDER_MARK, {"suite": s.name, "file": str(s.path.resolve()),
                                                       "shipped": s.path.resolve().parent == SUITES_DIR.resolve(),
                                                       "version": code_version()["package"]})
    except OSError:
        pass


def load_folder_suite(folder: str | Path) -> Suite | None:
    """The suite a marked folder holds, loaded from the file its mark names (None: no mark, or the file is gone;
    a shipped suite is found by name when its path moved, e.g. another checkout)."""
    mark = folder_suite(folder)
    if mark is None:
        return None
    for spec in (mark.get("file"), mark["suite"] if mark.get("shipped") else None):
        if spec and (Path(spec).is_file() or spec in suite_names()):
            return load_suite(spec)
    return None
