"""Plugins (``algorithms.core.plugins``): algorithms from a file or module named on the command line or in a
suite, and from installed entry points; their provenance in the records; the errors; the listing; and the
contract tests a plugin gets for free (``pytest --fedrepro-plugin``), shown to fail a planted broken plugin."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import algorithms
from algorithms import compress
from algorithms.compress import registry as compress_registry
from algorithms.core import plugins, registry
from benchmark import Experiment
from benchmark.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my_fedavg_variant.py"
BROKEN = ROOT / "tests" / "data" / "broken_plugin.py"


@pytest.fixture(autouse=True)
def isolated_plugins(monkeypatch):
    """Every test starts and ends with the built-ins only: the registries, the loaded plugins and
    $FEDREPRO_PLUGINS are restored (other tests in this process iterate over ``algorithms.names()``)."""
    algorithms.names(), compress.names()
    saved = (dict(registry._REGISTRY), dict(compress_registry._OPERATORS), dict(plugins._PLUGINS),
             set(plugins._ENTRY_POINTS_DONE), list(plugins._ENV_SEEN))
    monkeypatch.setenv(plugins.ENV, "")  # recorded, so that the variable the plugins set is removed afterwards
    monkeypatch.delenv(plugins.ENV)
    yield
    for live, old in zip((registry._REGISTRY, compress_registry._OPERATORS, plugins._PLUGINS), saved):
        live.clear()
        live.update(old)
    plugins._ENTRY_POINTS_DONE.clear()
    plugins._ENTRY_POINTS_DONE.update(saved[3])
    plugins._ENV_SEEN[:] = saved[4]


def _plugin_copy(tmp_path, name="my_alg.py") -> Path:
    p = tmp_path / name
    shutil.copy(EXAMPLE, p)
    return p


def _records(folder: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_plugin_file_from_the_cli_runs_and_its_records_carry_its_hash(tmp_path, capsys):
    plugin, out = _plugin_copy(tmp_path), tmp_path / "out"
    fedavg_hash = Experiment(rounds=2).config_hash()
    argv = ["run", "--plugin", str(plugin), "--algorithm", "fedavg_clip", "--arg", "clip=0.5", "--rounds", "2",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    (rec,) = _records(out)
    assert rec["status"] == "ok" and rec["config"]["algorithm"] == "fedavg_clip"
    assert rec["config"]["algorithm_source"] == f"sha256:{_sha(plugin)}"
    (prov,) = rec["code_version"]["plugins"]
    assert prov == {"file": str(plugin.resolve()), "sha256": _sha(plugin), "algorithms": ["fedavg_clip"]}
    # a built-in's config hash does not change with a plugin loaded
    assert Experiment(rounds=2).config_hash() == fedavg_hash
    assert "algorithm_source" not in Experiment(rounds=2).config()
    # an edit of the plugin is another source hash, so another cell
    plugin.write_text(plugin.read_text().replace("1e-12", "1e-10"))
    assert main(argv) == 0
    recs = _records(out)
    assert len(recs) == 2 and len({r["config"]["algorithm_source"] for r in recs}) == 2
    assert {r["code_version"]["plugins"][0]["sha256"] for r in recs} == {_sha(plugin), prov["sha256"]}


def _suite(tmp_path, plugin_line='plugins = ["algs/my_alg.py"]') -> Path:
    (tmp_path / "algs").mkdir(exist_ok=True)
    _plugin_copy(tmp_path / "algs")
    path = tmp_path / "mine.toml"
    path.write_text(f"""name = "mine"
{plugin_line}
[defaults]
dataset = "digits"
model = "logreg"
num_clients = 4
rounds = 2
local_steps = 2
eval_every = 2
[matrix]
algorithm = ["fedavg", "fedavg_clip"]
""")
    return path


def test_plugin_from_a_suite_file_runs_resumes_and_reruns_after_an_edit(tmp_path, capsys):
    suite_file, results = _suite(tmp_path), tmp_path / "results"
    plugin = tmp_path / "algs" / "my_alg.py"
    argv = ["run", "--suite", str(suite_file), "--results", str(results), "--no-progress"]
    assert main(argv) == 0
    assert "fedavg_clip" in capsys.readouterr().out  # on the leaderboard beside FedAvg
    folder = next((results / "mine").iterdir())
    by_alg = {r["config"]["algorithm"]: r for r in _records(folder)}
    assert by_alg["fedavg_clip"]["config"]["algorithm_source"] == f"sha256:{_sha(plugin)}"
    assert "algorithm_source" not in by_alg["fedavg"]["config"]
    assert main(argv) == 0
    assert "skipped 2, ok 0" in capsys.readouterr().err  # resumed: nothing to run
    plugin.write_text(plugin.read_text() + "\n# edited\n")
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "skipped 1, ok 1" in err  # the plugin's cell runs again, FedAvg's is kept


def test_suite_plugin_errors_name_the_suite_and_the_file(tmp_path, capsys):
    assert main(["run", "--suite", str(_suite(tmp_path, 'plugins = ["algs/my_alq.py"]')), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "mine.toml: plugins: plugin file 'algs/my_alq.py' not found" in err and "Did you mean my_alg.py" in err
    assert main(["run", "--suite", str(_suite(tmp_path, 'plugins = "algs/my_alg.py"')), "--dry-run"]) == 2
    assert "plugins must be a list" in capsys.readouterr().err


def test_a_name_already_registered_is_an_error_naming_both(tmp_path):
    bad = tmp_path / "dup.py"
    bad.write_text(EXAMPLE.read_text().replace('name = "fedavg_clip"', 'name = "fedavg"'))
    with pytest.raises(plugins.PluginError, match=r"dup\.py failed to import \(line \d+\): ValueError: algorithm "
                       r"'fedavg' is registered twice: by the built-in algorithms\.fedavg and by plugin file"):
        plugins.load(str(bad))
    assert algorithms.get_class("fedavg").__module__ == "algorithms.fedavg"
    # two plugins, one name
    plugins.load(str(EXAMPLE))
    with pytest.raises(plugins.PluginError, match="'fedavg_clip' is registered twice: by plugin file .*my_fedavg_"):
        plugins.load(str(_plugin_copy(tmp_path, "other.py")))


def test_a_plugin_that_fails_to_import_says_which_file_line_and_why(tmp_path, capsys):
    bad = tmp_path / "bad_alg.py"
    bad.write_text(EXAMPLE.read_text().replace("import torch\n", "import torch\nimport no_such_module_xyz\n"))
    assert main(["list", "algorithms", "--plugin", str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"plugin file {bad} failed to import (line 18): ModuleNotFoundError: No module named " \
           "'no_such_module_xyz'" in err, err
    assert "Traceback" not in err
    assert "fedavg_clip" not in algorithms.names()  # nothing half-registered is left behind
    assert main(["run", "--plugin", "no_such_pkg.algs", "--algorithm", "x"]) == 2
    assert "no plugin module 'no_such_pkg.algs'" in capsys.readouterr().err


def test_list_shows_plugins_apart_with_their_origin(tmp_path, capsys):
    plugin = _plugin_copy(tmp_path)
    assert main(["list", "algorithms", "--plugin", str(plugin)]) == 0
    out = capsys.readouterr().out
    builtins, _, extra = out.partition("Plugins (not part of fedrepro)")
    assert "fedavg_clip" not in builtins and "| fedavg " in builtins
    assert "fedavg_clip" in extra and str(plugin.resolve()) in extra and _sha(plugin)[:16] in extra


def test_entry_points_of_an_installed_distribution_are_loaded(tmp_path, monkeypatch):
    """A distribution installed on sys.path (a dist-info with entry_points.txt), as pip leaves it."""
    site = tmp_path / "site"
    (site / "clipalgs").mkdir(parents=True)
    shutil.copy(EXAMPLE, site / "clipalgs" / "fedavg_clip.py")
    (site / "clipalgs" / "__init__.py").write_text("")
    (site / "clipalgs" / "halfsign.py").write_text(
        "from algorithms.compress.signs import ScaledSign\n\n\n"
        "class HalfSign(ScaledSign):\n    name = 'half_sign'\n")
    info = site / "clipalgs-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: clipalgs\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[fedrepro.algorithms]\nclip = clipalgs.fedavg_clip\n\n"
                                           "[fedrepro.transforms]\nhalf = clipalgs.halfsign:HalfSign\n")
    monkeypatch.syspath_prepend(str(site))
    plugins._ENTRY_POINTS_DONE.clear()
    assert "fedavg_clip" in algorithms.names()
    prov = plugins.algorithm_provenance("fedavg_clip")
    assert prov["distribution"] == "clipalgs" and prov["version"] == "1.2"
    assert prov["entry_point"] == "fedrepro.algorithms:clip = clipalgs.fedavg_clip"
    assert prov["sha256"] == _sha(site / "clipalgs" / "fedavg_clip.py")
    assert "half_sign" in compress.names() and compress.get("half_sign").name == "half_sign"
    # a broken entry point is named, at the next lookup too
    (info / "entry_points.txt").write_text("[fedrepro.algorithms]\nbad = clipalgs.missing_module\n")
    plugins._ENTRY_POINTS_DONE.clear()
    for _ in range(2):
        with pytest.raises(plugins.PluginError, match="entry point 'fedrepro.algorithms:bad = "
                           "clipalgs.missing_module' of clipalgs 1.2 failed to load: ModuleNotFoundError"):
            algorithms.names()


def test_loaded_plugins_reach_worker_processes_through_the_environment(tmp_path):
    plugins.load(str(_plugin_copy(tmp_path)))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    assert env[plugins.ENV] == str((tmp_path / "my_alg.py").resolve())
    code = "import algorithms; print('fedavg_clip' in algorithms.names())"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_contract_tests_pass_the_example_and_fail_a_planted_broken_plugin(tmp_path):
    """``pytest --fedrepro-plugin``: each planted defect fails the check that is about it."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(plugins.ENV, None)
    cmd = [sys.executable, "-m", "pytest", "-p", "benchmark.pytest_plugin", "-p", "no:cacheprovider",
           "-p", "no:xdist", "-q", "-rA", "--fedrepro-plugin", str(EXAMPLE), "--fedrepro-plugin", str(BROKEN),
           "-k", "fedavg_clip or broken"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200).stdout
    outcome = {}
    for line in out.splitlines():
        word, _, test = line.partition(" ")
        if word in ("PASSED", "FAILED", "SKIPPED") and "::test_" in test:
            check, alg = test.split("::test_")[1].split(" ")[0].rstrip("]").split("[")
            outcome[(check, alg)] = word
    assert outcome, out
    assert all(outcome[(c, "fedavg_clip")] == "PASSED" for c in
               ("hyperparameters", "executors_agree", "deterministic", "record_round_trip", "batches", "resumes")), out
    planted = {("hyperparameters", "broken_no_constraint"), ("executors_agree", "broken_global_rng"),
               ("executors_agree", "broken_reads_values"), ("batches", "broken_reads_values"),
               ("deterministic", "broken_leaks_state"), ("record_round_trip", "broken_sends_nothing"),
               ("resumes", "broken_hides_state")}
    for key in planted:
        assert outcome.get(key) == "FAILED", (key, out[-3000:])


