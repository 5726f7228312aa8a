"""The report's plots cannot mislead: a method keeps one style in every panel, figure and report (keyed by its
name), every method drawn is in its figure's legend, also when a panel lacks a method (a diverged run) and when a
suite has many methods (no panel draws more than 8); titles name the data, model and seeds, a band shows the
range over seeds and the legend says so, the panels of a figure share their y range, and the bits axis says what
it sums."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.figure  # noqa: E402
import pytest  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
from benchmark.reports import leaderboard as report, plots as report_plots, style as report_style  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    """``curve_figures`` returns open figures (``plot_curves`` saves and closes them); the tests close theirs."""
    yield
    plt.close("all")


def _rec(alg, partition, seed=0, status="ok", rounds=6, bits=1000, level=0.5):
    hist = [{"round": t, "bits_up": bits, "test_accuracy": min(0.99, level + 0.05 * t)} for t in range(1, rounds + 1)]
    return {"config": {"algorithm": alg, "algorithm_args": {}, "dataset": "digits", "partition": partition,
                       "num_clients": 10, "seed": seed, "model": "logreg"},
            "config_hash": f"{alg}-{partition}-{seed}", "status": status,
            "history": hist if status == "ok" else hist[:2], "final": {"test_accuracy": hist[-1]["test_accuracy"]}}


def _records():
    # the first panel (dirichlet:0.3, first in the panels' order) lacks fedprox: its run diverged
    recs = [_rec(a, p) for a in ("fedavg", "fedprox", "scaffold") for p in ("iid", "dirichlet:0.3")]
    return [r if (r["config"]["algorithm"], r["config"]["partition"]) != ("fedprox", "dirichlet:0.3")
            else {**r, "status": "diverged"} for r in recs]


@pytest.fixture
def figures(monkeypatch):
    """Every figure a report function saves, kept open (nothing written): works on any plotting code."""
    saved = []

    def keep(fig, path, *a, **k):
        saved.append((str(path), fig))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    monkeypatch.setattr("matplotlib.pyplot.close", lambda *a, **k: None)
    return saved


def _style(artist):
    return (mcolors.to_hex(artist.get_color()), str(artist.get_linestyle()), str(artist.get_marker()))


def _lines(fig):
    return [ln for ax in fig.axes for ln in ax.get_lines() if not ln.get_label().startswith("_")]


def _legend_entries(fig):
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    return {t.get_text(): _style(h) for lg in legends for t, h in zip(lg.get_texts(), lg.legend_handles)}


def check_styles_and_legends(saved):
    """One style per method across every figure; each figure's legend lists every method it draws, in its style."""
    assert saved
    style_of = {}
    for path, fig in saved:
        for ln in _lines(fig):
            m = ln.get_label()
            assert style_of.setdefault(m, _style(ln)) == _style(ln), f"{m} changes style in {path}"
    for path, fig in saved:
        entries = _legend_entries(fig)
        for ln in _lines(fig):
            m = ln.get_label()
            assert m in entries, f"{m} is drawn in {path} but not in its legend {sorted(entries)}"
            assert entries[m] == _style(ln), f"{m}'s legend entry in {path} is not drawn in its style"
    assert len(set(style_of.values())) == len(style_of), f"two methods share a style: {style_of}"
    for path, fig in saved:  # and every legend lies inside the figure: a saved PNG cuts off what is outside
        fig.canvas.draw()
        box = fig.bbox
        for lg in list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]:
            ext = lg.get_window_extent()
            assert ext.x0 >= box.x0 - 1 and ext.x1 <= box.x1 + 1 and ext.y0 >= box.y0 - 1 and ext.y1 <= box.y1 + 1, (
                f"a legend of {path} reaches outside the figure: {ext} vs {box}")
    return style_of


def test_a_method_keeps_its_style_and_its_legend_entry_when_a_panel_lacks_it(tmp_path, figures):
    report_plots.plot_curves(_records(), tmp_path)
    styles = check_styles_and_legends(figures)
    assert set(styles) == {"fedavg", "fedprox", "scaffold"}


