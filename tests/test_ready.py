"""Ready for a GPU machine: fedrepro runs from a source tree with PYTHONPATH=. and no pip install, needing
only torch, torchvision, numpy, scipy, scikit-learn, tabulate, tqdm and matplotlib (issue 14, part 5)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: what the device machine may lack: each import of these must be optional
ABSENT = ("ray", "asv", "asv_runner", "hypothesis", "pytest", "xdist", "tomli", "fedrepro")


def _run_without_extras(code: str, tmp_path) -> subprocess.CompletedProcess:
    """Run ``code`` from ``tmp_path`` with PYTHONPATH = the source tree, the packages above made unimportable
    and the installed distribution's metadata hidden."""
    prelude = textwrap.dedent(f"""
        import sys, importlib.metadata as md
        for name in {ABSENT!r}:
            sys.modules[name] = None
        _real = md.version
        def _version(name):
            if name == "fedrepro":
                raise md.PackageNotFoundError(name)
            return _real(name)
        md.version = _version
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def test_cli_runs_from_the_source_tree_without_extras(tmp_path):
    code = """
        from benchmark.cli import main
        from benchmark.runs.record import code_version
        assert code_version()["package"] not in ("0+unknown", None), code_version()
        for argv in (["list", "suites"], ["run", "--suite", "smoke", "--dry-run", "--device", "cpu"],
                     ["bench", "--help"], ["validate", "--help"], ["run", "--help"]):
            try:
                rc = main(argv)
            except SystemExit as e:  # --help
                rc = e.code
            assert rc == 0, argv
        print("VERSION", code_version()["package"])
    """
    out = _run_without_extras(code, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert f"VERSION {version}" in out.stdout  # the results folder is results/<suite>/<version>


def test_a_run_writes_its_record_without_extras(tmp_path):
    code = """
        from benchmark.cli import main
        rc = main(["run", "--dataset", "digits", "--num-clients", "4", "--rounds", "1", "--out", "runs",
                   "--no-progress"])
        assert rc == 0
    """
    out = _run_without_extras(code, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert len(list((tmp_path / "runs").glob("*.json"))) == 1


def test_package_version_prefers_the_source_tree(monkeypatch):
    import importlib.metadata as md

    from benchmark.runs import record

    monkeypatch.setattr(md, "version", lambda name: "9.9.9")
    assert record.package_version() != "9.9.9"  # pyproject.toml beside the package wins


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib")
def test_nothing_imports_the_extras_at_module_level():
    """The library modules import only the device machine's packages at their top."""
    import ast

    allowed_roots = {"torch", "torchvision", "numpy", "scipy", "sklearn", "tabulate", "tqdm", "matplotlib",
                     "algorithms", "benchmark", "theory", "tomllib"}
    stdlib = set(sys.stdlib_module_names)
    bad = []
    for pkg in ("algorithms", "benchmark", "theory"):
        for path in (ROOT / pkg).rglob("*.py"):
            if "asv" in path.parts:
                continue  # the asv benchmarks run under asv
            if path.name in ("pytest_plugin.py", "plugin_tests.py"):
                continue  # the pytest plugin (`pytest --fedrepro-plugin`): loaded by pytest only, never by the library
            tree = ast.parse(path.read_text())
            for node in tree.body:  # module level only; lazy imports inside functions are fine
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for n in names:
                    root = n.split(".")[0]
                    if root not in allowed_roots and root not in stdlib and root != "__future__":
                        bad.append(f"{path.relative_to(ROOT)}: {n}")
    assert not bad, bad
