"""Long runs that share, recover and report: two runners on one results folder (one of them killed by SIGKILL),
out of memory as a size problem (batched jobs halved, killed workers retried alone), a full disk, and
``fedrepro status``."""
from __future__ import annotations

import dataclasses
import errno
import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch

from benchmark import Experiment
from benchmark.campaign import cell_claims, runner, status, suite as campaign_suite, backends
from benchmark.runs import plan, store
from benchmark.cli import main
from tests.faults import (KILL_ONCE_ENV, cli_env, descendants, killer_model, metrics, popen_fedrepro, wait_gone,
                          write_tiny_suite)
from tests.helpers import tiny_dataset, tiny_model

VERSION = runner.code_version()["package"]
COUNTS = re.compile(r"suite \w+: skipped (\d+), ok (\d+), diverged (\d+), failed (\d+), duplicate (\d+)")


@pytest.fixture(autouse=True)
def _keep_torch_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def computed(stderr: str) -> int:
    """Cells a runner computed, from its closing line (ok + diverged + failed + duplicate)."""
    m = COUNTS.search(stderr)
    assert m, stderr[-2000:]
    return sum(int(x) for x in m.groups()[1:])


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The shared suite (8 cells) run by one runner alone: its metrics."""
    base = tmp_path_factory.mktemp("single")
    suite = write_tiny_suite(base, name="share", rounds=25, seeds=range(4))
    runner.run_suite(campaign_suite.load_suite(str(suite)), results_root=str(base / "res"), progress=False)
    return metrics(base / "res" / "share" / VERSION)


def _check_folder(folder: Path, single: dict) -> None:
    for p in folder.glob("*.json"):
        store.load_record(p)  # none partial or damaged
    assert metrics(folder) == single
    assert not list(folder.glob(".*.tmp")) and not cell_claims.claims_dir(folder).exists()


def _ray_missing() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return True
    return False


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "process", pytest.param("ray", marks=pytest.mark.skipif(
    _ray_missing(), reason="Ray is not installed (pip install 'fedrepro[ray]')"))])
def test_two_runners_divide_a_folder(backend, single, tmp_path):
    """Each runner with its own local Ray in the Ray case (``--backend ray`` without ``--address``)."""
    suite = write_tiny_suite(tmp_path, name="share", rounds=25, seeds=range(4))
    args = ["run", "--suite", suite, "--results", tmp_path / "res", "--backend", backend, "--jobs", "1",
            "--no-progress"]
    procs = [popen_fedrepro(*args, env=cli_env(RAY_USAGE_STATS_ENABLED="0")) for _ in range(2)]
    errs = [p.communicate(timeout=900)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    done = [computed(e) for e in errs]
    assert sum(done) <= len(single) + 2, f"{done}: more than a race's worth of duplicated cells"
    _check_folder(tmp_path / "res" / "share" / VERSION, single)


@pytest.mark.slow
def test_a_runner_killed_midway_leaves_its_cells_to_the_other(single, tmp_path):
    suite = write_tiny_suite(tmp_path, name="share", rounds=25, seeds=range(4))
    folder = tmp_path / "res" / "share" / VERSION
    args = ["run", "--suite", suite, "--results", tmp_path / "res", "--no-progress"]
    victim = popen_fedrepro(*args, "--backend", "process", "--jobs", "1")
    deadline = time.monotonic() + 300
    while not any(c.pid == victim.pid for c in cell_claims.read_claims(folder)):  # it works on a cell
        assert time.monotonic() < deadline and victim.poll() is None, "the first runner claimed no cell"
        time.sleep(0.05)
    other = popen_fedrepro(*args)
    time.sleep(1.0)
    kids = descendants(victim.pid)
    victim.send_signal(signal.SIGKILL)
    victim.wait(10)
    assert not wait_gone(kids, 10)
    st = status.status(tmp_path / "res", campaign_suite.load_suite(str(suite)))["folders"][0]
    assert st["cells"] == 8 and st["done"] + len(st["running"]) + len(st["stalled"]) + st["pending"] == 8
    err = other.communicate(timeout=900)[1]
    assert other.returncode == 0, err
    assert "took over cell" in err and "is gone" in err
    _check_folder(folder, single)


# ----------------------------------------------------------------------------------------------- out of memory


def _group_of(n: int, rounds: int = 2) -> list[Experiment]:
    data = tiny_dataset()
    return [Experiment(algorithm="fedavg", dataset=data, num_clients=None, model=tiny_model, rounds=rounds,
                       executor="vectorized", seed=s, batch_size=8, lr=0.05, clients_per_round=3, device="cpu")
            for s in range(n)]


def _memory_cap(monkeypatch, fits: int, error: BaseException | None = None) -> list[int]:
    """Jobs of more than ``fits`` runs fail for memory (as a batched job past the device's memory would); returns
    the sizes of the jobs tried, in order."""
    real, sizes = plan.execute, []

    def execute(job, **kw):
        sizes.append(len(job))
        if len(job) > fits:
            raise error or MemoryError("cannot allocate")
        yield from real(job, **kw)

    monkeypatch.setattr(plan, "execute", execute)
    return sizes


def test_a_batched_job_out_of_memory_is_halved_down_to_what_fits(monkeypatch, tmp_path, capsys):
    exps = _group_of(16)
    alone = runner.run_experiments(exps, tmp_path / "alone", group_runs=1, progress=False)
    assert alone["ok"] == 16
    sizes = _memory_cap(monkeypatch, fits=4)
    counts = runner.run_experiments(exps, tmp_path / "capped", group_runs=16, progress=False)
    assert counts["ok"] == 16 and counts["failed"] == 0
    assert sizes == [16, 8, 4, 4, 8, 4, 4]
    monkeypatch.undo()
    runner.run_experiments(exps, tmp_path / "fours", group_runs=4, progress=False)
    assert metrics(tmp_path / "capped") == metrics(tmp_path / "fours")  # bit for bit: the same jobs of 4
    capped, single = metrics(tmp_path / "capped"), metrics(tmp_path / "alone")
    assert capped.keys() == single.keys()
    for h, (st, hist) in capped.items():  # as 16 single runs, to float rounding (batched vs alone)
        assert st == single[h][0] == "ok"
        for a, b in zip(hist, single[h][1], strict=True):
            assert a[2:] == b[2:] and a[:2] == pytest.approx(b[:2], rel=1e-6)
    assert "ran out of memory (MemoryError: cannot allocate); retrying its 16 unfinished cells as jobs of 8 and 8" \
        in capsys.readouterr().err


def test_a_run_that_does_not_fit_alone_is_failed_with_the_memory_it_asked_for(monkeypatch, tmp_path):
    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 1.00 GiB free)")
    sizes = _memory_cap(monkeypatch, fits=0, error=oom)
    counts = runner.run_experiments(_group_of(2), tmp_path, group_runs=2, progress=False)
    assert counts["failed"] == 2 and sizes == [2, 1, 1]
    for rec in store.read_records(tmp_path):
        assert rec["status"] == "failed" and rec["message"].startswith("out of memory, even alone: OutOfMemoryError")
        assert rec["memory_needed"] == "one allocation of 2.00 GiB failed"


def _killer_cells(n: int) -> list[Experiment]:
    exps = _group_of(n, rounds=3)
    exps[1] = dataclasses.replace(exps[1], model=killer_model, executor="sequential")
    return exps


@pytest.mark.slow
def test_a_worker_killed_twice_fails_its_cell_and_the_suite_goes_on(tmp_path, capsys):
    exps = _killer_cells(4)
    counts = runner.run_experiments(exps, tmp_path, backend="process", jobs=2, progress=False)
    assert counts["ok"] == 3 and counts["failed"] == 1
    [bad] = [r for r in store.read_records(tmp_path) if r["status"] == "failed"]
    assert bad["config_hash"] == exps[1].config_hash()
    assert "its worker process died (SIGKILL) twice" in bad["message"] and "out of memory" in bad["message"]
    assert "a worker process died (SIGKILL" in capsys.readouterr().err


@pytest.mark.slow
def test_a_worker_killed_once_is_retried_alone_and_succeeds(monkeypatch, tmp_path):
    monkeypatch.setenv(KILL_ONCE_ENV, str(tmp_path / "killed-once"))
    counts = runner.run_experiments(_killer_cells(3), tmp_path / "res", backend="process", jobs=2, progress=False)
    assert counts["ok"] == 3 and (tmp_path / "killed-once").exists()


# ----------------------------------------------------------------------------------------------- a full disk


def _no_space_under(monkeypatch, folder: Path) -> None:
    """ENOSPC at the fsync of any file under ``folder`` (after its bytes were written: a partial file exists)."""
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder)):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_full_disk_rescues_the_record_and_stops_the_suite(monkeypatch, tmp_path, capsys):
    suite = write_tiny_suite(tmp_path, rounds=2, seeds=(0, 1))
    folder = tmp_path / "res" / "tiny" / VERSION
    store.check_writable_folder(folder)
    monkeypatch.setenv(store.RESCUE_ENV, str(tmp_path / "rescue"))
    _no_space_under(monkeypatch, folder)
    assert main(["run", "--suite", str(suite), "--results", str(tmp_path / "res"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    [rescued] = (tmp_path / "rescue").glob("*.json")
    assert store.load_record(rescued)["status"] == "ok"
    [line] = [ln for ln in err.splitlines() if "disk full" in ln]
    assert line.startswith("fedrepro run: disk full: could not write cell") and f"it is saved in {rescued}" in line
    assert "No space left on device" in line and "run the same command again to resume" in line
    assert not list(folder.glob("*.json")) and not list(folder.glob(".*.tmp")), "no partial file is left"
    assert not cell_claims.claims_dir(folder).exists(), "the claims are released"


def test_a_full_disk_everywhere_prints_the_record(monkeypatch, tmp_path, capsys):
    exps = _group_of(1)
    monkeypatch.setenv(store.RESCUE_ENV, str(tmp_path / "rescue"))
    monkeypatch.chdir(tmp_path)
    _no_space_under(monkeypatch, tmp_path)
    with pytest.raises(runner.DiskFull, match="printed on stderr"):
        runner.run_experiments(exps, tmp_path / "res", progress=False)
    printed = capsys.readouterr().err.strip().splitlines()
    assert any(ln.startswith("{") and exps[0].config_hash() in ln for ln in printed)
    assert not list(tmp_path.rglob("*.json")) and not list(tmp_path.rglob(".*.tmp"))


# ----------------------------------------------------------------------------------------------- status


def test_status_counts_running_stalled_failed_and_pending(tmp_path, capsys):
    suite = campaign_suite.load_suite(str(write_tiny_suite(tmp_path, rounds=1, seeds=(0, 1, 2))))  # 6 cells
    folder = runner.results_dir(tmp_path / "res", "tiny")
    cells = [c.experiment for c in suite.cells]
    runner.run_experiments(cells[:2], folder, progress=False)
    store.write_record(folder, backends.failed_record(cells[2], ValueError("bad\nlast line of the error"), 0.0))
    with cell_claims.Claims(folder, runner="me", ttl=30) as mine:
        assert mine.try_claim(cells[3].config_hash())
        d = cell_claims.claims_dir(folder)
        stale = d / f"{cells[4].config_hash()}.claim"
        stale.write_text('{"runner": "gone-1", "host": "far", "boot_id": "x", "pid": 1}')
        os.utime(stale, (1, 1))
        st = status.status(tmp_path / "res", suite, device="cpu", ttl=30)
        assert main(["status", str(tmp_path / "res"), "--suite", str(tmp_path / "tiny.toml")]) == 0
    [f] = st["folders"]
    assert (f["cells"], f["done"], f["failed"], f["pending"]) == (6, 2, 1, 1)
    assert [c["runner"] for c in f["running"]] == ["me"] and [c["runner"] for c in f["stalled"]] == ["gone-1"]
    assert f["failed_cells"][0]["message"] == "last line of the error"
    assert f["seconds_left"] > 0 and f["pace"] > 0  # the shipped bench results give a cost model
    out = capsys.readouterr().out
    assert "done 2 (ok 2, diverged 0) | running 1 | stalled 1 | failed 1 | pending 1" in out
    assert "running: 1 cell(s) by runner me" in out and "the next runner takes it over" in out
    assert "failed: " + cells[2].config_hash() in out and "last line of the error" in out
    assert "time left: " in out and "at the pace of the 2 finished cells" in out


def test_status_of_a_root_without_a_suite_file_and_watch(tmp_path):
    folder = tmp_path / "res" / "custom" / VERSION
    runner.run_experiments(_group_of(1), folder, progress=False)
    st = status.status(tmp_path / "res")
    assert [(f["suite"], f["done"], f["pending"]) for f in st["folders"]] == [("custom", 1, None)]
    assert "suite file unknown" in status.render(st)
    assert status.render(status.status(tmp_path / "empty")).startswith("no results under")


def test_status_watch_refreshes_until_ctrl_c(tmp_path, monkeypatch, capsys):
    from benchmark.cli import status as cli_status

    naps = []

    def sleep(s):
        naps.append(s)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_status.time, "sleep", sleep)
    assert main(["status", str(tmp_path), "--watch", "0.5"]) == 130
    assert naps == [0.5, 0.5] and capsys.readouterr().out.count("(every 0.5 s; Ctrl-C to stop)") == 2


def test_status_refuses_two_roots(tmp_path, capsys):
    assert main(["status", str(tmp_path), "--results", str(tmp_path)]) == 2
    assert "not both" in capsys.readouterr().err