def test_the_panel_says_which_method_it_lacks_and_why():
    figs = report_plots.curve_figures(_records())
    ax = figs["accuracy_vs_rounds.png"].axes[0]
    assert ax.get_title() == "dirichlet:0.3"
    assert any("fedprox (diverged)" in t.get_text() for t in ax.texts)


def test_a_method_has_one_style_in_every_report_keyed_by_its_name_alone():
    a = report_style.method_styles(["scaffold", "fedavg", "fedprox"])
    b = report_style.method_styles(["scaffold", "bherd", "gradma", "lfl", "fedavgm", "my_plugin_alg"])
    assert a["scaffold"] == {**b["scaffold"], "slot": a["scaffold"]["slot"]}  # the same look in both reports
    assert a["fedavg"]["color"] == "black"
    # a row with arguments keeps its algorithm's colour and marker, with a broken line
    c = report_style.method_styles(["fedavgm", "fedavgm(beta1=0.5)", "fedavgm(beta1=0.1)"])
    assert len({c[m]["color"] for m in c}) == 1 and len({str(c[m]["linestyle"]) for m in c}) == 3
    # 60 names of no known algorithm still get 60 distinct looks
    many = report_style.method_styles([f"m{i:02d}" for i in range(60)])
    assert len({(s["color"], str(s["linestyle"]), s["marker"]) for s in many.values()}) == 60


def test_the_built_in_algorithms_have_distinct_looks_and_each_shipped_suite_distinct_colours():
    import tomllib

    import algorithms

    table = report_style.STYLES
    assert set(table) == set(algorithms.names()) - {"fedavg"}, "every built-in algorithm has its row in STYLES"
    assert len(set(table.values())) == len(table), "two algorithms share colour and marker"
    for path in sorted((report.committed_results().parent / "benchmark" / "suites").glob("*.toml")):
        raw = tomllib.loads(path.read_text())
        blocks = raw["matrix"] if isinstance(raw["matrix"], list) else [raw["matrix"]]
        algs = {a for b in blocks for a in b.get("algorithm", [])} - {"*"}
        colors = [report_style.method_styles(algs)[a]["color"] for a in algs]
        assert len(set(colors)) == len(colors), f"{path.name} shows one colour twice"


def test_many_methods_draw_a_selection_and_small_multiples_of_all(tmp_path, figures):
    algs = ["fedavg", "gradma", "gradma_w"] + [f"base{i:02d}" for i in range(20)]
    recs = [_rec(a, p, level=0.1 + 0.01 * i) for i, a in enumerate(algs) for p in ("iid", "dirichlet:0.3")]
    paths = report_plots.plot_curves(recs, tmp_path, paper="gradma")
    assert sorted(p.name for p in paths) == ["accuracy_vs_rounds.png", "accuracy_vs_rounds_all.png",
                                             "accuracy_vs_uplink_bits.png", "accuracy_vs_uplink_bits_all.png"]
    check_styles_and_legends(figures)
    by_name = {p.rsplit("/", 1)[-1]: f for p, f in figures}
    shown = {ln.get_label() for ln in _lines(by_name["accuracy_vs_rounds.png"])}
    # FedAvg, the paper's two methods, and the 5 best others (the highest levels): 8 lines
    assert shown == {"fedavg", "gradma", "gradma_w"} | {f"base{i:02d}" for i in range(15, 20)}
    assert "every method in accuracy_vs_rounds_all.png" in by_name["accuracy_vs_rounds.png"]._suptitle.get_text()
    every = {ln.get_label() for ln in _lines(by_name["accuracy_vs_rounds_all.png"])}
    assert every == set(algs)
    for fig in by_name.values():  # no panel draws more than 8 methods
        assert all(len({ln.get_label() for ln in ax.get_lines()}) <= 8 for ax in fig.axes)


