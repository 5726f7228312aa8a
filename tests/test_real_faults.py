"""Long-run faults made real, not injected: torch's own CPU allocation failure, a batched group under a real
address-space cap (``RLIMIT_AS`` in a child process), and a results folder on a small tmpfs that fills up.
(tests/test_shared_runs.py injects the same faults; these check that the real ones look as assumed.)"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmark.campaign import cell_claims, runner, backends, suite as campaign_suite
from benchmark.runs import oom, store
from benchmark.cli import main
from tests.faults import ROOT, cli_env, fedrepro, metrics, write_tiny_suite

VERSION = runner.code_version()["package"]

# ----------------------------------------------------------------------------------------------- out of memory


def _real_allocation_failure() -> RuntimeError:
    """What torch's CPU allocator raises when an allocation fails: 1 PiB, more than any machine (or the 47-bit
    address space) holds, fails at once whatever the overcommit setting."""
    with pytest.raises(RuntimeError) as info:
        torch.empty(2**50, dtype=torch.uint8)
    return info.value


def test_the_cpu_allocators_real_failure_is_out_of_memory():
    err = _real_allocation_failure()
    assert "DefaultCPUAllocator: can't allocate memory" in str(err)  # torch's text, as this test relies on it
    assert oom.is_out_of_memory(err)
    assert oom.memory_needed(err) == f"one allocation of {oom.human_bytes(2**50)} failed"
    with pytest.raises(RuntimeError) as other:
        torch.ones(2) @ torch.ones(3)  # a real error that is not about memory
    assert not oom.is_out_of_memory(other.value)
    assert not oom.is_out_of_memory(RuntimeError("cannot allocate a seat: the plan is full"))
    assert oom.is_out_of_memory(OSError(12, "Cannot allocate memory"))


def test_a_cell_that_fails_for_real_memory_alone_says_so(tmp_path):
    rec = backends.failed_record(runner.Experiment(algorithm="fedavg", dataset="digits", rounds=1),
                               _real_allocation_failure(), 0.0)
    assert rec["message"].startswith("out of memory, even alone: RuntimeError: ")
    assert rec["memory_needed"] == f"one allocation of {oom.human_bytes(2**50)} failed"


def _has_address_space_cap() -> str | None:
    """Why a real ``RLIMIT_AS`` cap cannot be tested here (None: it can)."""
    try:
        import resource
    except ImportError:
        return "no `resource` module (not a Unix)"
    if not hasattr(resource, "RLIMIT_AS") or not Path("/proc/self/status").exists():
        return "no RLIMIT_AS or no /proc/self/status (not Linux)"
    if resource.getrlimit(resource.RLIMIT_AS)[1] != resource.RLIM_INFINITY:
        return "the address space is capped already (a hard limit the child could not lift afterwards)"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_has_address_space_cap() is not None, reason=str(_has_address_space_cap()))
def test_a_batched_group_under_a_real_memory_cap_is_halved_down_to_what_fits(tmp_path):
    """16 runs in one batched job, in a child process whose address space is capped at what 6 of them need
    (``tests/memory_cap.py``): the group is halved to jobs of 4, and every run's record is the uncapped one."""
    env = cli_env(MALLOC_MMAP_THRESHOLD_="131072", MALLOC_ARENA_MAX="1")  # freed tensors give back their addresses
    proc = subprocess.run([sys.executable, "-m", "tests.memory_cap", str(tmp_path), "16"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    cap = json.loads((tmp_path / "cap.json").read_text())
    assert cap["counts"]["ok"] == 16 and cap["counts"]["failed"] == 0, cap
    # the first job is the whole group, and every job that ran to its end held at most 4 runs
    assert cap["sizes"][0] == 16 and max(cap["sizes"][1:]) == 8, cap
    assert cap["sizes"] == [16, 8, 4, 4, 8, 4, 4], f"{cap}: not halved down to the 4 runs that fit"
    assert "ran out of memory (RuntimeError: " in proc.stderr and "DefaultCPUAllocator" in proc.stderr
    capped, free = metrics(tmp_path / "capped"), metrics(tmp_path / "uncapped")
    assert capped.keys() == free.keys() and len(capped) == 16
    for h, (st, hist) in capped.items():  # jobs of 4 against the job of 16: equal to float rounding
        assert st == free[h][0] == "ok"
        for a, b in zip(hist, free[h][1], strict=True):
            assert a[2:] == b[2:] and a[:2] == pytest.approx(b[:2], rel=1e-6)


# ----------------------------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_tmpfs(tmp_path):
    """``mount(kib) -> folder``: a tmpfs of ``kib`` KiB mounted under ``tmp_path``, unmounted at the end. Skips
    where mounting is refused (not root, or a container without CAP_SYS_ADMIN)."""
    mounted = []

    def mount(kib: int) -> Path:
        folder = tmp_path / f"tmpfs{len(mounted)}"
        folder.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no `mount` command: the disk-full tests with injected faults still run")
        p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0755", "tmpfs", str(folder)],
                           capture_output=True, text=True)
        if p.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({p.stderr.strip() or p.returncode}): the disk-full tests with "
                        "injected faults still run")
        mounted.append(folder)
        return folder

    yield mount
    for folder in mounted:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _fill(folder: Path, leave_kib: int) -> Path:
    """A file that takes all of ``folder``'s filesystem but ``leave_kib`` KiB."""
    st = os.statvfs(folder)
    filler = folder / "filler"
    filler.write_bytes(b"\0" * (st.f_bavail * st.f_frsize - leave_kib * 1024))
    return filler


