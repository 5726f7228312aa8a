"""Imports run one way (README, Layout): algorithms <- benchmark (library) <- theory <- benchmark.cli.

Every import of every module, at module level or inside a function, is an edge; the rules are checked on
the whole graph, and the checker itself is shown to catch a planted cycle and a planted upward import.

benchmark/ in rooms (issue 46): its sub-packages import one way, along ``ALLOWED_ARROWS`` (data -> the loop ->
one run -> campaigns, measurement, the contract -> reports -> the command), with no cycle between rooms and at
most ``MAX_TOP_LEVEL_MODULES`` modules beside them; the spec of a run imports neither the round loop nor the
executors; each checker is shown to catch a planted violation.

algorithms/ as DESIGN.md draws it: every top-level module registers at least one algorithm (it is found by
its folder), the infrastructure lives in the sub-packages core/ and compress/, and they register none; the
checker is shown to catch a planted helper module, a planted sub-package and an algorithm inside core/.

Sizes (issue 23): no function (or method) over 80 lines and no module over 600 lines in algorithms/, benchmark/
and theory/; the checker is shown to catch a planted long function and a planted long module.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("algorithms", "benchmark", "theory")
#: the top layer: the command and the asv benchmark suite compose everything below them
TOP = ("benchmark.cli", "benchmark.asv")


def modules(root: Path) -> dict[str, tuple[Path, bool]]:
    out = {}
    for top in PACKAGES:
        for p in (root / top).rglob("*.py"):
            parts = list(p.relative_to(root).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _walk(tree: ast.AST, module_level: bool):
    """The nodes of ``tree``; with ``module_level``, not those inside functions (run only when called)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if module_level and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        todo += list(ast.iter_child_nodes(node))