def _seeded(seeds=(0, 1, 2), partitions=("iid", "dirichlet:0.3")):
    recs = []
    for a in ("fedavg", "scaffold"):
        for p in partitions:
            for s in seeds:
                r = _rec(a, p, seed=s, level=0.3 + 0.05 * s + (0.2 if p == "iid" else 0.0))
                r["config_hash"] += f"-{s}"
                recs.append(r)
    return recs


def test_titles_name_dataset_model_and_seeds_and_the_band_is_the_range_over_seeds():
    figs = report_plots.curve_figures(_seeded(), title="mine (0.3.0)")
    fig = figs["accuracy_vs_rounds.png"]
    title = fig._suptitle.get_text()
    assert title.startswith("mine (0.3.0): test accuracy by communication round") and "digits, logreg, 3 seeds" in title
    [legend] = fig.legends
    assert legend.get_title().get_text() == "line: mean over seeds; band: min to max over seeds"
    ax = fig.axes[0]
    bands = [c for c in ax.collections if len(c.get_paths())]
    assert len(bands) == 2, "one band per method drawn"
    lo, hi = bands[0].get_paths()[0].vertices[:, 1].min(), bands[0].get_paths()[0].vertices[:, 1].max()
    line = next(ln for ln in ax.get_lines() if ln.get_label() == "fedavg")
    assert lo < min(line.get_ydata()) and hi > max(line.get_ydata()), "the band spans the seeds around the mean"
    assert len({a.get_ylim() for a in fig.axes if a.get_lines()}) == 1, "panels of a figure share one y range"
    bits = figs["accuracy_vs_uplink_bits.png"].axes[0].get_xlabel()
    assert "uplink bits" in bits and "summed over the clients sampled each round" in bits
    one = report_plots.curve_figures(_seeded(seeds=(0,)))["accuracy_vs_rounds.png"]
    assert one.legends[0].get_title().get_text() == "one seed per method: no spread to show"
    assert not any(len(c.get_paths()) for a in one.axes for c in a.collections)


def test_a_panel_says_its_dataset_model_and_seeds_where_they_differ_between_panels():
    recs = _seeded(partitions=("iid",)) + [dict(r, config={**r["config"], "dataset": "fmnist", "model": "mlp"})
                                           for r in _seeded(seeds=(0, 1), partitions=("iid",))]
    for i, r in enumerate(recs):
        r["config_hash"] += f"-{i}"
    fig = report_plots.curve_figures(recs)["accuracy_vs_rounds.png"]
    titles = sorted(a.get_title() for a in fig.axes if a.get_lines())
    assert titles == ["digits\nlogreg, 3 seeds per method", "fmnist\nmlp, 2 seeds per method"]
    assert "2 to 3 seeds per method" in fig._suptitle.get_text()


def test_one_panel_with_seven_methods_keeps_its_legend_inside_the_figure(tmp_path, figures):
    """FedBAT's reduced suite: one column, seven methods with long names (the legend was cut off at both ends)."""
    algs = ["fedavg", "ef_signsgd", "fedbat", "noisy_signsgd", "signsgd", "stoc_signsgd", "zerofl"]
    report_plots.plot_curves([_rec(a, "fmnist", level=0.3 + 0.01 * i) for i, a in enumerate(algs)], tmp_path, paper="fedbat")
    assert set(check_styles_and_legends(figures)) == set(algs)