def _no_leftovers(folder: Path) -> None:
    for p in folder.glob("*.json"):
        store.load_record(p)  # none partial or damaged
    assert not list(folder.rglob(".*.tmp")), "a partial file is left"
    assert not cell_claims.claims_dir(folder).exists(), "the claims are not released"


@pytest.mark.slow
def test_a_real_full_disk_stops_the_suite_and_a_rerun_after_freeing_space_completes(small_tmpfs, tmp_path, capsys,
                                                                                      monkeypatch):
    suite = write_tiny_suite(tmp_path, rounds=2, seeds=range(3))  # 6 cells, records of about 4 KiB
    runner.run_suite(campaign_suite.load_suite(str(suite)), results_root=str(tmp_path / "whole"), progress=False)
    root = small_tmpfs(1024)
    filler = _fill(root, leave_kib=40)  # room for a few records (and their claims), not for 6
    env = cli_env(**{store.RESCUE_ENV: str(tmp_path / "rescue")})
    first = fedrepro("run", "--suite", suite, "--results", root, "--no-progress", env=env)
    assert first.returncode == 1, first.stderr[-3000:]
    folder = root / "tiny" / VERSION
    written = list(folder.glob("*.json"))
    assert 0 < len(written) < 6, f"{len(written)} records: the disk should fill after some of them"
    [rescued] = (tmp_path / "rescue").glob("*.json")
    assert store.load_record(rescued)["status"] == "ok"
    [line] = [ln for ln in first.stderr.splitlines() if "disk full" in ln]
    assert line.startswith("fedrepro run: disk full: could not write cell") and f"it is saved in {rescued}" in line
    assert "No space left on device" in line and "run the same command again to resume" in line
    assert "Traceback" not in first.stderr
    _no_leftovers(folder)

    filler.unlink()  # space freed: the same command resumes
    monkeypatch.setenv(store.RESCUE_ENV, str(tmp_path / "rescue"))
    capsys.readouterr()
    assert main(["run", "--suite", str(suite), "--results", str(root), "--no-progress"]) == 0
    assert f"skipped {len(written)}, ok {6 - len(written)}," in capsys.readouterr().err
    _no_leftovers(folder)
    assert metrics(folder) == metrics(tmp_path / "whole" / "tiny" / VERSION)


def test_a_disk_too_full_to_claim_a_cell_stops_the_suite_in_one_line(small_tmpfs, tmp_path, capsys):
    suite = write_tiny_suite(tmp_path, rounds=2, seeds=(0,))
    root = small_tmpfs(64)
    folder = root / "tiny" / VERSION
    store.check_writable_folder(folder)
    _fill(root, leave_kib=0)
    assert main(["run", "--suite", str(suite), "--results", str(root), "--no-progress"]) == 1
    err = capsys.readouterr().err
    [line] = [ln for ln in err.splitlines() if "disk full" in ln]
    assert line.startswith("fedrepro run: disk full: could not claim a cell in") and "no record was lost" in line
    assert "Traceback" not in err
    _no_leftovers(folder)
    assert not list(folder.glob("*.json"))


def test_a_full_disk_outside_the_records_is_one_line_and_other_os_errors_still_raise(capsys):
    """A disk that fills while the report's plots are written (every record already kept) ends in one line and
    exit 1 (it gave PIL's traceback); an OSError that is not about space is a bug and keeps its traceback."""
    import argparse
    import errno

    from benchmark.cli import errors

    def full(a):
        raise OSError(errno.ENOSPC, "No space left on device", "results/x/accuracy_vs_rounds.png")

    a = argparse.Namespace(command="report", func=full)
    assert errors.run_command(a) == errors.EXIT_FAILED
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "disk full" in err[0] and "accuracy_vs_rounds.png" in err[0], err

    def denied(a):
        raise PermissionError(errno.EACCES, "Permission denied", "x")

    with pytest.raises(PermissionError):
        errors.run_command(argparse.Namespace(command="report", func=denied))
