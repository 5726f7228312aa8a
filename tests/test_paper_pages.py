"""The paper pages (results/papers/<paper>.md, theory/pages.py): regenerated from the committed results they equal
the committed pages, they change when a verdict changes, they read a sequential claims report's keys where present,
and the README's first screen links all five.

When ``test_committed_pages_are_current`` fails, a committed result, a paper note or a scale changed after the pages
were generated: run ``fedrepro report --paper all --publish`` and commit results/papers/."""
import json
import pathlib
import shutil

import pytest

from benchmark import cli
from theory import pages

ROOT = pathlib.Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
FIRST_SCREEN = 40  # README lines a reader sees before scrolling


@pytest.mark.parametrize("paper", pages.PAPERS)
def test_committed_pages_are_current(paper):
    path = RESULTS / "papers" / f"{paper}.md"
    assert path.is_file(), f"no page {path}; run `fedrepro report --paper all --publish`"
    assert pages.page(paper, RESULTS) == path.read_text(), (
        f"{path} is stale: run `fedrepro report --paper all --publish` and commit results/papers/")


def _copy_results(tmp_path) -> pathlib.Path:
    res = tmp_path / "results"
    for kind in ("claims", "theory"):
        v = pages.newest(RESULTS / kind, "report.json")
        (res / kind / v).mkdir(parents=True)
        shutil.copy(RESULTS / kind / v / "report.json", res / kind / v / "report.json")
    return res


def test_a_changed_verdict_changes_the_page(tmp_path):
    """Planted defect: a claims report whose verdict changed gives another page, so a stale page is caught."""
    res = _copy_results(tmp_path)
    before = pages.page("fedbat", res)
    path = res / "claims" / pages.newest(res / "claims", "report.json") / "report.json"
    rep = json.loads(path.read_text())
    block = next(p for p in rep["papers"] if p["paper"] == "fedbat")
    planted = "SUPPORTED" if block["claims"][0]["verdict"] != "SUPPORTED" else "CONTRADICTED"  # a verdict it has not
    block["claims"][0]["verdict"] = planted
    path.write_text(json.dumps(rep))
    after = pages.page("fedbat", res)
    assert before != after and after.count(f"**{planted}**") > before.count(f"**{planted}**")


def test_diverged_runs_are_counted_per_arm_on_the_page():
    """The page counts each arm's diverged runs out of the seeds it was compared on, per scale, from the
    comparisons' notes (an arm in several comparisons once); without a divergence it says nothing."""
    from theory.empirical import report as erep

    comp = {"a": "x", "b": "y", "seeds": [0, 1, 2, 3], "diverged": ["x seed 1", "y seed 3"]}
    other = {"a": "x", "b": "z", "seeds": [0, 1, 2, 3, 4], "diverged": ["x seed 1", "x seed 4"]}
    claims = [{"scale": "paper", "comparisons": [comp]}, {"scale": "paper", "comparisons": [other]},
              {"scale": "cpu", "comparisons": [dict(comp, diverged=[])]}]
    (line, blank) = erep.diverged_lines(claims)
    assert blank == "" and "at the paper scale" in line
    assert "x 2 of 5 seeds (1, 4); y 1 of 4 seeds (3)" in line and "cpu" not in line
    assert erep.diverged_lines(claims[2:]) == []


def test_a_sequential_report_shows_its_seeds_and_why_it_stopped(tmp_path):
    res = _copy_results(tmp_path)
    path = res / "claims" / pages.newest(res / "claims", "report.json") / "report.json"
    rep = json.loads(path.read_text())
    c = next(p for p in rep["papers"] if p["paper"] == "gradma")["claims"][0]
    c["seeds"], c["why_stopped"] = 17, "decided at the third look (17 seeds)"
    c["closest"] = {"verdict": "SUPPORTED", "text": "SUPPORTED at p = 0.07"}
    path.write_text(json.dumps(rep))
    text = pages.page("gradma", res)
    row = next(ln for ln in text.splitlines() if ln.startswith(f"| {c['id']} |"))
    assert "| 17 |" in row and "decided at the third look" in row and "closest: SUPPORTED at p = 0.07" in row
    # a report that wrote them under 0.3.0's second names only is read the same (fields.read_claim)
    for k in ("seeds", "why_stopped", "stopped"):
        c.pop(k, None)
    c["seeds_used"], c["stop_reason"] = 16, "decided at the second look (16 seeds)"
    path.write_text(json.dumps(rep))
    row = next(ln for ln in pages.page("gradma", res).splitlines() if ln.startswith(f"| {c['id']} |"))
    assert "| 16 |" in row and "decided at the second look" in row
    # and a report without those keys (0.2.0's fixed seeds) says that its seeds were fixed
    for c in next(p for p in rep["papers"] if p["paper"] == "fedbat")["claims"]:
        for k in pages.SEED_KEYS + pages.STOP_KEYS + ("reason", "closest"):
            c.pop(k, None)
        for x in c.get("comparisons", []):
            x["n"] = 5
    path.write_text(json.dumps(rep))
    assert "a fixed 5 paired seeds" in pages.page("fedbat", res)


