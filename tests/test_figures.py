"""The reports' figures: PNG and SVG bytes, byte-identical reruns, every method named.

The figures are drawn from the committed report JSON (``benchmarks/results/``), the same
dicts the experiments pass to them, so no experiment is rerun here. Legends and labels
are checked through matplotlib's artists (:func:`draw_*` return the Figure), not pixels.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from experiments.bopo import report as bopo_report
from experiments.corl import report as corl_report
from experiments.corl.report import LEARNED, PLANNER, panel_rows
from experiments.lora_ppo import report as lora_ppo_report
from experiments.shared import figures
from experiments.shared.figures import Rendered
from experiments.traces import report as traces_report

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load(name: str) -> dict[str, Any]:
    path = RESULTS / f"{name}.json"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    if name.startswith("table_"):  # its learning curves are in the CSV beside it
        return lora_ppo_report.read_report(path)
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def toolbench() -> dict[str, Any]:
    return _load("table_ToolBench-v0")


@pytest.fixture(scope="module")
def corl() -> dict[str, Any]:
    return _load("corl_tiers")


@pytest.fixture(scope="module")
def bopo() -> dict[str, Any]:
    return _load("bopo")["profiles"]["appworld"]


def _frontier_result() -> dict[str, Any]:
    """A small stand-in for the GSM8K routing result (its curves are not in the JSON)."""
    share = np.linspace(0, 1, 11)
    curve = SimpleNamespace(strong_share=share, accuracy=0.6 + 0.3 * share, cost=share / 500,
                            weak_accuracy=0.6, strong_accuracy=0.9)
    cpt = {"cpt_80": {"ci": [0.5, 0.7]}}
    return {"_curves": {name: curve for name in ("learned", "random", "oracle", "cascade")},
            "oracle_point": {"strong_share": 0.3, "accuracy": 0.95},
            "metrics": {"learned": cpt, "cascade": cpt}, "weak": "weak-model",
            "strong": "strong-model", "test": 11}


def _figures(toolbench: dict, corl: dict,
             bopo: dict) -> Iterator[tuple[str, Callable[[], Rendered]]]:
    yield "pareto", lambda: lora_ppo_report.pareto_figure(toolbench)
    yield "learning_curves", lambda: lora_ppo_report.learning_curves_figure(toolbench)
    yield "corl", lambda: corl_report.corl_figure(corl)
    yield "bopo", lambda: bopo_report.pareto_figure("appworld", bopo)
    yield "trace_routing", lambda: traces_report.figure(_frontier_result())


def test_every_figure_is_png_and_svg_and_a_rerun_is_byte_identical(toolbench, corl, bopo):
    for name, draw in _figures(toolbench, corl, bopo):
        first, second = draw(), draw()
        assert first.png.startswith(PNG_MAGIC), name
        assert first.svg.startswith(b"<?xml") and b"<svg" in first.svg[:500], name
        assert b"<dc:date>" not in first.svg, name  # no date: a rerun changes nothing
        assert first.png == second.png, name
        assert first.svg == second.svg, name


def test_figure_files_name_both_formats() -> None:
    files = figures.figure_files("pareto_X", Rendered(b"png", b"svg"))
    assert files == {"pareto_X.png": b"png", "pareto_X.svg": b"svg"}


def _legend_texts(figure: Any) -> list[str]:
    legends = [axis.get_legend() for axis in figure.axes] + list(figure.legends)
    return [text.get_text() for legend in legends if legend for text in legend.get_texts()]


def _all_texts(figure: Any) -> list[str]:
    texts = [text.get_text() for text in figure.texts]
    return texts + [text.get_text() for axis in figure.axes for text in axis.texts]


def _markers(figure: Any) -> dict[str, str]:
    """Label -> marker of every labelled errorbar (one per method) in the figure."""
    return {container.get_label(): container.lines[0].get_marker()
            for axis in figure.axes for container in axis.containers
            if not container.get_label().startswith("_")}


def _styles(figure: Any) -> dict[str, tuple[str, str]]:
    """Label -> (marker, colour) of every labelled errorbar in the figure's legend panels."""
    from matplotlib.colors import to_hex

    return {container.get_label(): (container.lines[0].get_marker(),
                                    to_hex(container.lines[0].get_color()))
            for axis in figure.axes for container in axis.containers
            if not container.get_label().startswith("_")}


def _inside(figure: Any, artist: Any) -> bool:
    """Whether ``artist`` is drawn wholly inside the figure (not cut at an edge)."""
    figure.canvas.draw()
    box = artist.get_window_extent(figure.canvas.get_renderer())
    return (box.x0 >= 0 and box.y0 >= 0 and box.x1 <= figure.bbox.width
            and box.y1 <= figure.bbox.height)


