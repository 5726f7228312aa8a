"""Issue 48's restated GPU targets (``benchmark.perf.bench.TARGETS``): throughput as a fraction of the device's
FP32 peak from the counted FLOPs, the vectorized step against the ``nn.Module`` limit, the device peaks
(``benchmark.perf.devices``), the graph-replayed step in ``fedrepro bench --compile graph`` and the TF32 cell."""
import pytest
import torch

from benchmark.perf import bench, devices


@pytest.mark.parametrize("name, key", [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"),
                                       ("NVIDIA H100 NVL", "H100-NVL"), ("NVIDIA H200", "H200"),
                                       ("NVIDIA A100-SXM4-80GB", None), ("AMD EPYC (2 logical CPUs)", None)])
def test_device_names_map_to_their_peaks(name, key):
    assert devices.gpu_key(name) == key
    assert devices.peak_flops(name) == (None if key is None else devices.GPUS[key]["fp32"])


def test_the_old_throughput_target_exceeded_an_h100():
    """Why it was restated: 1.2e6 sample-gradients/s of the FedBAT CNN's 6.02e7 FLOPs each is more than the
    H100's FP32 peak, so no implementation could meet it in FP32."""
    assert 1.2e6 * 6.02e7 > devices.GPUS["H100-SXM"]["fp32"]


def _runs(model="fedbat_cnn", sgs=3.0e5):
    return [{"preset": "fmnist_cnn", "model": model, "batched_sample_gradients_per_s": sgs,
             "batched_over_one_after_another": 1.0}]


def test_peak_fraction_target_met_not_met_and_not_evaluated():
    summaries = [{"preset": "fmnist_cnn", "model": "fedbat_cnn", "flops_per_sample": 6.02e7}]
    # 3e5 sg/s x 6.02e7 = 1.8e13 FLOP/s = 27% of 67e12: NOT met; 5e5 -> 45%: met
    for sgs, met in ((3.0e5, False), (5.0e5, True)):
        runs = _runs(sgs=sgs)
        bench.add_peak_fraction(runs, summaries, "NVIDIA H100 80GB HBM3")
        assert runs[0]["flops_per_s"] == pytest.approx(sgs * 6.02e7)
        [t] = [t for t in bench.evaluate_targets("cuda", runs) if t["metric"] == "batched_fraction_of_fp32_peak"]
        assert t["met"] is met and t["value"] == pytest.approx(sgs * 6.02e7 / 67e12)
    runs = _runs()
    bench.add_peak_fraction(runs, summaries, "NVIDIA A100-SXM4-80GB")  # not listed: never "met"
    [t] = [t for t in bench.evaluate_targets("cuda", runs) if t["metric"] == "batched_fraction_of_fp32_peak"]
    assert t["met"] is None and "not listed" in t["why"]
    assert bench.evaluate_targets("cpu", runs) == []  # a CUDA target is not judged on a CPU
    text = bench.table({"configs": [], "runs": [], "targets": [t], "device": "cuda", "device_name": "A100",
                        "torch": "t", "threads": 1, "repeats": 1, "load_average_before": None,
                        "load_average_after": None})
    assert "batched_fraction_of_fp32_peak >= 0.4: not evaluated" in text


def test_limit_target_reads_the_module_limit():
    """The vectorized step is held to 60% of the ``nn.Module`` limit, not of the faster of the two limits."""
    m = bench.Measurement(bench.Config("fmnist_cnn", "fedbat_cnn", (1, 28, 28), 10, 2, 4, 1, 16), 10,
                          {"sequential": [4.0], "vectorized": [1.0], "auto": [1.0], "limit_module": [0.5],
                           "limit_functional": [0.8]})
    s = m.summary()
    assert s["vectorized_over_limit_module"] == pytest.approx(0.5)
    [t] = [t for t in bench.evaluate_targets("cuda", [s]) if t["metric"] == "vectorized_over_limit_module"]
    assert t["met"] is False


@pytest.mark.slow
def test_compile_bench_measures_the_graph_replayed_step():
    """``fedrepro bench --compile graph``: a fourth method, timed like the others, agreeing with the uncompiled
    round from the same start (on a CPU: inductor's code without a CUDA graph)."""
    from benchmark.perf import compile_bench
    from benchmark.perf.workloads import Config

    r = compile_bench.measure_compile(Config("digits", "logreg", (1, 8, 8), 10, 2, 8, 1, 16), torch.device("cpu"), 1,
                                      graph=True)
    assert len(r["seconds"]["graph"]) == 1 and r["graph_compile_seconds"] > 0
    assert r["graph_max_abs_diff_vs_vectorized"] < 1e-6 and r["graph_over_vectorized"] > 0
    md = compile_bench.markdown({"device": "cpu", "device_name": "x", "torch": "t", "threads": 1, "repeats": 1,
                                 "load_average_before": [1], "load_average_after": [1], "models": [r]})
    assert "replayed as a CUDA graph" in md and "| logreg |" in md.split("replayed as a CUDA graph")[1]


def test_tf32_cell_runs_both_and_records_the_numerics():
    """``fedrepro bench --tf32-cell``: the same cell with TF32 off, then on; each run's numerics as recorded. On a
    CPU TF32 changes no number, so the two accuracies are equal (a check of the path, not of a GPU)."""
    from benchmark.perf import tf32_cell
    from benchmark.runs.experiment import Experiment
    from benchmark.sim import numerics

    exp = Experiment(dataset="digits", model="logreg", num_clients=4, rounds=2, batch_size=32, lr=0.05,
                     eval_train_samples=100, executor="sequential")
    r = tf32_cell.compare_tf32(exp, "cpu")
    assert r["runs"]["fp32"]["numerics"]["tf32_matmul"] is False
    assert r["runs"]["tf32"]["numerics"]["tf32_matmul"] is True and r["runs"]["tf32"]["numerics"]["policy"]["tf32"]
    assert r["accuracy_change_points"] == 0.0 and r["runs"]["fp32"]["device"] == "cpu"
    assert numerics.policy().tf32 is False  # the process's policy restored
    assert "TF32 on" in tf32_cell.summary(r)