def import_graph(root: Path, module_level: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports (``from pkg import mod`` counts as ``pkg.mod``), at any depth of
    its code (``module_level``: only the imports that run when it is imported)."""
    mods = modules(root)
    graph = {}
    for name, (path, is_pkg) in mods.items():
        pkg = name.split(".") if is_pkg else name.split(".")[:-1]
        deps = set()
        for node in _walk(ast.parse(path.read_text()), module_level):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = pkg[:len(pkg) - node.level + 1] if node.level else []
                mod = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods]
                deps.update(subs or [mod])
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def layer(name: str) -> int:
    if name.startswith(TOP):
        return 3
    return {"algorithms": 0, "benchmark": 1, "theory": 2}[name.split(".")[0]]


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Imports from a lower layer into a higher one."""
    return sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps if layer(d) > layer(m))


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, ignoring edges to a module's own package
    (``__init__`` re-exports)."""
    g = {m: {d for d in deps if not m.startswith(d + ".")} for m, deps in graph.items()}
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_no_upward_imports():
    assert upward(import_graph(ROOT)) == []


def test_no_import_cycles():
    assert cycles(import_graph(ROOT)) == []


def test_library_modules_take_no_argparse_namespace():
    """Handlers live in benchmark.cli; a library module that parses flags or reads ``a.<flag>`` is a finding."""
    found = []
    for name, (path, _) in modules(ROOT).items():
        if name.startswith(TOP) or name == "benchmark.perf.asv_history":  # asv_history is a script (python -m)
            continue
        if "argparse" in path.read_text() or "add_parser(" in path.read_text():
            found.append(name)
    assert found == []


#: the sub-packages of algorithms/: the infrastructure (the contract, registry, ...) and all compression
INFRASTRUCTURE = ("core", "compress")


def _registers(tree: ast.AST) -> bool:
    """Whether a module registers an algorithm: ``@register`` on a class or a call ``register(...)``."""
    def is_register(f):
        return (isinstance(f, ast.Name) and f.id == "register") or (isinstance(f, ast.Attribute)
                                                                    and f.attr == "register")

    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(is_register(d) for d in node.decorator_list):
            return True
        if isinstance(node, ast.Call) and is_register(node.func):
            return True
    return False


def algorithms_layout(root: Path) -> list[str]:
    """Findings against algorithms/'s layout: a top-level module that registers no algorithm (infrastructure
    outside core/ or compress/), a sub-package other than those, and a module inside them that registers one."""
    alg, found = root / "algorithms", []
    for p in sorted(alg.glob("*.py")):
        if p.name != "__init__.py" and not _registers(ast.parse(p.read_text())):
            found.append(f"algorithms/{p.name} registers no algorithm: infrastructure belongs in "
                         f"algorithms/{' or algorithms/'.join(INFRASTRUCTURE)}")
    for d in sorted(q for q in alg.iterdir() if q.is_dir() and (q / "__init__.py").exists()):
        if d.name not in INFRASTRUCTURE:
            found.append(f"algorithms/{d.name}/ is a sub-package; an algorithm is one module in algorithms/, "
                         f"infrastructure lives in {', '.join(INFRASTRUCTURE)}")
            continue
        found += [f"algorithms/{d.name}/{p.name} registers an algorithm inside the infrastructure"
                  for p in sorted(d.rglob("*.py")) if _registers(ast.parse(p.read_text()))]
    return found


def test_every_algorithms_module_is_an_algorithm_and_infrastructure_is_in_core_or_compress():
    assert algorithms_layout(ROOT) == []


def test_layout_checker_catches_planted_violations(tmp_path):
    root = _tree(tmp_path, {
        "algorithms/core/__init__.py": "", "algorithms/core/registry.py": "def register(cls):\n    return cls\n",
        "algorithms/compress/__init__.py": "",
        "algorithms/fedx.py": "from .core.registry import register\n\n@register\nclass FedX:\n    name = 'fedx'\n",
        "algorithms/fedxm.py": "from .core import registry\nFedXM = registry.register(object())\n",
        "algorithms/utils.py": "def helper():\n    return 1\n",  # infrastructure at the top
        "algorithms/extra/__init__.py": "",  # a third sub-package
        "algorithms/core/fedy.py": "from .registry import register\n\n@register\nclass FedY:\n    pass\n",
    })
    found = algorithms_layout(root)
    assert len(found) == 3, found
    assert found[0].startswith("algorithms/utils.py registers no algorithm: infrastructure belongs in")
    assert "algorithms/core/fedy.py registers an algorithm inside the infrastructure" in found
    assert any(f.startswith("algorithms/extra/ is a sub-package") for f in found)


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    for top in PACKAGES:
        (tmp_path / top).mkdir(exist_ok=True)
        (tmp_path / top / "__init__.py").touch()
    return tmp_path


def test_checker_catches_a_planted_cycle_and_upward_import(tmp_path):
    root = _tree(tmp_path, {
        "benchmark/report.py": "def f():\n    from .runner import run\n",
        "benchmark/runner.py": "from . import report\n",
        "benchmark/theory_cli.py": "from theory.claims import all_claims\n",
        "theory/claims.py": "from benchmark import runner\n",
        "benchmark/cli/__init__.py": "from theory import claims\n",
    })
    g = import_graph(root)
    assert cycles(g) == [["benchmark.report", "benchmark.runner"]]
    assert upward(g) == ["benchmark.theory_cli -> theory.claims"]


# --------------------------------------------------------------------------------------------------
# benchmark/'s rooms (issue 46): sub-packages by role, and the arrows allowed between them

#: room -> the rooms it may import: data -> the loop -> one run -> campaigns / measurement / the contract ->
#: reports; above them the package's own top-level modules (``benchmark/__init__``: the public names), then the
#: command and the asv benchmarks, which compose everything (``TOP``)
_DATA = {"datasets", "models"}
ALLOWED_ARROWS = {
    "datasets": set(),
    "models": set(),
    "sim": _DATA,
    "runs": _DATA | {"sim"},
    "campaign": _DATA | {"sim", "runs"},
    "perf": _DATA | {"sim", "runs"},
    "contract": _DATA | {"sim", "runs"},
    "reports": _DATA | {"sim", "runs", "campaign"},
    "(top-level)": _DATA | {"sim", "runs", "campaign", "perf", "contract", "reports"},
}
#: modules of benchmark/ itself beside its sub-packages (``__init__`` not counted)
MAX_TOP_LEVEL_MODULES = 8


def room(name: str, root: Path = ROOT) -> str | None:
    """The room of a benchmark module: its sub-package, "(top-level)" for benchmark/__init__ and benchmark/*.py,
    "cli"/"asv" for the top; None outside benchmark/."""
    parts = name.split(".")
    if parts[0] != "benchmark":
        return None
    if len(parts) > 1 and (root / "benchmark" / parts[1]).is_dir():
        return parts[1]
    return "(top-level)"


def room_arrows(root: Path) -> dict[tuple[str, str], list[str]]:
    """(room, room it imports) -> the module imports that make the arrow (any depth of the code)."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for m, deps in import_graph(root).items():
        for d in deps:
            a, b = room(m, root), room(d, root)
            if a and b and a != b:
                arrows.setdefault((a, b), []).append(f"{m} -> {d}")
    return arrows


def room_findings(root: Path) -> list[str]:
    """Arrows between rooms that ``ALLOWED_ARROWS`` does not list (the command and asv may import anything), the
    cycles between rooms, and top-level modules beyond ``MAX_TOP_LEVEL_MODULES``."""
    arrows = room_arrows(root)
    found = [f"{a} -> {b} is not an allowed arrow ({'; '.join(sorted(why)[:3])})"
             for (a, b), why in sorted(arrows.items()) if a not in TOP_ROOMS and b not in ALLOWED_ARROWS.get(a, ())]
    graph: dict[str, set[str]] = {}
    for a, b in arrows:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    found += [f"a cycle between rooms: {' <-> '.join(c)}" for c in cycles(graph)]
    top = sorted(p.name for p in (root / "benchmark").glob("*.py") if p.name != "__init__.py")
    if len(top) > MAX_TOP_LEVEL_MODULES:
        found.append(f"benchmark/ has {len(top)} top-level modules (at most {MAX_TOP_LEVEL_MODULES}): {', '.join(top)}")
    return found


TOP_ROOMS = ("cli", "asv")


def test_benchmark_rooms_import_one_way():
    assert room_findings(ROOT) == []


def test_every_room_of_benchmark_is_declared():
    rooms = {p.name for p in (ROOT / "benchmark").iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(ALLOWED_ARROWS) - {"(top-level)"} | set(TOP_ROOMS)


def test_room_checker_catches_an_upward_arrow_a_cycle_and_too_many_modules(tmp_path):
    files = {f"benchmark/{r}/__init__.py": "" for r in ("sim", "runs", "campaign", "perf", "reports")}
    files.update({
        "benchmark/sim/engine.py": "def f():\n    from benchmark.runs import plan\n",  # the loop imports a run
        "benchmark/runs/plan.py": "from benchmark.sim import engine\n",
        "benchmark/campaign/runner.py": "from benchmark.perf import bench\n",
        "benchmark/perf/bench.py": "from ..campaign import runner\n",  # campaign <-> perf
        "benchmark/reports/leaderboard.py": "from benchmark.campaign import runner\n",  # allowed
    })
    files.update({f"benchmark/m{i}.py": "" for i in range(MAX_TOP_LEVEL_MODULES + 1)})
    found = room_findings(_tree(tmp_path, files))
    assert found == [
        "campaign -> perf is not an allowed arrow (benchmark.campaign.runner -> benchmark.perf.bench)",
        "perf -> campaign is not an allowed arrow (benchmark.perf.bench -> benchmark.campaign.runner)",
        "sim -> runs is not an allowed arrow (benchmark.sim.engine -> benchmark.runs.plan)",
        "a cycle between rooms: campaign <-> perf",
        "a cycle between rooms: runs <-> sim",
        f"benchmark/ has 9 top-level modules (at most 8): {', '.join(f'm{i}.py' for i in range(9))}"]


# --------------------------------------------------------------------------------------------------
# The spec imports no engine (issue 46): what a run is, apart from how it is built and run

SPEC = "benchmark.runs.experiment"
NOT_FROM_SPEC = ("benchmark.sim.engine", "benchmark.sim.executors")


def reachable(root: Path, start: str) -> set[str]:
    """Every module that importing ``start`` may import: its imports at any depth of its code, theirs, and the
    packages whose ``__init__`` runs first (with the imports that run then: ``benchmark/__init__``'s are lazy)."""
    graph, init = import_graph(root), import_graph(root, module_level=True)
    seen, todo = set(), [(start, graph)]
    while todo:
        m, g = todo.pop()
        if (m, id(g)) in seen or m not in g:
            continue
        seen.add((m, id(g)))
        todo += [(d, graph) for d in g[m]]
        todo += [(".".join(m.split(".")[:i]), init) for i in range(1, m.count(".") + 1)]
    return {m for m, _ in seen} - {start}


def test_the_spec_imports_neither_the_engine_nor_the_executors():
    assert reachable(ROOT, SPEC) & set(NOT_FROM_SPEC) == set()


def test_the_spec_check_catches_a_planted_import_of_the_engine(tmp_path):
    root = _tree(tmp_path, {
        "benchmark/runs/__init__.py": "", "benchmark/runs/experiment.py": "from benchmark.runs import build\n",
        "benchmark/runs/build.py": "def prepare():\n    from benchmark.sim import executors\n",
        "benchmark/sim/__init__.py": "", "benchmark/sim/executors.py": "", "benchmark/sim/engine.py": "",
    })
    assert reachable(root, SPEC) & set(NOT_FROM_SPEC) == {"benchmark.sim.executors"}


def test_benchmark_run_stays_the_function_whatever_was_imported_before():
    """``from benchmark import run, Experiment, FederatedDataset`` (README) after importing every module of
    benchmark/ (a sub-package named ``run`` would replace the function by the module), in a fresh process, in
    both orders."""
    code = ("import importlib, pkgutil, sys, types\n"
            "import benchmark\n"
            "first = sys.argv[1] == 'names'\n"
            "if first:\n    from benchmark import run, Experiment, FederatedDataset, RunResult\n"
            "for m in pkgutil.walk_packages(benchmark.__path__, 'benchmark.'):\n"
            "    if '.asv' not in m.name and not m.name.endswith('__main__'):\n        importlib.import_module(m.name)\n"
            "from benchmark import run, Experiment, FederatedDataset, RunResult\n"
            "assert isinstance(run, types.FunctionType) and run.__module__ == 'benchmark.runs.plan', run\n"
            "assert (Experiment.__name__, FederatedDataset.__name__, RunResult.__name__) == "
            "('Experiment', 'FederatedDataset', 'RunResult')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    for order in ("names", "modules"):
        out = subprocess.run([sys.executable, "-c", code, order], capture_output=True, text=True, env=env, cwd=ROOT)
        assert out.returncode == 0, out.stderr[-2000:]


# --------------------------------------------------------------------------------------------------
# One place decides how runs run (benchmark.runs.plan), one place runs rounds (benchmark.sim.engine)

PLANNER = "benchmark.runs.plan"
ENGINE = "benchmark.sim.engine"
EXECUTORS = "benchmark.sim.executors"
#: the server side of a round: only the engine calls an algorithm's broadcast and aggregate
ROUND_CALLS = ("broadcast", "aggregate")
#: building an executor's round inputs is running a round
ROUND_TYPES = ("RoundInputs", "RunRound")
#: benchmark.runs.batched's probe broadcasts once to get a downlink for a vmap test: no round; the asv
#: benchmarks time a round by hand only for old commits without the workloads module (_legacy_rounds)
ROUND_EXEMPT = {("benchmark.runs.batched", "broadcast"), ("benchmark.asv.benchmarks", "broadcast"),
                ("benchmark.asv.benchmarks", "aggregate")}


def _defaults(fn: ast.AST):
    a = fn.args
    pos = a.posonlyargs + a.args
    yield from zip(pos, [None] * (len(pos) - len(a.defaults)) + list(a.defaults))
    yield from zip(a.kwonlyargs, a.kw_defaults)


def how_findings(root: Path) -> list[str]:
    """Modules other than the planner that resolve a device ("auto" -> cuda/cpu: ``cuda.is_available``, or
    a ``device`` parameter whose default is not None) or a group size (``default_group_runs``/``group_size``
    called, or a ``group_runs`` parameter whose default is not None): the planner's defaults are the only ones."""
    found = []
    for name, (path, _) in modules(root).items():
        if name == PLANNER or name.startswith("algorithms"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "is_available" and "cuda" in ast.unparse(node.value):
                found.append(f"{name}: resolves a device ({ast.unparse(node)})")
            elif isinstance(node, ast.Call) and ast.unparse(node.func).split(".")[-1] in ("default_group_runs",
                                                                                       "group_size"):
                found.append(f"{name}: resolves a group size ({ast.unparse(node.func)})")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg, default in _defaults(node):
                    if arg.arg in ("device", "group_runs") and default is not None and not (
                            isinstance(default, ast.Constant) and default.value is None):
                        found.append(f"{name}: {node.name}({arg.arg}={ast.unparse(default)}) sets a default")
    return sorted(found)


def round_findings(root: Path) -> list[str]:
    """Modules other than the engine that run a round: call an algorithm's ``broadcast``/``aggregate``
    (the engine's own functions of those names aside) or build an executor's round inputs."""
    found = []
    for name, (path, _) in modules(root).items():
        if name == ENGINE or name.startswith("algorithms"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in ROUND_CALLS and ast.unparse(f.value) != "engine" \
                    and (name, f.attr) not in ROUND_EXEMPT:
                found.append(f"{name}: {ast.unparse(f)}()")
            elif ast.unparse(f).split(".")[-1] in ROUND_TYPES and name != EXECUTORS:
                found.append(f"{name}: {ast.unparse(f)}()")
    return sorted(found)


def test_only_the_planner_resolves_devices_and_group_sizes():
    assert how_findings(ROOT) == []


def test_only_the_engine_runs_rounds():
    assert round_findings(ROOT) == []


def test_the_how_and_round_checks_catch_planted_violations(tmp_path):
    root = _tree(tmp_path, {
        "benchmark/runs/plan.py": "import torch\ndef resolve(d=None):\n    return torch.cuda.is_available()\n"
                                  "def plan(exps, group_runs=None):\n    return default_group_runs('cpu')\n",
        "benchmark/sim/engine.py": "def round(alg, s, u, w):\n    return alg.aggregate(s, u, w)\n",
        "benchmark/perf/bench.py": "import torch\nfrom benchmark.sim import engine\n"
                                   "def dev():\n    return 'cuda' if torch.cuda.is_available() else 'cpu'\n"
                                   "def run(exps, group_runs=1, device='auto'):\n    return engine.aggregate(exps)\n",
        "benchmark/runs/batched.py": "def size(exp):\n    return default_group_runs('cpu', 'vectorized')\n",
        "theory/runs.py": "def rnd(alg, server, ups, w):\n    d = alg.broadcast(server)\n"
                          "    return alg.aggregate(server, ups, w), RoundInputs(alg, d)\n",
    })
    assert how_findings(root) == [
        "benchmark.perf.bench: resolves a device (torch.cuda.is_available)",
        "benchmark.perf.bench: run(device='auto') sets a default",
        "benchmark.perf.bench: run(group_runs=1) sets a default",
        "benchmark.runs.batched: resolves a group size (default_group_runs)"]
    assert round_findings(root) == ["theory.runs: RoundInputs()", "theory.runs: alg.aggregate()",
                                    "theory.runs: alg.broadcast()"]


# --------------------------------------------------------------------------------------------------
# Sizes: no function over 80 lines, no module over 600 (tests excluded)

MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 600


def size_findings_in(name: str, source: str) -> list[str]:
    """A module's functions (methods and nested functions too) over ``MAX_FUNCTION_LINES`` lines, from ``def``
    to the last line of the body (decorators not counted), and the module itself if over ``MAX_MODULE_LINES``."""
    found = []
    n = len(source.splitlines())
    if n > MAX_MODULE_LINES:
        found.append(f"{name}: {n} lines (at most {MAX_MODULE_LINES}: split it along a seam, e.g. into a package)")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{name}:{node.lineno} {node.name}() is {length} lines (at most {MAX_FUNCTION_LINES})")
    return found


def size_findings(root: Path) -> list[str]:
    return sorted(f for name, (path, _) in modules(root).items() for f in size_findings_in(name, path.read_text()))


def test_no_function_over_80_lines_and_no_module_over_600():
    assert size_findings(ROOT) == []


def _function(name: str, body_lines: int, indent: str = "") -> str:
    body = "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines - 1))
    return f"{indent}def {name}():\n{body}{indent}    return 0\n"


def test_size_checker_catches_a_planted_long_function_and_module(tmp_path):
    ok = "@decorator\n" + _function("fits", MAX_FUNCTION_LINES - 1)  # 80 lines with its def; decorator not counted
    assert size_findings_in("m", ok) == []
    long_fn = _function("too_long", MAX_FUNCTION_LINES)  # 81 lines
    assert size_findings_in("m", long_fn) == [f"m:1 too_long() is 81 lines (at most {MAX_FUNCTION_LINES})"]
    method = "class A:\n" + _function("step", MAX_FUNCTION_LINES + 5, indent="    ")  # a method counts too
    assert size_findings_in("m", method) == [f"m:2 step() is 86 lines (at most {MAX_FUNCTION_LINES})"]
    many = "".join(_function(f"f{i}", 9) + "\n\n" for i in range(55))  # short functions, 660 lines in all
    assert size_findings_in("m", many) == ["m: 660 lines (at most 600: split it along a seam, e.g. into a package)"]
    root = _tree(tmp_path, {"benchmark/big.py": many, "theory/long.py": long_fn, "algorithms/ok.py": ok})
    assert size_findings(root) == ["benchmark.big: 660 lines (at most 600: split it along a seam, e.g. into a package)",
                                   f"theory.long:1 too_long() is 81 lines (at most {MAX_FUNCTION_LINES})"]