def test_a_local_update_that_vmap_refuses_is_an_input_error_that_says_what_to_do(tmp_path, capsys):
    """A plugin whose local_update reads a tensor's value (.item(), the planted ``broken_reads_values``) cannot run
    under vmap: ``fedrepro run`` ends with exit 2 and a sentence naming the algorithm, the contract's rule and the
    way on, not a traceback; the sequential executor it points to does run it. An error of the computation itself
    is not mistaken for one (``is_vmap_refusal``)."""
    from benchmark.sim.vmap_contract import is_vmap_refusal

    argv = ["run", "--plugin", str(BROKEN), "--algorithm", "broken_reads_values", "--rounds", "2", "--no-progress",
            "--out", str(tmp_path / "out")]
    assert main(argv + ["--executor", "vectorized"]) == 2
    err = capsys.readouterr().err
    assert "algorithm 'broken_reads_values': its local_update cannot run under torch.func.vmap" in err
    assert ".item()" in err and "--executor sequential" in err and "Traceback" not in err
    assert main(argv + ["--executor", "sequential"]) == 0
    assert not is_vmap_refusal(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x3 and 5x2)"))
    assert not is_vmap_refusal(ValueError("vmap: not a RuntimeError"))


def test_the_builtin_folders_are_listed_once_per_process(monkeypatch):
    """Every lookup calls ``load_builtins``; after the first, neither registry lists its folder again (a listing
    costs ~0.85 ms and a run looks names up several times: issue 23's batched slowdown)."""
    algorithms.names(), compress.names()

    def no_listing(*a, **k):
        raise AssertionError("the folder was listed again")
    monkeypatch.setattr(registry.pkgutil, "iter_modules", no_listing)
    monkeypatch.setattr(compress_registry.pkgutil, "iter_modules", no_listing)
    assert "fedavg" in algorithms.names() and registry.get_class("fedavg").name == "fedavg"
    assert "scaled_sign" in compress.names()


def test_a_failed_builtin_import_is_raised_again_at_the_next_lookup(monkeypatch):
    """The once-per-process flag is set only after every module imported: a failure is never skipped later."""
    monkeypatch.setattr(registry, "_builtins_loaded", False)

    def broken(name):
        raise ImportError(f"planted: {name}")
    monkeypatch.setattr(registry.importlib, "import_module", broken)
    for _ in range(2):
        with pytest.raises(ImportError, match="planted"):
            registry.load_builtins()
    assert registry._builtins_loaded is False