def test_series_styles_never_repeat_a_pair_and_the_first_twenty_two_no_colour() -> None:
    pairs = [figures.series_style(i) for i in range(462)]
    assert len(set(pairs)) == 462
    assert len({colour for _, colour in pairs[:22]}) == 22
    assert len({mark for mark, _ in pairs[:21]}) == 21
    assert figures.series_style(462) == pairs[0]  # the cycle is exactly 462 long


@pytest.mark.parametrize("draw", ["lora", "bopo", "corl"])
def test_pareto_series_share_no_colour(draw, toolbench, bopo, corl) -> None:
    plt = figures.pyplot()
    figure = {"lora": lambda: lora_ppo_report.draw_pareto(toolbench),
              "bopo": lambda: bopo_report.draw_pareto("appworld", bopo),
              "corl": lambda: corl_report.draw_corl(corl)}[draw]()
    styles = _styles(figure)
    per_label = {}
    for label, style in styles.items():  # corl draws a method in several panels, alike
        per_label.setdefault(label.split(" [")[0], set()).add(style)
    assert all(len(seen) == 1 for seen in per_label.values())
    colours = [colour for seen in per_label.values() for _, colour in seen]
    assert len(per_label) >= 12 and len(set(colours)) == len(colours), per_label
    plt.close(figure)


def test_bopo_title_is_not_cut_at_the_left_edge(bopo) -> None:
    plt = figures.pyplot()
    figure = bopo_report.draw_pareto("appworld", bopo)
    titles = [text for text in [figure._suptitle, *(axis.title for axis in figure.axes)]
              if text is not None and text.get_text()]
    assert [t.get_text() for t in titles if t.get_text().startswith("AgenticRouting-v0 / ")]
    assert all(_inside(figure, title) for title in titles)
    plt.close(figure)


def test_the_frontier_legend_covers_neither_panel() -> None:
    plt = figures.pyplot()
    figure = traces_report.draw_frontier(_frontier_result())
    [legend] = figure.legends
    assert not any(axis.get_legend() for axis in figure.axes)
    assert "learned router" in [text.get_text() for text in legend.get_texts()]
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    box = legend.get_window_extent(renderer)
    for axis in figure.axes:
        assert not box.overlaps(axis.get_window_extent(renderer))
    assert _inside(figure, legend)
    plt.close(figure)


def test_lora_pareto_names_every_method_with_its_own_marker_and_seed_count(toolbench):
    plt = figures.pyplot()
    figure = lora_ppo_report.draw_pareto(toolbench)
    legend = _legend_texts(figure)
    for entry in toolbench["methods"].values():
        matches = [text for text in legend if text.startswith(entry["label"])]
        assert matches, entry["label"]
        if "per_seed" in entry:
            assert any(f"({entry['seeds']} seeds)" in text for text in matches), matches
    markers = _markers(figure)
    assert len(markers) == len(toolbench["methods"])
    assert len(set(markers.values())) == len(markers)  # no marker shared
    names = " ".join(_all_texts(figure))
    for name in lora_ppo_report.REFERENCE_NAMES.values():
        assert name in names  # the rule, planner and oracle lines are named
    plt.close(figure)


def test_methods_on_one_point_are_listed_together_and_drawn_apart(toolbench):
    report = copy.deepcopy(toolbench)
    same = ["greedy", "lora", "lora-ppo", "lora/random-base", "lora-ppo/random-base"]
    for key in same:  # five methods on exactly one point, as on the committed table
        report["methods"][key].update(avg_cost=0.0235, success_rate=0.605)
    plt = figures.pyplot()
    figure = lora_ppo_report.draw_pareto(report)
    labels = [lora_ppo_report._legend_label(report["methods"][k]) for k in same]
    notes = [text for text in _all_texts(figure) if "overlapping" in text]
    assert any(all(label in " ".join(note.split()) for label in labels) for note in notes)
    tagged = [text for text in _legend_texts(figure) if text.split(" [")[0] in labels]
    assert len({text.rsplit(" ", 1)[-1] for text in tagged}) == 1  # one tag, e.g. "[B]"
    xs = [float(container.lines[0].get_xdata()[0]) for container in figure.axes[0].containers
          if container.get_label().split(" [")[0] in labels]
    assert len(xs) == len(same) and len(set(xs)) == len(same)  # side by side, none hidden
    plt.close(figure)


def test_learning_curves_carry_seed_counts_and_the_three_references(toolbench):
    plt = figures.pyplot()
    figure = lora_ppo_report.draw_learning_curves(toolbench)
    legend = _legend_texts(figure)
    # Every curve row the committed report has (a row added since is drawn once it is run).
    drawn = [key for key in lora_ppo_report.CURVE_ROWS if key in toolbench["learning_curves"]]
    assert {"ppo", "lora-ppo", "lora-ppo/planner"} <= set(drawn)
    for key in drawn:
        seeds = len(toolbench["learning_curves"][key])
        assert f"{toolbench['methods'][key]['label']} ({seeds} seeds)" in legend
    for key in lora_ppo_report.REFERENCE_ROWS:
        assert f"{toolbench['methods'][key]['label']} (evaluation)" in legend
    plt.close(figure)