def test_a_panel_that_none_of_the_shown_methods_ran_in_says_so():
    """The matrix's synthetic/mlp cells run other methods than the headline's: their panels were blank. Here the
    headline shows FedAvg, GradMA, GradMA-W and the 5 best others (iid only); labelcnt:2 ran the 4 worst only."""
    recs = [_rec(a, "iid", level=0.3 + 0.01 * i) for i, a in enumerate(["fedavg", "gradma", "gradma_w"])]
    recs += [_rec(f"base{i:02d}", "iid", level=0.6) for i in range(8)]
    recs += [_rec(f"base{i:02d}", "labelcnt:2", level=0.1) for i in range(8, 12)]
    figs = report_plots.curve_figures(recs, paper="gradma")
    ax = next(a for a in figs["accuracy_vs_rounds.png"].axes if a.get_title() == "labelcnt:2")
    assert ax.get_lines() == []
    assert any("none of these 8 methods ran in this cell" in t.get_text() and "4 others did: see the _all figure"
               in t.get_text() for t in ax.texts), [t.get_text() for t in ax.texts]
    texts = [t.get_text() for a in figs["accuracy_vs_rounds_all.png"].axes for t in a.texts]  # the _all figure itself
    assert texts and not any("_all figure" in t for t in texts), texts  # never points to itself


@pytest.mark.parametrize("lo,hi", [(2.5e7, 3e8), (1e6, 1.2e7), (4e5, 9e5), (1e3, 1e9)])
def test_log_bits_axis_labels_never_overlap(lo, hi):
    """The bits axis labels the powers of ten (and on a short span the 2 and 5 multiples) without two labels
    overlapping: matplotlib's default printed 3 x 10^7 over 4 x 10^7 in the matrix's digits panels."""
    import numpy as np

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = matplotlib.figure.Figure(figsize=(15 / 3, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot(np.geomspace(lo, hi, 8), np.linspace(40, 90, 8))
    report_plots.log_x(ax)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    labels = [t for t in ax.xaxis.get_ticklabels(which="both") if t.get_visible() and t.get_text()
              and lo <= t.get_position()[0] <= hi]
    assert len(labels) >= 2, [t.get_text() for t in labels]
    boxes = sorted((t.get_window_extent(r) for t in labels), key=lambda b: b.x0)
    for a, b in zip(boxes, boxes[1:]):
        assert a.x1 < b.x0, f"tick labels overlap: {[t.get_text() for t in labels]}"


def _twin_records(offset):
    """fedavg, fednova drawn ``offset`` points above it, and scaffold well apart, in one cell of 24 rounds."""
    recs = [_rec(a, "iid", rounds=24, level=lvl) for a, lvl in (("fedavg", 0.3), ("fednova", 0.3), ("scaffold", 0.1))]
    for e in recs[1]["history"]:
        e["test_accuracy"] += offset / 100
    return recs


def test_a_curve_that_lies_on_another_is_named_and_its_markers_sit_between():
    ax = report_plots.curve_figures(_twin_records(0.0))["accuracy_vs_rounds.png"].axes[0]
    assert any("fednova lies on fedavg" in t.get_text() for t in ax.texts)
    assert not any("scaffold lies" in t.get_text() for t in ax.texts)
    marks = {ln.get_label(): ln.get_markevery() for ln in _lines(ax.figure)}
    assert marks["fedavg"][1] == marks["fednova"][1] > 1 and marks["fedavg"][0] != marks["fednova"][0]


def test_a_curve_a_visible_gap_apart_is_not_called_hidden():
    # 1 point above fedavg on a y span of about 90 points: visible, so no note (a planted tolerance of 2% would
    # call it hidden)
    ax = report_plots.curve_figures(_twin_records(1.0))["accuracy_vs_rounds.png"].axes[0]
    assert not any("lies on" in t.get_text() for t in ax.texts)
    curves = {m: {"rounds": [1, 2], "y": y} for m, y in (("fedavg", [10.0, 60.0]), ("fednova", [10.2, 60.2]))}
    assert report_plots.coinciding(curves, ["fedavg", "fednova"], "rounds") == [("fednova", "fedavg", pytest.approx(0.2))]  # under 0.5% of 50.2
    curves["fednova"]["rounds"] = [1, 3]  # same values at other rounds: not the same line
    assert report_plots.coinciding(curves, ["fedavg", "fednova"], "rounds") == []
