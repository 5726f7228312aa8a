"""A real two-node Ray cluster on this machine loses a node mid-suite, and the suite still ends right.

The cluster is started the way users start one (README, "On a Ray cluster"): ``ray start --head``, then a
second node ``ray start --address=<head>``, each with its own raylet, on free ports and a private temp dir
and auth token (so tests running beside each other never share a cluster), each node in its own process
group. ``fedrepro run --suite ... --backend ray --address <head>`` runs a tiny suite; when a cell is running
on the second node, every process of that node (its ``ray start``, raylet, agents and workers) is killed by
pid. The suite must finish (the lost tasks retried on the head), with every record written once and results
identical to a local run. Nodes are stopped by their pids, never by ``ray stop`` (which would stop every
cluster on the machine). Bounded in time: each wait has a deadline.
"""
from __future__ import annotations

import os
import sys
import re
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from benchmark.campaign import runner, suite as campaign_suite
from tests.faults import cli_env, cmdline, descendants, kill_pids, metrics, wait_gone, write_tiny_suite

pytest.importorskip("ray", reason="Ray is installed with the test extras")
RAY = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
if not Path(RAY).exists():
    pytest.skip("the `ray` command is not installed", allow_module_level=True)

VERSION = runner.code_version()["package"]
DEADLINE_S = 240  # the whole test, start to finish


def default_sigint() -> None:
    """In a driver's child process before exec: Ctrl-C's default action, as from a terminal. A process that
    starts with SIGINT ignored never raises KeyboardInterrupt, and that is inherited: pytest run as a background
    job of a script (``cmd &``: SIGINT ignored, its workers and their children too) made the Ctrl-C checks below
    fail, testing the inheritance instead of fedrepro."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_flags() -> list[str]:
    """Every port a node opens, chosen free, so clusters of parallel test runs never collide."""
    ports = ["--node-manager-port", "--object-manager-port", "--metrics-export-port", "--dashboard-agent-listen-port",
             "--dashboard-agent-grpc-port", "--runtime-env-agent-port"]
    flags = []
    for p in ports:
        flags += [p, str(free_port())]
    return flags + ["--num-cpus", "1", "--object-store-memory", str(80 * 2**20), "--disable-usage-stats", "--block"]


class Node:
    """One ``ray start --block`` in its own process group; its log says when it is up."""

    def __init__(self, args: list[str], log: Path, env: dict):
        self.log = log
        self.proc = subprocess.Popen([RAY, "start", *args, *node_flags()], env=env, start_new_session=True,
                                     stdout=open(log, "w"), stderr=subprocess.STDOUT)

    def wait_up(self, deadline: float) -> str:
        while time.monotonic() < deadline:
            text = self.log.read_text()
            if "Ray runtime started" in text:
                return text
            assert self.proc.poll() is None, f"ray start exited:\n{text[-3000:]}"
            time.sleep(0.2)
        raise AssertionError(f"node not up in time:\n{self.log.read_text()[-3000:]}")

    def pids(self) -> list[int]:
        """The node's processes: ``ray start``, what it started (raylet, agents) and their workers."""
        return [self.proc.pid] + descendants(self.proc.pid)

    def kill(self) -> list[int]:
        pids = self.pids()
        kill_pids(pids, signal.SIGKILL)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(30)
        return pids


STAY_CONNECTED = """
import sys, time
import ray
from benchmark.campaign import runner, suite as campaign_suite
ray.init(address=sys.argv[1], log_to_driver=False)
try:
    runner.run_suite(campaign_suite.load_suite(sys.argv[2]), backend="ray", results_root=sys.argv[3], progress=False)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    time.sleep(120)  # stay connected: the test checks the cells stopped meanwhile
"""


