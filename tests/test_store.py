"""benchmark.runs.store: checksummed records, unreadable records found and moved aside, writes that never lose a run."""
import json
import os
import stat
from pathlib import Path

import pytest

from benchmark.runs import store
from tests.faults import read_only_dir_fixture  # noqa: F401 - the read_only_dir fixture


def record(h="0123456789abcdef", **kw):
    rec = {"schema": 1, "config": {"algorithm": "fedavg", "lr": 0.1}, "config_hash": h, "status": "ok",
           "history": [{"round": 1, "test_loss": 0.5, "train_loss": float("nan")}], "final": {"test_accuracy": 0.9},
           "environment": {}, "message": ""}
    rec.update(kw)
    return rec


def test_written_record_carries_its_checksum_and_reads_back(tmp_path):
    p = store.write_record(tmp_path, record())
    on_disk = json.loads(p.read_text())
    assert on_disk["checksum"].startswith("sha256:") and on_disk["checksum"] == store.checksum(on_disk)
    assert store.read_records(tmp_path) == [on_disk]
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~store._umask()  # not mkstemp's 0600


# each corruption, and the words its reason must contain
CORRUPTIONS = {
    "truncated": (lambda text: text[: len(text) // 2], "not valid JSON"),
    "empty": (lambda text: "", "not valid JSON"),
    "binary": (lambda text: "\udcff", "not"),
    "edited number": (lambda text: text.replace('"test_accuracy": 0.9', '"test_accuracy": 0.95'), "checksum"),
    "a list": (lambda text: "[1, 2]", "not a run record"),
    "no history": (lambda text: json.dumps({k: v for k, v in json.loads(text).items() if k != "history"}),
                   "no 'history'"),
    "bad status": (lambda text: json.dumps({**json.loads(text), "status": "great"}), "unknown status"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_every_kind_of_damage_is_found_named_and_skipped(tmp_path, kind):
    damage, reason = CORRUPTIONS[kind]
    good = store.write_record(tmp_path, record("aaaaaaaaaaaaaaaa"))
    bad = store.write_record(tmp_path, record("bbbbbbbbbbbbbbbb"))
    text = damage(bad.read_text())
    bad.write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.warns(store.CorruptRecordWarning) as w:
        recs = store.read_records(tmp_path)
    assert [r["config_hash"] for r in recs] == ["aaaaaaaaaaaaaaaa"]
    msg = str(w[0].message)
    assert len(w) == 1 and bad.name in msg and reason in msg and good.name not in msg
    assert bad.exists()  # a plain read (the report) touches nothing


def test_quarantine_moves_only_the_damaged_file_aside(tmp_path):
    store.write_record(tmp_path, record("aaaaaaaaaaaaaaaa"))
    bad = store.write_record(tmp_path, record("bbbbbbbbbbbbbbbb"))
    bad.write_text(bad.read_text()[:-40])
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p != bad}
    with pytest.warns(store.CorruptRecordWarning, match="moved aside, and their cells will run again"):
        recs = store.read_records(tmp_path, quarantine=True)
    assert len(recs) == 1
    moved = list(tmp_path.glob("bbbbbbbbbbbbbbbb.json.corrupt-*"))
    assert len(moved) == 1 and not bad.exists()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p not in moved} == before  # nothing else touched
    # a second damaged copy of the same name gets its own corrupt- name
    store.write_record(tmp_path, record("bbbbbbbbbbbbbbbb")).write_text("{")
    with pytest.warns(store.CorruptRecordWarning):
        store.read_records(tmp_path, quarantine=True)
    assert len(list(tmp_path.glob("bbbbbbbbbbbbbbbb.json.corrupt-*"))) == 2


def test_record_under_a_foreign_name_is_unreadable(tmp_path):
    p = store.write_record(tmp_path, record("aaaaaaaaaaaaaaaa"))
    os.replace(p, tmp_path / "cccccccccccccccc.json")
    with pytest.warns(store.CorruptRecordWarning, match="does not match the file name"):
        assert store.read_records(tmp_path) == []


def test_record_without_checksum_from_before_0_2_is_read(tmp_path):
    rec = record("aaaaaaaaaaaaaaaa")
    store.write_json_atomic(tmp_path / "aaaaaaaaaaaaaaaa.json", rec)
    assert [r["config_hash"] for r in store.read_records(tmp_path)] == ["aaaaaaaaaaaaaaaa"]


def test_check_writable_folder(tmp_path):
    assert store.check_writable_folder(tmp_path / "new" / "deep", "--out").is_dir()
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(store.StoreError, match="--out .* is not a folder"):
        store.check_writable_folder(f, "--out")
    assert f.read_text() == "x"
    assert not list(tmp_path.glob("new/deep/.*"))  # the probe file is removed


def test_read_only_folder_is_refused_before_work(read_only_dir):
    with pytest.raises(store.StoreError, match="not writable"):
        store.check_writable_folder(read_only_dir, "results folder")


def test_write_that_fails_goes_to_the_rescue_folder(read_only_dir, tmp_path, monkeypatch):
    monkeypatch.setenv(store.RESCUE_ENV, str(tmp_path / "rescue"))
    path, why = store.write_record_or_rescue(read_only_dir, record())
    assert why and path == tmp_path / "rescue" / "0123456789abcdef.json"
    assert store.read_records(path.parent)[0]["config_hash"] == "0123456789abcdef"


def test_write_never_leaves_a_partial_file(tmp_path, monkeypatch):
    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        store.write_record(tmp_path, record())
    assert list(Path(tmp_path).iterdir()) == []


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="zombies are told apart through /proc")
def test_one_liveness_rule_a_zombie_is_not_running(tmp_path):
    """``store.process_running`` is the one liveness rule (a writer's temporary files, a runner's claims, a
    worker's parent): a process that exited but was not reaped yet (a zombie) will never write again, so its
    temporary record file is stale and removed, and a claim it held is not alive. (The store used to count a
    zombie as alive, the lifeline as dead.)"""
    import subprocess
    import sys
    import time

    from benchmark.campaign import cell_claims, lifeline

    child = subprocess.Popen([sys.executable, "-c", "pass"])  # not waited for: a zombie once it exits
    try:
        deadline = time.monotonic() + 60
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(child.pid) == "Z"
        assert not store.process_running(child.pid)
        assert not cell_claims._pid_runs(child.pid, None)
        assert lifeline.process_running is store.process_running
        (tmp_path / f".rec.json.{child.pid}.abc123.tmp").write_text("{}")
        (tmp_path / f".mine.json.{os.getpid()}.abc123.tmp").write_text("{}")
        assert store.clean_stale_temps(tmp_path) == 1  # the zombie's, not this live process's
        assert [p.name for p in tmp_path.iterdir()] == [f".mine.json.{os.getpid()}.abc123.tmp"]
    finally:
        child.wait()
    assert store.process_running(os.getpid()) and not store.process_running(child.pid)
