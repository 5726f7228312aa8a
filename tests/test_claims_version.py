"""``fedrepro claims --version V``: an earlier claims version's archived records judged again by this code (with
--no-run) into ``claims/V``, never run or resumed by it (their runs were made by V's code); what the paper pages
give a fresh clone when the claims they show are an earlier version's (``theory.paper_suites.gpu_section``)."""
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from benchmark import cli
from benchmark.runs import store
from theory.empirical import PROTOCOL, PROTOCOL_VERSIONS, PROTOCOLS, archive, declaration, gradma, paths
from theory.empirical.run import run_claims
from theory.paper_suites import gpu_section

COMMITTED = Path(__file__).resolve().parents[1] / "results"
EARLIER = "0.4.0"  # the claims version whose records are archived in the repository
FEDSWA_EARLIER = "0.5.0"  # the last version that ran FedSWA's 0.4.0 declarations (its records archived too)


def _newest_committed_before(version: str) -> str:
    key = lambda v: tuple(int(x) for x in v.split("."))  # noqa: E731
    return max((p.name for p in (COMMITTED / "claims").iterdir() if (p / "report.json").is_file()
                and key(p.name) < key(version)), key=key)


def _earlier_root(tmp_path) -> Path:
    root = tmp_path / "results"
    (root / "claims" / EARLIER).mkdir(parents=True)
    shutil.copy(COMMITTED / "claims" / EARLIER / "report.json", root / "claims" / EARLIER / "report.json")
    archive.restore(root, EARLIER, archive.archives(COMMITTED, EARLIER))
    return root


def _summaries(report: dict, paper: str) -> dict:
    return {(c["id"], c.get("scale")): c for c in report["claims"] if c["id"].startswith(paper + ".")}


def _judged_again_as_committed(root: Path, version: str, paper: str, claims: int) -> None:
    """``fedrepro claims --version V --paper P --no-run`` on V's records under ``root``: P's summaries equal the
    committed V report's (``claims`` of them), judged under the protocol V ran."""
    argv = ["claims", "--version", version, "--paper", paper, "--no-run", "--no-progress", "--results", str(root)]
    assert cli.main(argv) == 0
    got = json.loads((root / "claims" / version / "partial" / paper / "report.json").read_text())
    want = json.loads((COMMITTED / "claims" / version / "report.json").read_text())
    assert _summaries(got, paper) == _summaries(want, paper) and len(_summaries(want, paper)) == claims
    assert got["meta"]["protocol"] == PROTOCOLS[version]


def _never_run_under_this_protocol(runs: Path, moved: Path, sub: str, paper: str, planned: str) -> None:
    """The same records moved into this version's folder read as cells never run under this protocol."""
    shutil.copytree(runs, moved / "claims" / paths.version() / sub)
    assert cli.main(["claims", "--paper", paper, "--no-run", "--no-progress", "--results", str(moved)]) == 0
    mine = json.loads((moved / "claims" / paths.version() / "partial" / paper / "report.json").read_text())
    assert not mine["claims"] and mine["papers"][0]["under_way"].startswith(f"tuning: not started, 0 of {planned}")


@pytest.fixture
def earlier(tmp_path):
    if paths.version() == EARLIER or not archive.archives(COMMITTED, EARLIER):
        pytest.skip(f"this code is claims {EARLIER}, or its records are not archived here")
    return _earlier_root(tmp_path)