@pytest.mark.slow
def test_ray_cluster_survives_losing_a_node(tmp_path):
    t_end = time.monotonic() + DEADLINE_S
    suite = write_tiny_suite(tmp_path, name="raytiny", rounds=40, seeds=(0, 1, 2))
    local = runner.run_suite(campaign_suite.load_suite(str(suite)), results_root=str(tmp_path / "local"), progress=False)
    assert local["ok"] == 6

    ray_tmp = tempfile.mkdtemp(prefix="fr-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = cli_env(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=uuid.uuid4().hex)
    gcs = free_port()
    nodes = []
    driver = None
    try:
        head = Node(["--head", "--port", str(gcs), "--temp-dir", ray_tmp, "--include-dashboard", "false",
                     "--dashboard-port", str(free_port())], tmp_path / "head.log", env)
        nodes.append(head)
        address = re.search(r"ray start --address='([^']+)'", head.wait_up(t_end)).group(1)
        second = Node(["--address", address], tmp_path / "second.log", env)
        nodes.append(second)
        second.wait_up(t_end)

        folder = tmp_path / "ray" / "raytiny" / VERSION
        driver = subprocess.Popen([sys.executable, "-m", "benchmark.cli", "run", "--suite", str(suite), "--backend",
                                   "ray", "--address", address, "--results", str(tmp_path / "ray"), "--no-progress"],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = {}  # record name -> (inode, mtime) when first seen: a record written twice changes it

        def watch():
            for p in folder.glob("*.json"):
                st = p.stat()
                seen.setdefault(p.name, (st.st_ino, st.st_mtime_ns))

        def busy_on_second():  # a worker of the second node is running a cell
            return any(cmdline(p).startswith("ray::compute_job") for p in descendants(second.proc.pid))

        while not (busy_on_second() and folder.is_dir() and list(folder.glob("*.json"))):
            assert driver.poll() is None, f"the suite ended before the node could be killed:\n{driver.stderr.read()}"
            assert time.monotonic() < t_end, "no cell ran on the second node in time"
            watch()
            time.sleep(0.1)
        killed = second.kill()
        assert not wait_gone(killed, 15), "the second node's processes did not all end"
        n_at_kill = len(seen)

        while driver.poll() is None:
            assert time.monotonic() < t_end, "the suite did not finish after the node was lost"
            watch()
            time.sleep(0.1)
        watch()
        err = driver.stderr.read()
        assert driver.returncode == 0, err[-3000:]
        assert n_at_kill < 6, "the node was killed after the suite had finished"
        assert metrics(folder) == metrics(tmp_path / "local" / "raytiny" / VERSION)
        for p in folder.glob("*.json"):
            st = p.stat()
            assert seen[p.name] == (st.st_ino, st.st_mtime_ns), f"{p.name} was written more than once"
        assert not list(folder.glob(".*.tmp"))

        # Ctrl-C of the driver cancels its tasks: nothing keeps running on the cluster, nothing is written after.
        # Cells of 50000 rounds (minutes each): far longer than the 20 s allowed, so only a cancel stops them in
        # time (2000 rounds once let all four cells finish before the Ctrl-C, on a loaded 2-core machine)
        long = write_tiny_suite(tmp_path, name="raylong", rounds=50000, seeds=(0, 1))
        folder2 = tmp_path / "ray2" / "raylong" / VERSION

        def running_cells():
            return [p for p in descendants(head.proc.pid) if cmdline(p).startswith("ray::compute_job")]

        # the first suite's workers go idle (renamed ray::IDLE) first: a cell seen running after that is the new
        # driver's, so its Ctrl-C lands while it waits on its cells (not while it still starts up, where a
        # leftover worker's name once made the test send it too early)
        while running_cells():
            assert time.monotonic() < t_end, "the first suite's cells still run"
            time.sleep(0.1)
        driver = subprocess.Popen([sys.executable, "-m", "benchmark.cli", "run", "--suite", str(long), "--backend",
                                   "ray", "--address", address, "--results", str(tmp_path / "ray2"),
                                   "--no-progress"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=default_sigint)
        while not running_cells():
            assert driver.poll() is None, driver.stderr.read()
            assert time.monotonic() < t_end, "no cell started on the head"
            time.sleep(0.1)
        with open(f"/proc/{driver.pid}/status") as f:
            masks = " ".join(ln.strip() for ln in f if ln.startswith(("SigBlk", "SigIgn", "SigCgt")))
        driver.send_signal(signal.SIGINT)
        try:
            rc = driver.wait(60)
        except subprocess.TimeoutExpired:
            driver.kill()
            raise AssertionError(f"the driver did not end within 60 s of Ctrl-C (its signal masks: {masks}; this "
                                 f"process: SIGINT {signal.getsignal(signal.SIGINT)}):\n"
                                 + driver.communicate()[1][-3000:]) from None
        assert rc == 130, driver.stderr.read()[-3000:]
        written = sorted(p.name for p in folder2.glob("*.json"))
        deadline = time.monotonic() + 20
        while running_cells():
            assert time.monotonic() < deadline, "a cancelled cell still runs on the cluster 20 s after Ctrl-C"
            time.sleep(0.2)
        time.sleep(1)
        assert sorted(p.name for p in folder2.glob("*.json")) == written, "a record was written after Ctrl-C"
        assert "run the same command again to resume" in driver.stderr.read()

        # the same from Python with a driver that stays connected: the interrupted suite's tasks are cancelled
        while running_cells():  # the interrupted suite's cells are gone (checked above); wait for idle workers
            assert time.monotonic() < t_end, "cells still run"
            time.sleep(0.1)
        driver = subprocess.Popen([sys.executable, "-c", STAY_CONNECTED, address, str(long), str(tmp_path / "ray3")],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  preexec_fn=default_sigint)
        while not running_cells():
            assert driver.poll() is None, driver.stderr.read()
            assert time.monotonic() < t_end, "no cell started on the head"
            time.sleep(0.1)
        driver.send_signal(signal.SIGINT)
        seen_interrupt, until = False, time.monotonic() + 60
        while not seen_interrupt and time.monotonic() < until:  # Ray may print lines of its own first
            if select.select([driver.stdout], [], [], 1.0)[0]:
                line = driver.stdout.readline()
                if not line:
                    break  # the driver ended
                seen_interrupt = line.strip() == "interrupted"
        if not seen_interrupt:
            driver.kill()
            raise AssertionError(f"the driver did not see the interrupt:\n{driver.communicate()[1][-3000:]}")
        deadline = time.monotonic() + 20
        while running_cells():
            assert time.monotonic() < deadline, "a cell still runs 20 s after Ctrl-C, its driver still connected"
            time.sleep(0.2)
        assert driver.poll() is None, "the driver should still be connected"
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()
        for node in reversed(nodes):
            if node.proc.poll() is None or any(True for _ in descendants(node.proc.pid)):
                node.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