def test_a_version_under_way_does_not_replace_the_finished_one(tmp_path):
    """A newer version whose runs are under way (records, no report or leaderboard yet: a claims run resumed in
    pieces, a suite rerun) leaves the page on the newest finished reports instead of failing or going blank."""
    res = _copy_results(tmp_path)
    shutil.copytree(RESULTS / "fedswa_reduced", res / "fedswa_reduced")
    before = pages.page("fedswa", res)
    (res / "claims" / "99.0.0" / "runs").mkdir(parents=True)
    (res / "theory" / "99.0.0").mkdir(parents=True)
    (res / "fedswa_reduced" / "99.0.0").mkdir(parents=True)
    (res / "fedswa_reduced" / "99.0.0" / "0123456789abcdef.json").write_text("{}")
    assert pages.page("fedswa", res) == before and "99.0.0" not in before


def test_a_page_has_every_section_and_no_missing_results(tmp_path):
    text = pages.page("lfl", tmp_path / "nothing")
    for head in ("## What the paper claims", "## Empirical verdicts", "## Theory verdicts", "## What fedrepro implements",
                 "### Deviations from the paper", "### Deviations from the public code", "## Scales the claims run at",
                 "## Leaderboards beside the paper's numbers", "## Reproduce the paper's tables on a GPU"):
        assert head in text
    assert "No empirical claims report" in text and "No theory claims" in text
    with pytest.raises(ValueError, match="unknown paper"):
        pages.page("nope", RESULTS)


def test_cli_report_paper_all_writes_five_pages(tmp_path, capsys):
    res = _copy_results(tmp_path)
    assert cli.main(["report", "--paper", "all", "--results", str(res)]) == 0
    assert sorted(p.name for p in (res / "papers").glob("*.md")) == sorted(f"{p}.md" for p in pages.PAPERS)
    assert cli.main(["report", "--paper", "bherd", "--results", str(res), "--out", str(tmp_path / "one")]) == 0
    assert (tmp_path / "one" / "bherd.md").read_text() == (res / "papers" / "bherd.md").read_text()
    assert cli.main(["report", "--paper", "nope", "--results", str(res), "--out", str(tmp_path / "none")]) == 2
    assert "unknown paper" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()  # nothing written for a bad name


def test_readme_first_screen_links_the_five_pages():
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:FIRST_SCREEN])
    for p in pages.PAPERS:
        assert f"](results/papers/{p}.md)" in head, p
        assert (ROOT / "results" / "papers" / f"{p}.md").is_file()


