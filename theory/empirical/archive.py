"""A claims version's archived run records: what a fresh clone resumes from instead of running them again.

Run records are git-ignored (thousands of files), so a session that stops before a version's runs finish, and a
finished report, commit them as compressed archives whose members are relative to ``results/claims/<version>``
(``runs/...``, ``<scale>/runs/...``, their ``tuning/`` selections): ``results/in-progress/claims-<version>-*.tar.gz``
while the runs are under way (``results/in-progress/README.md``), ``results/claims/<version>/records*.tar.gz`` once
the report is final. :func:`restore` unpacks what a results root lacks; ``fedrepro claims --publish`` calls it before
it plans or runs, so the command a paper page gives resumes from the archived records on a fresh clone.

A record names its configuration hash and the commit that made it, and the runner reuses a record only when the
hash matches in this version's folder (``benchmark.runs.store``), so an archived record is used exactly where the
runner would have used the file it was packed from. Only regular files are unpacked, never over a file that is
there (a record written since stays), never a hidden path (a runner's cell claims, checkpoints) and never a path
that leaves the version's folder.
"""
from __future__ import annotations

import os
import tarfile
from pathlib import Path, PurePosixPath

IN_PROGRESS = "in-progress"


def archives(results_root, version: str) -> list[Path]:
    """The archives of ``version``'s records under ``results_root``, in the order they are unpacked: the final
    ones (``claims/<version>/records*.tar.gz``), then those of runs under way (``in-progress/claims-<version>-*``)."""
    root = Path(results_root)
    final = sorted((root / "claims" / version).glob("records*.tar.gz"))
    return final + sorted((root / IN_PROGRESS).glob(f"claims-{version}-*.tar.gz"))


def _target(name: str, base: Path) -> Path | None:
    """Where member ``name`` goes under ``base``, or None for a path that is absolute, leaves ``base`` or is hidden."""
    parts = PurePosixPath(name).parts
    if not parts or PurePosixPath(name).is_absolute() or any(p in ("..", "") or p.startswith(".") for p in parts):
        return None
    return base.joinpath(*parts)


def restore(results_root, version: str, archive_files=None) -> list[tuple[Path, int, int]]:
    """Unpack into ``<results_root>/claims/<version>`` every archived record that is not there yet; per archive
    (``archive_files``, default :func:`archives` of the same root): (archive, files written, files already
    there). A damaged archive raises ``tarfile.TarError`` naming it, after what it had written stays."""
    base = Path(results_root) / "claims" / version
    out = []
    for arc in (archives(results_root, version) if archive_files is None else archive_files):
        wrote = kept = 0
        try:
            with tarfile.open(arc, "r:gz") as tar:
                for m in tar:
                    target = _target(m.name, base) if m.isfile() else None
                    if target is None:
                        continue
                    if target.exists():
                        kept += 1
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
                    try:
                        with tar.extractfile(m) as src, open(tmp, "wb") as dst:
                            dst.write(src.read())
                        os.utime(tmp, (m.mtime, m.mtime))
                        os.replace(tmp, target)
                    finally:
                        tmp.unlink(missing_ok=True)
                    wrote += 1
        except (tarfile.TarError, EOFError, OSError) as e:
            raise tarfile.TarError(f"the archive {arc} could not be read ({type(e).__name__}: {e}); the records "
                                   f"it held were not restored: restore it from git (git checkout -- {arc}) or "
                                   "run the cells again") from e
        out.append((Path(arc), wrote, kept))
    return out
