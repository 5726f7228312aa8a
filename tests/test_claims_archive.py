"""Archived claims records (``theory.empirical.archive``): a fresh clone's ``fedrepro claims --publish`` unpacks the
records a session committed as archives, where a record is missing, and so resumes from them; nothing is unpacked
over a file, outside the version's folder, hidden, or other than a regular file."""
import io
import json
import tarfile

import pytest

from benchmark import cli
from benchmark.reports import leaderboard
from theory.empirical import archive
from theory.empirical.paths import version


def _tar(path, members: dict, links=()):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
        for name, to in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, to
            tar.addfile(info)
    return path


def test_restore_unpacks_only_what_is_missing_and_safe(tmp_path):
    """The planted unsafe members (a parent path, an absolute one, a hidden checkpoint, a link) are skipped: a plain
    ``extractall`` would write the first two outside the version's folder."""
    root = tmp_path / "results"
    arc = _tar(root / "in-progress" / "claims-9.9.9-runs.tar.gz",
               {"runs/a.json": '{"a": 1}', "paper/runs/tuning/b.json": '{"b": 2}', "../../evil.txt": "x",
                "/tmp/fedrepro-evil-absolute.txt": "x", "paper/runs/.checkpoints/c.pt": "x",
                "runs/kept.json": "archived"},
               links=[("runs/link.json", "/etc/passwd")])
    base = root / "claims" / "9.9.9"
    (base / "runs").mkdir(parents=True)
    (base / "runs" / "kept.json").write_text("written since")
    assert archive.archives(root, "9.9.9") == [arc]
    [(got, wrote, kept)] = archive.restore(root, "9.9.9")
    assert (got, wrote, kept) == (arc, 2, 1)
    assert json.loads((base / "runs" / "a.json").read_text()) == {"a": 1}
    assert (base / "paper" / "runs" / "tuning" / "b.json").stat().st_mtime == 1_700_000_000
    assert (base / "runs" / "kept.json").read_text() == "written since"  # never over a file that is there
    assert not (tmp_path / "evil.txt").exists() and not (root / "evil.txt").exists()
    assert not (base / "paper" / "runs" / ".checkpoints").exists() and not (base / "runs" / "link.json").exists()
    assert not any(p.name.endswith(".tmp") for p in base.rglob("*"))
    assert archive.restore(root, "9.9.9") == [(arc, 0, 3)]  # a second restore writes nothing


def test_final_archives_come_first_and_other_versions_are_left(tmp_path):
    root = tmp_path / "results"
    late = _tar(root / "in-progress" / "claims-9.9.9-runs.tar.gz", {"runs/a.json": "in progress"})
    final = _tar(root / "claims" / "9.9.9" / "records.tar.gz", {"runs/a.json": "final"})
    _tar(root / "in-progress" / "claims-9.9.10-runs.tar.gz", {"runs/a.json": "another version"})
    assert archive.archives(root, "9.9.9") == [final, late]
    assert archive.restore(root, "9.9.9") == [(final, 1, 0), (late, 0, 1)]
    assert (root / "claims" / "9.9.9" / "runs" / "a.json").read_text() == "final"


def test_a_damaged_archive_is_named(tmp_path):
    root = tmp_path / "results"
    bad = root / "in-progress" / "claims-9.9.9-runs.tar.gz"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"\x1f\x8b\x08\x00 not really gzip")
    with pytest.raises(tarfile.TarError, match="claims-9.9.9-runs.tar.gz could not be read"):
        archive.restore(root, "9.9.9")


@pytest.fixture
def committed(tmp_path, monkeypatch):
    root = tmp_path / "repo" / "results"
    root.mkdir(parents=True)
    (root / "README.md").write_text("results\n")
    monkeypatch.setattr(leaderboard, "committed_results", lambda: root)
    _tar(root / "in-progress" / f"claims-{version()}-runs.tar.gz", {"runs/tuning/zz-not-a-cell.txt": "archived"})
    return root


def test_claims_publish_restores_the_archives_first(committed, capsys):
    assert cli.main(["claims", "--dry-run", "--publish", "--paper", "fedbat"]) == 0
    assert (committed / "claims" / version() / "runs" / "tuning" / "zz-not-a-cell.txt").read_text() == "archived"
    assert "1 archived records restored from results/in-progress/claims-" in capsys.readouterr().err


def test_claims_without_publish_or_with_no_archive_unpacks_nothing(committed, tmp_path, capsys):
    assert cli.main(["claims", "--dry-run", "--publish", "--no-archive", "--paper", "fedbat"]) == 0
    assert not (committed / "claims").exists()
    other = tmp_path / "mine"
    assert cli.main(["claims", "--dry-run", "--results", str(other), "--paper", "fedbat"]) == 0
    assert not (other / "claims").exists()
    assert "which --publish resumes from" in capsys.readouterr().err
