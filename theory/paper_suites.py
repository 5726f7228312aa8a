"""The sections of a paper page (``theory.pages``) about the paper's suites: the committed leaderboards beside the
paper's numbers, and the commands that reproduce the paper's tables on a GPU and its claims on a CPU."""
from __future__ import annotations

import os
import re
from pathlib import Path

from .paper_notes import NOTES


def newest(folder: Path, holding: str | None = None) -> str | None:
    """The newest version folder name under ``folder`` (numeric order), or None; with ``holding``, the newest
    that holds that file (a version whose run is still under way has records but no report yet)."""
    names = [p.name for p in folder.glob("*") if p.is_dir() and re.fullmatch(r"\d+(\.\d+)*", p.name)
             and (holding is None or (p / holding).is_file())]
    return max(names, key=lambda v: tuple(int(x) for x in v.split("."))) if names else None


# ------------------------------------------------------------------------------------------------ leaderboards


def leaderboard_table(text: str) -> list[str]:
    """The first markdown table of a leaderboard.md."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith("|")), None)
    if start is None:
        return []
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return lines[start:end]


def link(target: Path, out: Path | None) -> str:
    """A relative link from a page written into ``out`` (default: the committed ``results/papers``) to ``target``:
    pages regenerated elsewhere (``runs/papers``, ``--out DIR``) keep links that resolve."""
    if out is None:
        return "../" + "/".join(Path(target).parts[-3:])
    return Path(os.path.relpath(Path(target).resolve(), Path(out).resolve())).as_posix()


def leaderboards_section(paper: str, results: Path, out: Path | None = None) -> list[str]:
    from benchmark.campaign import suite as campaign_suite

    md = ["## Leaderboards beside the paper's numbers", ""]
    suites = NOTES[paper]["suites"]
    for kind in ("reduced", "paper"):
        for name in suites[kind]:
            suite = campaign_suite.load_suite(name)
            v = newest(results / name, "leaderboard.md")
            if v is None:
                md += [f"- `{name}` ({suite.scale} scale, {len(suite.cells)} cells, needs {suite.requires}): no "
                       "committed leaderboard yet; the commands below produce it.", ""]
                continue
            comparable = suite.scale == "paper"
            md += [f"### `{name}` ({v})", "",
                   ("The paper's own setting: the paper's numbers are comparable." if comparable else
                    "A reduced setting: the paper's numbers, where shown, are for orientation only; a reduced run "
                    "is not expected to reach them."),
                   f"From [results/{name}/{v}/leaderboard.md]({link(results / name / v / 'leaderboard.md', out)}):",
                   ""]
            md += leaderboard_table((results / name / v / "leaderboard.md").read_text()) + [""]
    return md


# ------------------------------------------------------------------------------------------------ GPU


def gpu_section(paper: str, claims: tuple[str, str | None] | None = None) -> list[str]:
    """How to reproduce the paper's tables on a GPU and its claims on a CPU. ``claims``: the version of the claims
    report the page shows and the commit that ran it; where that is not this code's version, the commands judge
    that version's archived records again (``fedrepro claims --version``) and say which code resumes them."""
    from benchmark.campaign import suite as campaign_suite
    from benchmark.runs.record import code_version

    md = ["## Reproduce the paper's tables on a GPU", "",
          "From the repository root on a machine with a CUDA GPU and the datasets under `.data` (Fashion-MNIST "
          "ships offline; MNIST, SVHN and CIFAR need `--download` once where there is a network). Each command "
          "resumes where it stopped; `results/perf/README.md` (\"For the GPU session\") has the recipe for "
          "machines that allow 10 minutes per call.", "", "```bash", "export PYTHONPATH=.  # or pip install -e ."]
    for name in NOTES[paper]["suites"]["paper"]:
        n = len(campaign_suite.load_suite(name).cells)
        md += [f"python3 -m benchmark.cli run --suite {name} --device cuda --data-root .data --dry-run   "
               f"# {n} cells: batched jobs, estimated time",
               f"python3 -m benchmark.cli run --suite {name} --device cuda --data-root .data",
               f"python3 -m benchmark.cli report --suite {name}   # leaderboard beside the paper's numbers"]
    md += [f"python3 -m benchmark.cli claims --scale full --paper {paper} --no-run   # the claims on those cells",
           "```", ""]
    from . import empirical
    from .empirical.scale import paper_scales

    replicated = bool(paper_scales(empirical.paper(paper), "replication"))
    own = code_version()["package"]
    shown, commit = claims or (None, None)
    if shown and shown != own:
        at = f" (commit {commit[:12]})" if commit else ""
        md += [f"On a CPU, the claims at the scales above. The verdicts on this page are claims {shown}'s: its run "
               f"records, archived in the repository, were run by that version's code{at}. This code is version "
               f"{own}, whose runs differ from {shown}'s (the README's changelog says how), so it judges {shown}'s "
               f"records again (`--version {shown} --no-run`; with `--publish` they are restored first, "
               "`theory/empirical/archive.py`) but runs and resumes only its own version's cells:",
               "", "```bash",
               f"fedrepro claims --version {shown} --paper {paper} --publish --no-run   # claims {shown}'s verdicts "
               "again from its archived records (under a minute; nothing runs)"]
        if replicated:
            md += [f"fedrepro claims --version {shown} --scale replication --paper {paper} --publish --no-run   # "
                   "its replication's, likewise"]
        md += [f"fedrepro claims --paper {paper} --publish   # claims {own}: every cell under this code (see the plan "
               "above), resumable",
               f"fedrepro claims --quick --paper {paper}     # a smoke test in seconds, not a verdict"]
        if commit:
            md += [f"git checkout {commit[:12]} && fedrepro claims --paper {paper} --publish   # {shown}'s own code: "
                   "resumes from its records (git checkout - to come back)"]
    else:
        md += ["On a CPU, the claims at the scales above. With `--publish` the repository's archived run records "
               "of this version are restored first (`theory/empirical/archive.py`), so a fresh clone judges them "
               "again or resumes from them; without it every cell runs anew under `./runs`:", "", "```bash",
               f"fedrepro claims --paper {paper} --publish --no-run   # the verdicts again from the archived records "
               "(seconds; nothing runs)",
               f"fedrepro claims --paper {paper} --publish            # resume: only the cells without a record run",
               f"fedrepro claims --paper {paper}                      # every cell anew (see the plan above)",
               f"fedrepro claims --quick --paper {paper}              # a smoke test in seconds, not a verdict"]
        if replicated:
            md += [f"fedrepro claims --scale replication --paper {paper} --publish   # the undecided claims on fresh "
                   "seeds (resumes too)"]
    md += [f"fedrepro report --paper {paper} --publish  # regenerate this page", "```", ""]
    return md