def test_a_replication_report_reaches_the_page(tmp_path):
    """Declared and not run: the page says so and gives the command. With the paper's replication report (its
    own, then the combined one, which wins), the short answer and the verdict table show its verdicts beside the
    first stage's; a planted replication verdict changes the page."""
    res = _copy_results(tmp_path)
    v = pages.newest(res / "claims", "report.json")
    text = pages.page("lfl", res)
    assert ("Declared and not run yet: those of its claims that the first stage leaves INCONCLUSIVE (tuned again) at "
            "the cpu scale, seeds 100-119") in text
    assert "fedrepro claims --scale replication --paper lfl" in text
    rep = {"papers": [{"paper": "lfl", "scale": {"scale": "cpu-rep"},
                       "claims": [{"id": "lfl.fig1a.matches_lossless", "verdict": "CONTRADICTED", "scale": "cpu-rep",
                                   "replicates": "cpu", "seeds_used": 20, "stop_reason": "decided"}]}],
           "claims": [{"id": "lfl.fig1a.matches_lossless", "scale": "cpu-rep",
                       "key_number": "lfl vs lossless: -2.00 points"}]}
    own = res / "claims" / v / "replication" / "partial" / "lfl" / "report.json"
    own.parent.mkdir(parents=True)
    own.write_text(json.dumps(rep))
    text = pages.page("lfl", res)
    [line] = [ln for ln in text.splitlines() if ln.startswith("- *") and "(`lfl.fig1a.matches_lossless`)" in ln]
    assert "**does not hold**" in line and "does not hold at the reduced CPU scale, replicated on fresh seeds " \
        "(`cpu-rep`)" in line and "undecided (its seed budget spent) at the reduced CPU scale (`cpu`)" in line
    row = next(ln for ln in text.splitlines() if ln.startswith("| lfl.fig1a.matches_lossless | **CONTRADICTED**"))
    assert "| `cpu-rep` (reduced, fresh seeds) | 20 | decided |" in row and "-2.00 points" in row
    assert f"From `results/claims/{v}/replication/partial/lfl/report.json`" in text
    rep["papers"][0]["claims"][0]["verdict"] = "NEGLIGIBLE"
    (res / "claims" / v / "replication" / "report.json").write_text(json.dumps(rep))
    text = pages.page("lfl", res)
    assert "| lfl.fig1a.matches_lossless | **NEGLIGIBLE** |" in text
    assert f"From `results/claims/{v}/replication/report.json`" in text
    assert "Declared and not run yet" not in text


def test_the_empirical_section_names_tuning_choices_at_an_end_of_their_grid():
    pts = [{"point": {"lr": v}} for v in (0.01, 0.03, 0.1)]
    block = {"scale": {"scale": "cpu"}, "tuning": {"s / a": {"points": pts, "chosen_index": 2},
                                                   "s / b": {"points": pts, "chosen_index": 1}}}
    text = "\n".join(pages.grid_end_lines([block], "results/claims/x/tuning-noise.md"))
    assert "Tuning at the cpu scale: 1 of 2 choices are an end of their grid (s / a: lr=0.1)" in text
    assert "(`results/claims/x/tuning-noise.md` measures how stable" in text
    block["tuning"]["s / a"]["chosen_index"] = 1
    assert pages.grid_end_lines([block]) == []  # nothing at an end: no line


def test_a_claim_at_two_scales_keeps_each_scales_key_number():
    """The page's verdict table used to look key numbers up by claim id alone, so a claim run at two scales showed
    the second scale's numbers beside the first scale's verdict (FedSWA's cpu CONTRADICTED beside cpu4x's
    interval, which spans 0)."""
    def claim(scale, verdict, key):
        return {"id": "x.claim", "statement": "s", "verdict": verdict, "scale": scale, "key_number": key,
                "seeds_used": {"a vs b": 5}, "stopped": "decided", "comparisons": []}
    report = {"papers": [{"paper": "lfl", "scale": {"scale": sc}, "tuning": {}, "claims": [claim(sc, v, k)]}
                         for sc, v, k in (("cpu", "CONTRADICTED", "cpu numbers"), ("cpu4x", "NEGLIGIBLE", "4x numbers"))],
              "claims": [claim("cpu", "CONTRADICTED", "cpu numbers"), claim("cpu4x", "NEGLIGIBLE", "4x numbers")]}
    rows = [line for line in pages.empirical_section("lfl", report, "here") if line.startswith("| x.claim")]
    assert len(rows) == 2
    assert "**CONTRADICTED** | `cpu` (reduced) |" in rows[0] and rows[0].endswith("| cpu numbers |")
    assert "**NEGLIGIBLE** | `cpu4x` (reduced, 4x compute) |" in rows[1] and rows[1].endswith("| 4x numbers |")


# ------------------------------------------------------------------------------------------ the page's first answer


def _opening(text: str) -> list[str]:
    head = text[text.index("## In short"):text.index("## What the paper claims")]
    return [ln for ln in head.splitlines() if ln.startswith("- ")]


