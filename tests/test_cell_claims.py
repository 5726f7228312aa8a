"""Cell claims (benchmark.campaign.cell_claims): one runner per cell, claims of dead runners taken over, records never
written twice."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from benchmark.campaign import cell_claims
from benchmark.runs import store
from benchmark.campaign.cell_claims import Claims, JobQueue, read_claim


def _foreign(folder, key, heartbeat_age: float, boot_id="another-machine"):
    """A claim written by a runner on another machine, its last heartbeat ``heartbeat_age`` seconds ago."""
    d = cell_claims.claims_dir(folder)
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{key}.claim"
    p.write_text(json.dumps({"runner": "far-1-abcd", "host": "far", "boot_id": boot_id, "pid": 1, "pid_start": "1",
                             "started": time.time() - heartbeat_age}))
    t = time.time() - heartbeat_age
    os.utime(p, (t, t))
    return p


def test_a_live_claim_is_respected_and_released(tmp_path):
    with Claims(tmp_path, runner="a", ttl=30) as a, Claims(tmp_path, runner="b", ttl=30) as b:
        assert a.try_claim("c1")
        assert a.try_claim("c1")  # its own claim
        assert not b.try_claim("c1")
        claim = read_claim(cell_claims.claims_dir(tmp_path) / "c1.claim")
        assert (claim.runner, claim.pid) == ("a", os.getpid()) and claim.expired(30) is None
        a.release("c1")
        assert b.try_claim("c1")
    assert not cell_claims.claims_dir(tmp_path).exists(), "claims, temporary files and their folder are all removed"


def test_a_claim_without_heartbeat_expires_after_the_ttl(tmp_path):
    _foreign(tmp_path, "old", heartbeat_age=100)
    _foreign(tmp_path, "fresh", heartbeat_age=1)
    with Claims(tmp_path, runner="b", ttl=30) as b:
        assert not b.try_claim("fresh")  # another machine's live runner: not taken
        assert b.try_claim("old")
        assert "sent no heartbeat for 100 s" in b.taken_over[0]
    assert read_claim(cell_claims.claims_dir(tmp_path) / "fresh.claim").runner == "far-1-abcd"


def test_a_claim_of_a_dead_pid_on_this_machine_expires_at_once(tmp_path):
    code = ("import sys; from benchmark.campaign.cell_claims import Claims; c = Claims(sys.argv[1], runner='dead', ttl=3600); "
            "c.dir.mkdir(parents=True, exist_ok=True); assert c.try_claim('c1')")  # exits holding it (no release)
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env={**os.environ, "PYTHONPATH": "."})
    claim = read_claim(cell_claims.claims_dir(tmp_path) / "c1.claim")
    assert claim.runner == "dead" and "is gone" in claim.expired(3600)
    with Claims(tmp_path, runner="b", ttl=3600) as b:
        assert b.try_claim("c1")


def test_heartbeat_keeps_a_claim_fresh(tmp_path):
    with Claims(tmp_path, runner="a", ttl=0.4) as a:
        assert a.try_claim("c1")
        p = cell_claims.claims_dir(tmp_path) / "c1.claim"
        first = p.stat().st_mtime
        time.sleep(1.0)
        assert p.stat().st_mtime > first
        assert time.time() - p.stat().st_mtime < 0.4


def test_only_one_runner_takes_over_an_expired_claim(tmp_path):
    _foreign(tmp_path, "c1", heartbeat_age=100)
    won, start = [], threading.Barrier(8)
    claims = [Claims(tmp_path, runner=f"r{i}", ttl=30) for i in range(8)]

    def go(c):
        start.wait()
        if c.try_claim("c1"):
            won.append(c.runner)

    threads = [threading.Thread(target=go, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1, won
    assert read_claim(cell_claims.claims_dir(tmp_path) / "c1.claim").runner == won[0]


def test_a_frozen_runner_loses_its_claim_and_gives_it_up(tmp_path):
    with Claims(tmp_path, runner="a", ttl=30) as a:
        assert a.try_claim("c1")
        _foreign(tmp_path, "c1", heartbeat_age=0)  # another runner took it over meanwhile
        a.heartbeat()
        assert "c1" in a.lost and "c1" not in a.held
        a.release("c1")  # never removes another runner's claim
        assert read_claim(cell_claims.claims_dir(tmp_path) / "c1.claim").runner == "far-1-abcd"


class _Exp:
    def __init__(self, h):
        self.h = h

    def config_hash(self):
        return self.h


class _Job:
    def __init__(self, *hs):
        self.experiments = tuple(_Exp(h) for h in hs)

    def __len__(self):
        return len(self.experiments)


def test_queue_hands_out_only_the_cells_it_claims(tmp_path):
    settled = set()
    with Claims(tmp_path, runner="a", ttl=30) as a, Claims(tmp_path, runner="b", ttl=30) as b:
        assert b.try_claim("y")
        q = JobQueue([_Job("x", "y", "z"), _Job("w")], a, settled.__contains__, lambda job, pos: [job, pos], poll=0.05)
        first = q.take()
        job, pos = first
        assert pos == [0, 2]  # y is b's
        nxt = q.take(block=False)
        assert [e.config_hash() for e in nxt[0].experiments] == ["w"]
        assert q.take(block=False) is None  # y: held by a live runner
        b.release("y")
        settled.add("y")  # b wrote its record
        assert q.take(block=True) is None  # every cell settled or handed out
        assert a.held == {"x", "z", "w"}
        q.release(first)
        assert a.held == {"w"}


def test_finished_records_are_never_replaced(tmp_path):
    ok = {"config_hash": "abc", "status": "ok", "config": {}, "history": [], "final": {"n": 1}}
    assert store.write_record(tmp_path, ok, keep_finished=True) == tmp_path / "abc.json"
    assert store.write_record(tmp_path, {**ok, "final": {"n": 2}}, keep_finished=True) is None
    assert store.load_record(tmp_path / "abc.json")["final"] == {"n": 1}
    failed = {"config_hash": "def", "status": "failed", "config": {}, "history": [], "final": {}}
    store.write_record(tmp_path, failed)
    assert store.write_record(tmp_path, {**failed, "status": "ok"}, keep_finished=True) is not None  # a retry
    assert store.load_record(tmp_path / "def.json")["status"] == "ok"
    assert not list(tmp_path.glob(".*.tmp"))
