"""The cost model: FLOPs by hand, the rule behind executor="auto", suite work and time estimates."""
import json
import math

import pytest
import torch

from benchmark import Experiment, run
from benchmark.runs import cost
from benchmark.cli import main


def test_flops_of_logreg_by_hand():
    # Linear 64 -> 10: forward 2*64*10 multiply-adds-as-FLOPs, backward the weight gradient (same);
    # the input needs no gradient
    assert cost.model_flops("logreg", (1, 8, 8), 10) == 2 * 2 * 64 * 10


def test_flops_grow_with_the_input():
    small = cost.model_flops("fedbat_cnn", (1, 28, 28), 10)
    assert small > 1e7 and cost.model_flops("fedbat_cnn", (3, 32, 32), 10) > small


@pytest.mark.parametrize("model, shape, batch, device, expected", [
    ("fedbat_cnn", (1, 28, 28), 64, "cpu", "sequential"),  # the CNN is compute-bound on a CPU
    ("logreg", (1, 8, 8), 64, "cpu", "vectorized"),
    ("mlp", (1, 8, 8), 64, "cpu", "vectorized"),
    ("fedbat_cnn", (1, 28, 28), 64, "cuda", "vectorized"),
])
def test_auto_rule(model, shape, batch, device, expected):
    f = cost.model_flops(model, shape, 10)
    ch = cost.executor_rule("auto", device, True, f, batch)
    assert ch.executor == expected and ch.reason.startswith("auto")


def test_explicit_choice_and_unvectorizable_algorithms():
    assert cost.executor_rule("vectorized", "cpu", True, 1e12, 64).executor == "vectorized"
    assert cost.executor_rule("sequential", "cuda", True, 1.0, 64).executor == "sequential"
    ch = cost.executor_rule("vectorized", "cpu", False, 1.0, 64)
    assert ch.executor == "sequential" and "not vectorizable" in ch.reason
    assert cost.executor_rule("auto", "cuda", False, 1.0, 64).executor == "sequential"


def test_run_record_states_the_choice():
    r = run(Experiment(rounds=1, num_clients=4, executor="auto"))
    rec = json.loads(r.to_json())
    assert rec["execution"]["executor"] == rec["config"]["executor_used"] == "vectorized"
    assert "FLOPs per client step" in rec["execution"]["reason"]
    assert rec["execution"]["flops_per_sample"] == 2560


def test_cell_work_by_hand():
    # FedBAT Table 1, FMNIST, N = 30: 10 clients x 10 epochs x 2000 samples x 100 rounds
    e = Experiment(dataset="fmnist", model="fedbat_cnn", num_clients=30, clients_per_round=10, rounds=100,
                   local_epochs=10, batch_size=64, eval_every=1)
    w = cost.cell_work(e)
    assert w["sample_gradients"] == 100 * 10 * 10 * 2000
    assert w["steps"] == 10 * math.ceil(2000 / 64)
    assert w["eval_forwards"] == 100 * (10000 + 10000)
    e2 = Experiment(dataset="digits", num_clients=10, clients_per_round=5, rounds=30, local_steps=3, batch_size=32,
                    eval_every=5)
    w2 = cost.cell_work(e2)
    assert w2["sample_gradients"] == 30 * 5 * 3 * 32 and w2["eval_forwards"] == 6 * (450 + 1347)


def _bench_file(tmp_path, **extra):
    """A bench JSON whose numbers follow a known cost model exactly."""
    o = {"sequential": 3e-4, "vectorized": 8e-4}
    c = {"sequential": 1e-11, "vectorized": 2e-11}
    configs = []
    for model, shape in (("logreg", (1, 8, 8)), ("mlp", (1, 8, 8)), ("fedbat_cnn", (1, 28, 28))):
        f = cost.model_flops(model, shape, 10)
        k, b, s = 10, 64, 5
        med = {"sequential": k * s * (o["sequential"] + b * f * c["sequential"]),
               "vectorized": s * (o["vectorized"] + k * b * f * c["vectorized"])}
        configs.append({"model": model, "input_shape": list(shape), "num_classes": 10, "clients": k,
                        "batch_size": b, "local_steps": s, "flops_per_sample": f, "median_seconds": med})
    rec = {"device": "cpu", "date": "2030-01-01T00:00:00", "configs": configs, **extra}
    (tmp_path / "cpu-x.json").write_text(json.dumps(rec))
    return o, c


def test_cost_model_recovers_known_constants(tmp_path):
    o, c = _bench_file(tmp_path, round_overhead_seconds=0.01)
    m = cost.cost_model_from_bench(cost.latest_bench("cpu", [tmp_path]))
    for e in o:
        assert m.overhead[e] == pytest.approx(o[e], rel=1e-6)
        assert m.sec_per_flop[e] == pytest.approx(c[e], rel=1e-6)
    assert m.round_overhead == 0.01
    assert cost.latest_bench("cuda", [tmp_path]) is None


def test_list_suites_shows_cost_columns(capsys):
    assert main(["list", "suites"]) == 0
    out = capsys.readouterr().out
    assert "sample-gradients" in out and "est. time" in out
    row = next(line for line in out.splitlines() if line.startswith("| fedbat_table1 "))
    assert "840" in row and "1.5e+10" in row


def test_device_type():
    from benchmark.runs import plan

    assert plan.device_type("cpu") == "cpu"
    assert plan.device_type("auto") == plan.device_type(None) == ("cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="device must be auto, cpu or cuda"):
        plan.device_type("tpu")


def test_latest_bench_takes_each_models_newest_measurement(tmp_path):
    def write(name, date, models, overhead=None):
        configs = [{"model": m, "median_seconds": {"sequential": t, "vectorized": t}} for m, t in models]
        (tmp_path / name).write_text(json.dumps({"device": "cpu", "date": date, "configs": configs,
                                                 "round_overhead_seconds": overhead}))

    write("a.json", "2030-01-01", [("logreg", 1.0), ("fedbat_cnn", 2.0)], overhead=0.5)
    write("b.json", "2030-02-01", [("logreg", 3.0)])
    write("c.json", "2029-01-01", [("mlp", 4.0)])
    (tmp_path / "junk.json").write_text("{not json")
    rec = cost.latest_bench("cpu", [tmp_path])
    got = {c["model"]: c["median_seconds"]["sequential"] for c in rec["configs"]}
    assert got == {"logreg": 3.0, "fedbat_cnn": 2.0, "mlp": 4.0}
    assert rec["round_overhead_seconds"] == 0.5 and rec["date"] == "2030-02-01"


def test_dry_runs_run_nothing(tmp_path, capsys):
    assert main(["run", "--suite", "smoke", "--dry-run", "--results", str(tmp_path), "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert "27 cells, 0 finished, 27 to run as 9 job(s)" in out and "est. time (cpu)" in out
    assert main(["run", "--suite", "smoke", "--dry-run", "--group-runs", "1", "--results", str(tmp_path)]) == 0
    assert "27 to run as 27 job(s)" in capsys.readouterr().out
    assert main(["run", "--suite", "fedbat_table1", "--only", "dataset=fmnist", "--only", "num_clients=30",
                 "--dry-run", "--results", str(tmp_path)]) == 0
    assert "105 cells, 0 finished, 105 to run" in capsys.readouterr().out
    assert main(["run", "--rounds", "2", "--seeds", "0", "1", "--dry-run", "--out", str(tmp_path / "o")]) == 0
    assert "dry run: nothing is run" in capsys.readouterr().out
    assert not list(tmp_path.rglob("*.json"))
    assert main(["run", "--suite", "smoke", "--only", "dataset=mnist", "--dry-run"]) == 2