@pytest.mark.parametrize("paper", pages.PAPERS)
def test_a_page_opens_with_one_sentence_per_claim_at_its_setting_and_distance(paper):
    """One bullet per claim (its verdicts at every scale reconciled into one answer, each scale named for what it
    is, with its distance from the paper's setting) and one for the theory, then the intervals' confidence."""
    text = pages.page(paper, RESULTS)
    rep = json.loads((RESULTS / "claims" / pages.newest(RESULTS / "claims", "report.json") / "report.json").read_text())
    ids = {c["id"] for p in rep["papers"] if p["paper"] == paper for c in p["claims"]}
    lines = _opening(text)
    assert len(lines) == len(ids) + 1 and lines[-1].startswith("- Theory (")
    for cid in ids:
        [line] = [ln for ln in lines if f"(`{cid}`)" in ln]
        assert any(f"**{w}**" in line for w in ("holds", "does not hold", "undecided")) or "**mixed" in line
        assert " at the " in line and "(paper " in line, line  # a setting, and how far it is from the paper's
    assert "one-sided bound at" in text and "% confidence or more" in text


def test_verdicts_at_two_scales_are_reconciled_in_one_line():
    """FedSWA's SCAFFOLD claim: CONTRADICTED at cpu and NEGLIGIBLE at cpu4x were counted as two of four verdicts
    for three claims; now one line answers "does not hold" and names both scales, the second by what differs."""
    [line] = [ln for ln in _opening(pages.page("fedswa", RESULTS)) if "moswa_beats_scaffold" in ln]
    assert "(`cpu`)" in line and "(`cpu4x`): as above but rounds 160" in line
    # the answer is the newest committed report's verdicts at the two scales, reconciled (0.4.0: CONTRADICTED and
    # NEGLIGIBLE, "does not hold"; 0.5.0: INCONCLUSIVE at both, "undecided")
    version = pages.newest(RESULTS / "claims", "report.json")
    report = json.loads((RESULTS / "claims" / str(version) / "report.json").read_text())
    verdicts = [c["verdict"] for c in report["claims"] if c["id"] == "fedswa.table3.moswa_beats_scaffold"]
    assert len(verdicts) == 2 and f"**{pages.reconcile(verdicts)}**" in line
    assert pages.reconcile(["CONTRADICTED", "NEGLIGIBLE"]) == "does not hold"
    assert pages.reconcile(["INCONCLUSIVE", "INCONCLUSIVE"]) == "undecided"
    assert pages.reconcile(["INCONCLUSIVE", "SUPPORTED"]) == "holds"
    assert pages.reconcile(["CONTRADICTED", "SUPPORTED"]).startswith("mixed")
    assert pages.reconcile(["INCONCLUSIVE"]) == "undecided"


def test_a_claim_judged_under_two_readings_says_which_in_its_first_line():
    """Issue 49: GradMA's claims are judged as the paper states the algorithms and as the authors' code runs them
    (``<claim>.code``); the page's first lines say which reading each verdict is about, where the two sentences
    would otherwise read the same (the code note follows the statement's first sentence)."""
    from theory.empirical import paper

    claims = paper("gradma").CLAIMS
    ids = {c.id for c in claims}
    assert {c.id + ".code" for c in claims if not c.id.endswith(".code")} <= ids
    row = [("SUPPORTED", "paper", None, next(c.statement for c in claims if c.id == "gradma.table1.beats_baselines"))]
    code_row = [("CONTRADICTED", "paper", None, next(c.statement for c in claims
                                                     if c.id == "gradma.table1.beats_baselines.code"))]
    plain = pages.claim_sentence("gradma.table1.beats_baselines", row, pages.reading("gradma.table1.beats_baselines", ids))
    code = pages.claim_sentence("gradma.table1.beats_baselines.code", code_row,
                                pages.reading("gradma.table1.beats_baselines.code", ids))
    assert ", as the paper states it (`gradma.table1.beats_baselines`)" in plain and "**holds**" in plain
    assert ", as the authors' code runs it (`gradma.table1.beats_baselines.code`)" in code
    assert "**does not hold**" in code
    assert pages.reading("fedswa.table3.swa_beats_fedavg", {"fedswa.table3.swa_beats_fedavg"}) is None  # judged once