def test_corl_draws_a_panel_per_profile_and_tier_with_its_budget_line(corl):
    plt = figures.pyplot()
    figure = corl_report.draw_corl(corl)
    axes = [axis for axis in figure.axes if axis.get_title()]
    assert len(axes) == len(corl["results"]) * len(corl["budgets"])
    legend = _legend_texts(figure)
    seeds = len(corl["seeds"])
    for axis, (profile, tier) in zip(axes, [(p, t) for p in corl["results"]
                                            for t in corl["budgets"]], strict=True):
        assert axis.get_title().startswith(f"{profile}, {tier} tier")
        verticals = [line.get_xdata()[0] for line in axis.lines
                     if len(set(line.get_xdata())) == 1 and line.get_linestyle() == ":"]
        assert corl["budgets"][tier] in verticals
        drawn = {text for text in legend}
        for method in panel_rows(corl, profile, tier):
            assert (f"{method} ({seeds} seeds)" if method in LEARNED else method) in drawn
        assert PLANNER in panel_rows(corl, profile, tier)
    # fewer rows than the table: the panels leave out rows that neither set the rule nor lead
    assert len(legend) < len(corl["results"]["mixed"]["low"])
    plt.close(figure)


def test_bopo_draws_the_budget_line_and_every_method_with_its_own_marker(bopo):
    plt = figures.pyplot()
    figure = bopo_report.draw_pareto("appworld", bopo)
    axis = figure.axes[0]
    verticals = [line.get_xdata()[0] for line in axis.lines
                 if len(set(line.get_xdata())) == 1 and line.get_linestyle() == ":"]
    assert bopo["budget"] in verticals
    legend = _legend_texts(figure)
    for m in bopo["methods"].values():
        assert any(text.startswith(m["label"]) for text in legend), m["label"]
    markers = _markers(figure)
    assert len(set(markers.values())) == len(bopo["methods"]) == len(markers)
    assert any("per-task budget" in text for text in _all_texts(figure))
    plt.close(figure)


def test_overlap_groups_join_chains_and_leave_distant_points_alone() -> None:
    points = {"a": (1.0, 0.5), "b": (1.001, 0.501), "c": (1.002, 0.502), "far": (10.0, 0.9)}
    assert figures.overlap_groups(points, log_x=True) == [["a", "b", "c"]]
    assert figures.overlap_groups({"a": (1.0, 0.1), "b": (2.0, 0.9)}) == []
    with pytest.raises(ValueError, match="positive tolerances"):
        figures.overlap_groups(points, tolerance=(0.0, 0.1))


def test_spread_moves_only_grouped_points_and_keeps_their_success() -> None:
    points = {"a": (1.0, 0.5), "b": (1.0, 0.5), "c": (1.0, 0.5), "far": (10.0, 0.9)}
    drawn = figures.spread(points, [["a", "b", "c"]], log_x=True)
    assert drawn["far"] == points["far"]
    xs = [drawn[k][0] for k in "abc"]
    assert len(set(xs)) == 3 and all(drawn[k][1] == 0.5 for k in "abc")
    assert np.isclose(np.mean(np.log10(xs)), 0.0)  # centred on the common cost


def test_seed_label_counts_lists_and_ints() -> None:
    assert figures.seed_label("PPO", 5) == "PPO (5 seeds)"
    assert figures.seed_label("PPO", [0, 1, 2]) == "PPO (3 seeds)"
    assert figures.seed_label("PPO", 1) == "PPO (1 seed)"
    assert figures.seed_label("Rule", None) == "Rule"


def test_a_zoom_panel_magnifies_the_rows_close_to_the_best_rule(toolbench):
    keys = lora_ppo_report.zoom_keys(toolbench["methods"])
    floor = toolbench["methods"]["best-rule"]["success_rate"] - 0.05
    assert "best-rule" in keys and "random" not in keys
    assert all(toolbench["methods"][k]["success_rate"] >= floor for k in keys)
    plt = figures.pyplot()
    figure = lora_ppo_report.draw_pareto(toolbench)
    full, zoom = figure.axes
    assert {c.get_label().split(" [")[0] for c in zoom.containers} == {
        lora_ppo_report._legend_label(toolbench["methods"][k]) for k in keys}
    assert zoom.get_ylim()[1] - zoom.get_ylim()[0] < 0.5 * (full.get_ylim()[1] - full.get_ylim()[0])
    plt.close(figure)
    without_rule = {k: v for k, v in toolbench["methods"].items() if k != "best-rule"}
    assert lora_ppo_report.zoom_keys(without_rule) == []
