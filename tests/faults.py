"""Test helpers for fault injection: read-only folders (also as root), process trees, a tiny suite, the CLI.

Use the fixture with ``from tests.faults import read_only_dir_fixture  # noqa: F401`` and a ``read_only_dir``
argument."""
from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

TINY_SUITE = """
name = "{name}"
description = "tiny suite for fault tests"
[defaults]
dataset = "digits"
model = "logreg"
num_clients = 4
rounds = {rounds}
batch_size = 64
[matrix]
algorithm = ["fedavg", "fedprox"]
seed = {seeds}
[[override]]
match = {{ algorithm = "fedprox" }}
set = {{ algorithm_args = {{ mu = 0.1 }} }}
"""


def write_tiny_suite(folder: Path, name: str = "tiny", rounds: int = 3, seeds=(0, 1)) -> Path:
    p = Path(folder) / f"{name}.toml"
    p.write_text(TINY_SUITE.format(name=name, rounds=rounds, seeds=list(seeds)))
    return p


def cli_env(**extra) -> dict:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **extra}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def fedrepro(*args, timeout: float = 300, env: dict | None = None, cwd=None) -> subprocess.CompletedProcess:
    """Run the real command (``python -m benchmark.cli``) and capture its output."""
    return subprocess.run([sys.executable, "-m", "benchmark.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or cli_env(), cwd=cwd)


def popen_fedrepro(*args, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "benchmark.cli", *map(str, args)], env=env or cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kw)


def record_files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(folder).glob("*.json"))}


def metrics(folder: Path) -> dict:
    """What must be identical between two runs of the same cells (not wall times)."""
    out = {}
    for p in Path(folder).glob("*.json"):
        r = json.loads(p.read_text())
        out[r["config_hash"]] = (r["status"], [(h["test_loss"], h["train_loss"], h["bits_up"], h["test_accuracy"])
                                               for h in r["history"]])
    return out


# ---------------------------------------------------------------------------------------------- processes


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(d.name))
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def alive(pid: int) -> bool:
    """Running (a zombie, dead but not yet reaped, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def wait_gone(pids, timeout: float) -> list[int]:
    """Wait until none of ``pids`` runs; return those still running after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def kill_pids(pids, sig=signal.SIGKILL) -> None:
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


# ---------------------------------------------------------------------------------------------- read-only folders


def _writable(folder: Path) -> bool:
    try:
        fd, tmp = tempfile.mkstemp(dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(tmp)
    return True


@pytest.fixture(name="read_only_dir")
def read_only_dir_fixture(tmp_path):
    """A folder nobody can write: mode 0555, and (root ignores modes) the immutable attribute where it can be
    set. Skips where neither works."""
    d = tmp_path / "read_only"
    d.mkdir()
    (d / "existing.txt").write_text("keep")
    d.chmod(0o555)
    immutable = False
    if _writable(d) and shutil.which("chattr"):
        immutable = subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode == 0
    try:
        if _writable(d):
            pytest.skip("cannot make a read-only folder here (root without chattr +i)")
        yield d
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(d)], capture_output=True)
        d.chmod(0o755)


# ---------------------------------------------------------------------------------------------- killed workers

KILL_ONCE_ENV = "FEDREPRO_TEST_KILL_ONCE"  # a marker file: the first worker to train kills itself and creates it


class _Killer(torch.nn.Module):
    """A linear model whose forward, in a spawned worker (never in the test's own process), kills its own process
    with SIGKILL at its 20th call, as the kernel's out-of-memory killer would: every time, or only the first time
    when ``FEDREPRO_TEST_KILL_ONCE`` names a marker file that does not exist yet."""

    def __init__(self, d: int, classes: int):
        super().__init__()
        self.lin = torch.nn.Linear(d, classes)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 20 and multiprocessing.parent_process() is not None:
            once = os.environ.get(KILL_ONCE_ENV)
            if not once or not os.path.exists(once):
                if once:
                    Path(once).touch()
                os.kill(os.getpid(), signal.SIGKILL)
        return self.lin(x.flatten(1))


def killer_model(input_shape, num_classes):
    d = 1
    for s in input_shape:
        d *= s
    return _Killer(d, num_classes)
