"""`fedrepro bench` and the asv benchmarks run and report sane numbers (no timing assertions: speed
targets live in the benchmarks, never in tests)."""
import inspect
import itertools
import json
import math

import pytest
import torch

from benchmark.cli import main

TINY = ["--device", "cpu", "--clients", "3", "--batch-size", "8", "--local-steps", "2", "--repeats", "1",
        "--warmup", "1", "--threads", "1", "--runs", "2"]


def _positive_finite(v) -> bool:
    return isinstance(v, float) and math.isfinite(v) and v > 0


def test_quick_json_has_ratios_and_throughputs(capsys):
    rc = main(["bench", "--quick", "--json", "--preset", "digits", "--model", "logreg"] + TINY)
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("vectorized_over_sequential", "vectorized_over_limit"):
        assert _positive_finite(out[key]), key
    assert out["device"] == "cpu" and out["torch"] == torch.__version__
    assert out["headline"] == "digits/logreg"
    assert set(out["throughput"]) >= {"sequential", "vectorized", "limit"}
    assert all(_positive_finite(out["throughput"][m]) for m in ("sequential", "vectorized", "limit"))
    (cfg,) = out["configs"]
    assert cfg["sample_gradients_per_round"] == 3 * 8 * 2
    assert set(cfg["seconds"]) == {"sequential", "vectorized", "auto", "limit_module", "limit_functional"}
    assert cfg["auto_executor"] == "vectorized" and cfg["flops_per_sample"] == 2560  # logreg: 2 x 2 x 64 x 10
    assert _positive_finite(cfg["auto_over_best"])
    assert cfg["limit_kind"] in ("limit_module", "limit_functional")
    # the CPU targets of digits/logreg: executors, and batched runs
    assert [(t["model"], t["metric"]) for t in out["targets"]] == [
        ("logreg", "vectorized_over_sequential"), ("logreg", "batched_over_one_after_another")]
    (runs,) = out["runs"]
    assert runs["runs"] == 2 and runs["sample_gradients"] == 2 * 1 * 3 * 8 * 2  # 2 cells x 1 round (quick)
    assert runs["alone_executor"] == "vectorized"
    assert _positive_finite(runs["batched_over_one_after_another"])
    assert out["round_overhead_seconds"] is None or out["round_overhead_seconds"] >= 0