def test_a_page_states_each_claims_objection_from_its_report(tmp_path):
    """Issue 43: a page states, per claim, the strongest objection an author could raise and what the protocol does
    about it, with the deciding metric's reason, taken from the claims report that judged it (LFL's declared claims
    in a report's shape); a report that declares none (0.3.0) gets no such section."""
    from theory.empirical import paper

    claims = [dict(id=c.id, metric=c.metric, verdict="INCONCLUSIVE", statement=c.statement, comparisons=[],
                   paper_metric=c.paper_metric, metric_reason=c.metric_reason, objection=c.objection, scale="cpu")
              for c in paper("lfl").CLAIMS]
    assert all(c["objection"] for c in claims)
    md = "\n".join(pages.objection_lines([{"scale": {"scale": "cpu"}, "claims": claims}]))
    assert md.startswith("### Each test's metric, and the strongest objection to it")
    for c in claims:
        assert f"**{c['id']}** (`cpu` scale)." in md and c["objection"] in md
    assert pages.objection_lines([{"scale": {"scale": "cpu"}, "claims": [dict(c, objection="", paper_metric="",
                                                                              metric_reason="") for c in claims]}]) == []


def test_the_paper_scale_says_it_substitutes_where_it_is_named():
    text = pages.page("gradma", RESULTS)
    assert "`paper` (paper's setting, substituted)" in text  # the verdict table's scale column
    assert "### `paper`: the paper's setting with substitutions" in text
    [line] = [ln for ln in _opening(text) if "(`gradma.table1.beats_baselines`)" in ln]  # the paper's reading
    assert "Fashion-MNIST (paper MNIST)" in line


def _links(text: str) -> list[str]:
    import re

    return re.findall(r"\]\(([^)]+)\)", text)


@pytest.mark.parametrize("where", ["committed", "runs/papers", "elsewhere"])
def test_no_link_leaves_the_repository_and_regenerated_pages_keep_theirs(where, tmp_path):
    """Every link of every page is a public URL or a file of the repository that exists, wherever the pages are
    written (``runs/papers`` and any --out folder too); no page names the working notes under ../shared/."""
    folder = {"committed": RESULTS / "papers", "runs/papers": tmp_path / "runs" / "papers",
              "elsewhere": tmp_path / "a" / "b" / "c"}[where]
    paths = [folder / f"{p}.md" for p in pages.PAPERS] if where == "committed" else \
        pages.write_pages("all", RESULTS, folder)
    for path in paths:
        text = path.read_text()
        assert "../shared" not in text and "shared/papers" not in text, path
        for target in _links(text):
            if target.startswith(("https://", "http://")):
                continue
            resolved = (path.parent / target.split("#")[0]).resolve()
            assert resolved.is_file(), f"{path.name}: link {target} does not resolve ({resolved})"
            assert ROOT in resolved.parents, f"{path.name}: link {target} leaves the repository"


def test_working_notes_and_outside_paths_are_left_out():
    """Planted: a cost plan with its measurement notes, and a docstring citing the summaries beside the repository."""
    plan = ("total: 91 runs (tuning grid points + up to 10 paired seeds per arm), 290 CPU-min at one thread per run, "
            "about 2.4 h on this 2-core CPU with 2 workers (CPU time per run at one torch thread (load 8-10): 50-round "
            "runs measured)")
    assert pages.without_notes(plan) == ("total: 91 runs (tuning grid points + up to 10 paired seeds per arm), 290 "
                                         "CPU-min at one thread per run, about 2.4 h on a 2-core CPU with 2 workers")
    why = "the main claim on fresh seeds (0.3.0's records: 53 s per run; the cost plan, at the older measured costs, says 252)"
    assert pages.without_notes(why) == "the main claim on fresh seeds"
    doc = "GradMA (Luo et al., CVPR 2023). Summary: ../shared/papers/gradma.md; equations below are the paper's."
    assert pages.in_repository(doc) == "GradMA (Luo et al., CVPR 2023)."
    assert pages.in_repository("FedBAT's claims (../shared/papers/fedbat.md, Sec. 4) on FMNIST.") == \
        "FedBAT's claims on FMNIST."
    for p in pages.PAPERS:
        text = (RESULTS / "papers" / f"{p}.md").read_text()
        for note in ("load 8", "older measured costs", "records:", "this 2-core CPU"):
            assert note not in text, f"{p}.md carries a working note: {note!r}"