def test_an_earlier_versions_records_judged_again_give_its_verdicts(earlier, capsys):
    """LFL's 0.4.0 first stage judged again by this code from the archived records: every claim's summary (verdict,
    seeds, intervals, per-comparison numbers) equal to the committed report's; the report says who ran and who
    judged. Then a planted defect: one final run's accuracy curve halved (the record resealed, so it reads as a
    good record) changes the judged numbers, so the equality above is not one that any records would give."""
    argv = ["claims", "--version", EARLIER, "--paper", "lfl", "--no-run", "--no-progress", "--results", str(earlier)]
    assert cli.main(argv) == 0
    out = earlier / "claims" / EARLIER / "partial" / "lfl"
    got = json.loads((out / "report.json").read_text())
    want = json.loads((COMMITTED / "claims" / EARLIER / "report.json").read_text())
    assert _summaries(got, "lfl") == _summaries(want, "lfl") and len(_summaries(want, "lfl")) == 3
    assert got["meta"]["judged_again"] == EARLIER
    head = (out / "report.md").read_text().splitlines()
    assert head[0] == f"# Empirical claims report ({EARLIER}, judged again by {paths.version()})"
    assert f"judged again the records of version {EARLIER}" in head[2]
    assert not list((earlier / "claims").glob(f"{paths.version()}*"))  # nothing written under this version

    victim = next(p for p in (earlier / "claims" / EARLIER / "runs").glob("*.json")
                  if (r := json.loads(p.read_text()))["config"]["algorithm"] == "lfl" and r["config"]["seed"] == 0)
    rec = json.loads(victim.read_text())
    for h in rec["history"]:
        if h.get("test_accuracy") is not None:
            h["test_accuracy"] *= 0.5
    victim.write_text(json.dumps(store.seal(rec)))
    capsys.readouterr()
    assert cli.main(argv) == 0
    planted = _summaries(json.loads((out / "report.json").read_text()), "lfl")
    assert planted != _summaries(want, "lfl")


def test_an_earlier_version_is_never_run_by_this_code(earlier, capsys):
    """Without --no-run (a run would add this code's records to the earlier version's folder), with --dry-run,
    --quick or --tuning-noise: refused before anything runs, naming the commit that ran them."""
    base = ["claims", "--version", EARLIER, "--paper", "lfl", "--results", str(earlier)]
    commit = json.loads((COMMITTED / "claims" / EARLIER / "report.json").read_text())["code_version"]["git_commit"]
    for extra in ([], ["--dry-run"], ["--quick", "--no-run"], ["--tuning-noise", "5000"]):
        before = sorted(p.name for p in (earlier / "claims" / EARLIER).rglob("*"))
        assert cli.main(base + extra) != 0
        err = capsys.readouterr().err
        assert f"git checkout {commit[:12]}" in err and "--no-run" in err, err
        assert sorted(p.name for p in (earlier / "claims" / EARLIER).rglob("*")) == before
    with paths.judging(EARLIER), pytest.raises(ValueError, match="only judges them again: add --no-run"):
        run_claims("lfl", "cpu", str(earlier), run_missing=True, progress=False)


def test_an_unknown_version_is_named_with_the_versions_there(tmp_path, capsys):
    assert cli.main(["claims", "--version", "9.9.9", "--no-run", "--results", str(tmp_path / "none")]) != 0
    err = capsys.readouterr().err
    assert "no claims version '9.9.9'" in err and EARLIER in err and paths.version() in err


def test_judging_names_the_folder_only_inside_it():
    own = paths.version()
    with paths.judging(EARLIER):
        assert paths.version() == EARLIER and paths.judged_version() == EARLIER
        assert paths.runs_folder("r", None, "cpu") == Path("r") / "claims" / EARLIER / "runs"
    with paths.judging(own):  # this code's own version: no change
        assert paths.judged_version() is None
    assert paths.version() == own and paths.judged_version() is None


def test_a_page_gives_an_earlier_versions_commands_for_its_records():
    """A page showing an earlier claims version points at --version for its records and at that version's commit
    for resuming them, and runs this version's cells anew; a page of this version keeps the plain commands."""
    own = paths.version()
    earlier = "\n".join(gpu_section("lfl", (EARLIER, "0f349189eee066b8")))
    assert f"fedrepro claims --version {EARLIER} --paper lfl --publish --no-run" in earlier
    assert f"fedrepro claims --version {EARLIER} --scale replication --paper lfl --publish --no-run" in earlier
    assert "git checkout 0f349189eee0 && fedrepro claims --paper lfl --publish" in earlier
    assert f"# claims {own}: every cell under this code" in earlier
    same = "\n".join(gpu_section("lfl", (own, None)))
    assert "--version" not in same and "fedrepro claims --paper lfl --publish --no-run" in same