def test_cnn_preset_table_and_out_file(tmp_path, capsys):
    """FedBAT's CNN (BatchNorm: buffers threaded in the executors, updated in place in the limit)."""
    path = tmp_path / "perf" / "bench.json"
    threads = torch.get_num_threads()
    rc = main(["bench", "--quick", "--out", str(path), "--clients", "2", "--batch-size", "4",
               "--local-steps", "1", "--repeats", "1", "--warmup", "0", "--device", "cpu", "--threads", "1",
               "--runs", "0"])
    assert torch.get_num_threads() == threads  # restored
    assert rc == 0
    text = capsys.readouterr().out
    assert "fedbat_cnn" in text and "vec/seq" in text and "vec/limit" in text
    rec = json.loads(path.read_text())
    assert rec["headline"] == "fmnist_cnn/fedbat_cnn" and rec["configs"][0]["params"] > 100_000
    # batch 4: 4 x 6.0e7 FLOPs per client step, above the CPU rule's 1e8: the CNN runs sequentially
    assert rec["configs"][0]["auto_executor"] == "sequential"
    assert [t["metric"] for t in rec["targets"]] == ["auto_over_best"] and rec["runs"] == []
    assert _positive_finite(rec["vectorized_over_limit"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_a_clear_error(capsys):
    assert main(["bench", "--quick", "--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert "CUDA" in err and "--device cpu" in err


@pytest.mark.parametrize("argv", [["--clients", "0"], ["--model", "nope"], ["--device", "tpu"],
                                  ["--repeats", "0"]])
def test_bad_flags_exit_2(argv, capsys):
    assert main(["bench", "--quick", "--preset", "digits"] + argv) == 2
    assert "fedrepro bench:" in capsys.readouterr().err


def _asv_cases():
    from benchmark.asv import benchmarks

    for cls_name, cls in inspect.getmembers(benchmarks, inspect.isclass):
        if cls.__module__ != benchmarks.__name__:
            continue
        methods = [m for m in vars(cls) if m.startswith(("time_", "track_", "mem_", "peakmem_"))]
        params = getattr(cls, "params", None)
        if params and not isinstance(params[0], list):
            params = [params]
        for combo in itertools.product(*params) if params else [()]:
            for m in methods:
                yield pytest.param(cls, m, combo, id=f"{cls_name}.{m}{list(combo) if combo else ''}")


@pytest.mark.parametrize("cls, method, combo", list(_asv_cases()))
def test_asv_benchmark_runs_once(cls, method, combo, monkeypatch):
    if hasattr(cls, "workload_shape"):  # the ratio benchmarks, shrunk
        monkeypatch.setattr(cls, "workload_shape", (3, 8, 2) if cls.__name__ == "Speedup" else (2, 4, 1))
        monkeypatch.setattr(cls, "timing_repeats", 1)
    threads = torch.get_num_threads()
    bench = cls()
    try:
        try:
            bench.setup(*combo)
        except NotImplementedError as e:  # asv's way to skip (e.g. theory.stats not written yet)
            pytest.skip(str(e))
        value = getattr(bench, method)(*combo)
    finally:
        torch.set_num_threads(threads)
    if method.startswith("track_"):
        assert _positive_finite(value)


def test_asv_benchmarks_are_all_collected():
    names = {c.values[0].__name__ for c in _asv_cases()}
    assert names >= {"ExecutorRound", "Compressors", "Partition", "TheoryCheck", "Speedup", "SpeedupCNN",
                      "AutoChoice", "BatchedRuns"}


def test_asv_history_script_lists_commits(capsys):
    """The history recorder (benchmark/perf/asv_history.py), cheaply: which commits it would record."""
    import subprocess

    from benchmark.perf import asv_history

    try:
        asv_history.commits()
    except (subprocess.CalledProcessError, FileNotFoundError):
        pytest.skip("not a git checkout")
    assert asv_history.main(["record", "--dry-run", "--machine", "no-such-machine"]) == 0
    out = capsys.readouterr().out
    assert "commit(s) to record for machine 'no-such-machine'" in out


def test_asv_history_sample_spreads_over_the_history():
    from benchmark.perf.asv_history import spread

    items = list(range(73))
    assert spread(items, 5) == [0, 18, 36, 54, 72]
    assert spread(items, 1) == [72] and spread(items, 100) == items and spread([], 3) == []


def test_bench_times_under_the_runs_numerics_policy(monkeypatch):
    """Bench measures with the flags the runs use (benchmark.sim.numerics), not whatever the process had: a flag
    left on by the caller (planted) is off while measuring under the default policy, and the policy of
    ``numerics.using`` is in force when set; the result records it."""
    from benchmark.perf import bench
    from benchmark.sim import numerics

    seen = []
    monkeypatch.setattr(bench, "_run_bench", lambda *a, **k: seen.append(
        torch.are_deterministic_algorithms_enabled()) or {"numerics": numerics.in_force()})
    torch.use_deterministic_algorithms(True)  # the caller's stray setting
    try:
        out = bench.run_bench("digits", ("logreg",), device="cpu", quick=True)
        assert seen == [False] and out["numerics"]["deterministic_algorithms"] is False
        assert torch.are_deterministic_algorithms_enabled()  # restored after
    finally:
        torch.use_deterministic_algorithms(False)
    with numerics.using(numerics.Numerics(deterministic=True)):
        bench.run_bench("digits", ("logreg",), device="cpu", quick=True)
    assert seen == [False, True]