def test_an_earlier_report_re_rendered_keeps_its_version_and_verdicts(tmp_path, capsys):
    """--rerender --version: the earlier report rewritten by this code from its report.json keeps its title (the
    version that judged it, not the renderer's) and every line but the provenance."""
    if paths.version() == EARLIER:
        pytest.skip(f"this code is claims {EARLIER}")
    root = tmp_path / "results"
    (root / "claims" / EARLIER).mkdir(parents=True)
    shutil.copy(COMMITTED / "claims" / EARLIER / "report.json", root / "claims" / EARLIER / "report.json")
    assert cli.main(["claims", "--version", EARLIER, "--rerender", "--results", str(root)]) == 0
    new = (root / "claims" / EARLIER / "report.md").read_text().splitlines()
    old = (COMMITTED / "claims" / EARLIER / "report.md").read_text().splitlines()
    assert new[0] == old[0] == f"# Empirical claims report ({EARLIER})"
    assert [i for i, (a, b) in enumerate(zip(new, old)) if a != b] == [2] and len(new) == len(old)
    assert "re-rendered this report from its report.json" in new[2]


def test_this_versions_empty_folder_points_at_the_earlier_verdicts(tmp_path, capsys):
    """--no-run where this version has no records: listed as under way, and the command that judges the newest
    earlier report's records again is named."""
    if paths.version() == EARLIER:
        pytest.skip(f"this code is claims {EARLIER}")
    assert cli.main(["claims", "--paper", "lfl", "--no-run", "--no-progress", "--results", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "under way, not judged" in err
    newest = _newest_committed_before(paths.version())
    assert f"`fedrepro claims --version {newest} --no-run --publish --paper lfl` judges its records again" in err


def test_this_version_declares_its_protocol_and_another_protocols_records_are_refused(tmp_path, capsys):
    """A version bump says whether it keeps the declared protocol (PROTOCOL_VERSIONS lists it); a version of
    another protocol (0.3.0 tuned on one seed, so its records lack 0.4.0's tuning cells) is refused for --no-run,
    which would list its finished cells as never run, and still re-rendered."""
    assert paths.version() in PROTOCOL_VERSIONS and EARLIER in PROTOCOL_VERSIONS and "0.3.0" not in PROTOCOL_VERSIONS
    assert cli.main(["claims", "--version", "0.3.0", "--paper", "lfl", "--no-run", "--results", str(tmp_path)]) != 0
    err = capsys.readouterr().err
    assert "claims 0.3.0 ran another protocol than this code declares (" in err
    assert f"{paths.version()}: protocol {PROTOCOL}" in err and PROTOCOLS[paths.version()] == PROTOCOL
    root = tmp_path / "results"
    (root / "claims" / "0.3.0").mkdir(parents=True)
    shutil.copy(COMMITTED / "claims" / "0.3.0" / "report.json", root / "claims" / "0.3.0" / "report.json")
    assert cli.main(["claims", "--version", "0.3.0", "--rerender", "--results", str(root)]) == 0
    assert (root / "claims" / "0.3.0" / "report.md").read_text().startswith("# Empirical claims report (0.3.0)")


def test_gradma_0_5_0_is_a_new_study_and_0_4_0_is_judged_under_its_own_declarations(earlier):
    """Protocol 0.5.0 runs GradMA's claims as a new study (looks 5, 10, 20, 40 on final and tuning seeds that no
    0.4.0 cell used; theory/empirical/gradma.py), while 0.4.0's records are judged again under the declarations they
    were run with (gradma.EARLIER): every GradMA claim's summary equal to the committed 0.4.0 report's. Judged under
    this protocol's declarations instead, the same records are cells never run (under way, nothing judged)."""
    with paths.judging(EARLIER):
        old = declaration(gradma, "CPU")
        assert declaration(gradma, "BUDGET").looks == (5, 10, 20) and old.max_seeds == 20 and old.seed_start == 0
    new = declaration(gradma, "CPU")
    assert new is gradma.PAPER_SCALE and declaration(gradma, "BUDGET").looks == (5, 10, 20, 40)
    assert set(range(new.seed_start, new.seed_start + 40)).isdisjoint(range(old.seed_start, old.seed_start + 20))
    assert set(new.tune_seeds).isdisjoint(old.tune_seeds) and len(new.tune_seeds) == 3
    assert dataclasses.replace(new, why=old.why, grid_rule=old.grid_rule, tune_seeds=old.tune_seeds, seed_start=0,
                               final_seeds=old.final_seeds, max_seeds=20, reductions=old.reductions) == old

    _judged_again_as_committed(earlier, EARLIER, "gradma", 8)
    _never_run_under_this_protocol(earlier / "claims" / EARLIER / "paper" / "runs", earlier.parent / "as-this-protocol",
                                   "paper/runs", "gradma", "180")


def test_fedswa_0_5_1_is_a_new_study_and_0_5_0_is_judged_under_its_own_declarations(tmp_path):
    """Protocol 0.5.1 runs FedSWA's claims as a new study (looks 5, 10, 20, 40 at the cpu scale and 5, 10 at 4x, on
    final and tuning seeds that no earlier version used; theory/empirical/fedswa.py), while 0.5.0's records (run under
    0.4.0's declarations) are judged again under them (fedswa.EARLIER): every FedSWA claim's summary equal to the
    committed 0.5.0 report's. Judged under this protocol's declarations instead, they are cells never run."""
    from theory.empirical import fedswa

    if paths.version() == FEDSWA_EARLIER or not archive.archives(COMMITTED, FEDSWA_EARLIER):
        pytest.skip(f"this code is claims {FEDSWA_EARLIER}, or its records are not archived here")
    with paths.judging(FEDSWA_EARLIER):
        old = declaration(fedswa, "SCALES", None)
        assert declaration(fedswa, "BUDGET").looks == (5, 10) and [s.max_seeds for s in old] == [10, 5]
    new = declaration(fedswa, "SCALES", None)
    assert new == (fedswa.CPU, fedswa.CPU4X) and declaration(fedswa, "BUDGET").looks == (5, 10, 20, 40)
    assert [s.max_seeds for s in new] == [40, 10]
    for o, n in zip(old, new):
        assert set(range(n.seed_start, n.seed_start + n.max_seeds)).isdisjoint(range(o.seed_start, o.seed_start +
                                                                                      o.max_seeds))
        assert set(n.tune_seeds).isdisjoint(o.tune_seeds) and len(n.tune_seeds) == 3
        assert dataclasses.replace(n, why=o.why, grid_rule=o.grid_rule, tune_seeds=o.tune_seeds, seed_start=0,
                                   final_seeds=o.final_seeds, max_seeds=o.max_seeds, reductions=o.reductions) == o

    root = tmp_path / "results"
    (root / "claims" / FEDSWA_EARLIER).mkdir(parents=True)
    archive.restore(root, FEDSWA_EARLIER, archive.archives(COMMITTED, FEDSWA_EARLIER))
    _judged_again_as_committed(root, FEDSWA_EARLIER, "fedswa", 4)
    _never_run_under_this_protocol(root / "claims" / FEDSWA_EARLIER / "runs", tmp_path / "as-this-protocol", "runs",
                                   "fedswa", "")


def test_a_new_study_restates_its_tuning_seeds_in_the_grid_rule():
    """``scale.new_study`` names the new tuning seeds where the rule named the old ones, and refuses a rule that does
    not name them (it would state the wrong seeds)."""
    from theory.empirical import fedswa
    from theory.empirical.scale import new_study

    with paths.judging(FEDSWA_EARLIER):
        old = declaration(fedswa, "CPU")
    assert "1000, 1001, 1002" in old.grid_rule and "5000, 5001, 5002" not in old.grid_rule
    assert fedswa.CPU.grid_rule == old.grid_rule.replace("1000, 1001, 1002", "5000, 5001, 5002")
    with pytest.raises(ValueError, match="does not name its tuning seeds"):
        new_study(dataclasses.replace(old, grid_rule="every arm's lr"), 500, (5000, 5001, 5002), (5, 10), why="")
