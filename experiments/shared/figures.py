"""The one home of the reports' figure plumbing: rendering, markers, overlaps, references.

* :func:`pyplot`: matplotlib's pyplot on the file-only Agg backend;
* :func:`render`: a figure as PNG and SVG bytes, the same bytes on every run;
* :func:`figure_files`: a rendered figure as the ``{stem}.png`` / ``{stem}.svg`` files;
* :data:`MARKERS` and :func:`marker`: one marker per method of a figure, never shared;
* :data:`COLOURS` and :func:`series_style`: a method's marker and colour together, no
  pair shared by two methods (and no colour either, up to 20 methods);
* :func:`overlap_groups`, :func:`spread` and :func:`group_note`: methods whose markers
  would sit on one another are found, drawn side by side and listed in one label;
* :func:`seed_label` and :func:`reference_lines`: seed counts in learned rows' labels,
  and the rule / planner / oracle as labelled horizontal lines;
* :func:`movable` and :func:`place_labels`: the groups' tags and the references' names
  are put where they cover no marker, error bar or other label (at :func:`render`).

The figures are pure functions of a report's JSON-ready numbers, so a committed
``benchmarks/results/*.json`` file redraws its figure without rerunning anything.
"""

from __future__ import annotations

import io
import math
import string
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

#: Distinct matplotlib markers, filled shapes first: a figure gives each method its own.
MARKERS = ("o", "s", "D", "^", "v", "<", ">", "p", "P", "*", "X", "h", "H", "d", "8",
           "1", "2", "3", "4", "+", "x")
#: The series colours: matplotlib's tab10, then the two darkest shades of tab20b's five
#: hues (not tab20's pale twins, on which a hollow marker fades into the white), then a
#: near-black and a dark teal (the ToolBench table has 21 methods).
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf",
           "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#5254a3", "#8ca252",
           "#bd9e39", "#ad494a", "#a55194", "#1b1b1b", "#00796b")
#: A fixed salt for the ids matplotlib writes into SVG files (a random uuid otherwise).
SVG_SALT = "cost-envs"
#: Two markers overlap when both coordinates differ by less than these shares of the
#: data's span (x, y): about a marker's width on the reports' figure sizes.
OVERLAP = (0.015, 0.02)


class Rendered(NamedTuple):
    """A figure's bytes in both formats: PNG to look at, SVG to scale and edit."""

    png: bytes
    svg: bytes


def pyplot() -> Any:
    """Matplotlib's pyplot on the Agg backend (figures go to bytes, never to a window)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def render(figure: Any, dpi: int = 120) -> Rendered:
    """``figure`` as PNG and SVG bytes, then closed; a rerun writes the same bytes.

    Labels drawn by :func:`tag_points` and :func:`reference_lines` are first moved off the
    markers and error bars (:func:`place_labels`).

    SVG output carries a date and random ids unless told otherwise: the date is dropped
    (``metadata={"Date": None}``) and the ids hashed with a fixed salt (``svg.hashsalt``),
    so committed figures change only when their numbers do.
    """
    import matplotlib

    plt = pyplot()
    place_labels(figure)
    png, svg = io.BytesIO(), io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": SVG_SALT, "svg.fonttype": "path"}):
        figure.savefig(png, dpi=dpi, format="png")
        figure.savefig(svg, format="svg", metadata={"Date": None})
    plt.close(figure)
    return Rendered(png.getvalue(), svg.getvalue())


def figure_files(stem: str, rendered: Rendered) -> dict[str, bytes]:
    """The files of one figure: ``{stem}.png`` and ``{stem}.svg``."""
    return {f"{stem}.png": rendered.png, f"{stem}.svg": rendered.svg}


def marker(index: int) -> str:
    """The ``index``-th method's marker; past :data:`MARKERS` the colour must tell them apart."""
    return MARKERS[index % len(MARKERS)]


def series_style(index: int) -> tuple[str, str]:
    """The ``index``-th method's (marker, colour): no two methods of a figure share both.

    The markers cycle every 21 and the colours every 22; as 21 and 22 are coprime, the
    first 462 methods have distinct pairs, and the first 21 distinct colours as well as
    distinct markers (issue #25: a family sharing one colour, or a colour cycle of ten,
    left 18-method figures with look-alike series).
    """
    return marker(index), COLOURS[index % len(COLOURS)]


def seed_label(label: str, seeds: int | Sequence[Any] | None) -> str:
    """``label`` with its seed count, e.g. ``"PPO (5 seeds)"``; unchanged without seeds."""
    if seeds is None:
        return label
    count = seeds if isinstance(seeds, int) else len(seeds)
    return f"{label} ({count} seed{'' if count == 1 else 's'})"


def _x(value: float, log_x: bool) -> float:
    return math.log10(value) if log_x else value


def _x_span(points: Mapping[str, tuple[float, float]], log_x: bool,
            x_range: tuple[float, float] | None) -> float:
    """The x axis's width (log10 units where ``log_x``): ``x_range``, else the data's."""
    xs = [_x(x, log_x) for x, _ in points.values()]
    low, high = (min(xs), max(xs)) if x_range is None else (_x(x_range[0], log_x),
                                                            _x(x_range[1], log_x))
    return (high - low) or 1.0


def _unit(points: Mapping[str, tuple[float, float]], log_x: bool,
          x_range: tuple[float, float] | None) -> dict[str, tuple[float, float]]:
    """Points scaled to shares of the axes' spans (x in log10 where ``log_x``)."""
    x_span = _x_span(points, log_x, x_range)
    ys = {k: y for k, (_, y) in points.items()}
    y_span = (max(ys.values()) - min(ys.values())) or 1.0
    return {k: (_x(x, log_x) / x_span, ys[k] / y_span) for k, (x, _) in points.items()}


def overlap_groups(points: Mapping[str, tuple[float, float]], log_x: bool = False,
                   tolerance: tuple[float, float] = OVERLAP,
                   x_range: tuple[float, float] | None = None) -> list[list[str]]:
    """Keys whose markers would sit on one another (groups of two or more, input order).

    Two points overlap when both coordinates differ by less than ``tolerance`` of the
    axes' spans (x: ``x_range`` when the axis will show more than the data, such as a
    budget line; y: the data's); a group is closed under overlap (single linkage), so a
    chain of near-identical results stays one group.

    Raises:
        ValueError: A tolerance that is not positive.
    """
    if min(tolerance) <= 0:
        raise ValueError(f"overlap_groups: expected positive tolerances, got {tolerance!r}")
    if not points:
        return []
    unit = _unit(points, log_x, x_range)
    keys = list(points)
    parent = {k: k for k in keys}

    def root(key: str) -> str:
        while parent[key] != key:
            key = parent[key]
        return key

    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if (abs(unit[a][0] - unit[b][0]) < tolerance[0]
                    and abs(unit[a][1] - unit[b][1]) < tolerance[1]):
                parent[root(b)] = root(a)
    groups: dict[str, list[str]] = {}
    for key in keys:
        groups.setdefault(root(key), []).append(key)
    return [members for members in groups.values() if len(members) > 1]


def spread(points: Mapping[str, tuple[float, float]], groups: Sequence[Sequence[str]],
           log_x: bool = False, step: float = 0.025,
           x_range: tuple[float, float] | None = None) -> dict[str, tuple[float, float]]:
    """Where to draw each point: a group's members side by side, ``step`` of the x span apart.

    The members keep their own y and are centred on their mean x, so every marker shows
    and the group still sits where its results are; the figure says it did this
    (:func:`group_note`).
    """
    drawn = dict(points)
    if not points:
        return drawn
    span = _x_span(points, log_x, x_range)
    for members in groups:
        centre = sum(_x(points[k][0], log_x) for k in members) / len(members)
        for index, key in enumerate(members):
            x = centre + (index - (len(members) - 1) / 2) * step * span
            drawn[key] = (10 ** x if log_x else x, points[key][1])
    return drawn


def group_tags(groups: Sequence[Sequence[str]]) -> dict[str, str]:
    """Each grouped key's letter: the first group is A, the next B, ..."""
    letters = string.ascii_uppercase
    return {key: letters[index % len(letters)] for index, members in enumerate(groups)
            for key in members}


def group_note(groups: Sequence[Sequence[str]], labels: Mapping[str, str], width: int = 150,
               where: str = "", explain: bool = True) -> str:
    """One line per group listing its methods, e.g. ``"[A] overlapping: X; Y; Z"``, wrapped.

    ``where`` prefixes each line (a panel's name); ``explain`` adds the line that says the
    markers were moved apart.
    """
    tags = group_tags(groups)
    lines = [f"{where}[{tags[members[0]]}] overlapping: " + "; ".join(labels[k] for k in members)
             for members in groups]
    if lines and explain:
        lines.append("Markers that would overlap are drawn side by side around their mean "
                     "cost (each keeps its own success and interval width).")
    return "\n".join(textwrap.fill(line, width, subsequent_indent="      ",
                                   break_on_hyphens=False) for line in lines)


def tag_points(axis: Any, groups: Sequence[Sequence[str]],
               drawn: Mapping[str, tuple[float, float]],
               tags: Mapping[str, str] | None = None) -> None:
    """Write each group's letter above its markers, so the note below names them.

    ``tags`` are the letters of the whole figure (:func:`group_tags`) when ``groups`` is
    only the part one panel shows.
    """
    tags = group_tags(groups) if tags is None else tags
    for members in groups:
        x = sorted(drawn[k][0] for k in members)[len(members) // 2]
        y = max(drawn[k][1] for k in members)
        label = axis.annotate(f"[{tags[members[0]]}]", (x, y), xytext=(0, 9),
                              textcoords="offset points", ha="center", va="bottom",
                              fontsize=8, weight="bold")
        movable(label, [((x, y), offset, ha, va) for offset, ha, va in _ring()])


def reference_lines(axis: Any, references: Sequence[tuple[str, float]],
                    merge: float = 0.04) -> None:
    """Thin grey horizontal lines at the references' values, named at the left edge.

    Each reference is ``(name, y)``: the rule, the planner and the oracle on a plot of
    success, so every method reads against them without searching for their points.
    References closer than ``merge`` of the y axis's span share one name
    (``"planner / rule"``), so the names never print over one another; call it after the
    points are drawn, when the span is known.
    """
    low, high = axis.get_ylim()
    styles = ("--", ":", "-.")
    for index, (_, y) in enumerate(references):
        axis.axhline(y, color="0.45", linestyle=styles[index % len(styles)], linewidth=0.8,
                     zorder=0)
    clusters: list[list[tuple[str, float]]] = []
    for name, y in sorted(references, key=lambda reference: reference[1]):
        if clusters and y - clusters[-1][-1][1] < merge * (high - low):
            clusters[-1].append((name, y))
        else:
            clusters.append([(name, y)])
    for cluster in clusters:
        y = cluster[-1][1]
        label = axis.annotate(" / ".join(name for name, _ in cluster), (0.0, y),
                              xycoords=("axes fraction", "data"), xytext=(3, 2),
                              textcoords="offset points", ha="left", va="bottom",
                              fontsize=7, color="0.3")
        # at the left edge, else the right edge, else along the line: above it, then below
        places = [((0.0, y), (3, dy), "left", va) for dy, va in ((2, "bottom"), (-2, "top"))]
        places += [((1.0, y), (-3, dy), "right", va) for dy, va in ((2, "bottom"),
                                                                     (-2, "top"))]
        places += [((x / 10, y), (0, dy), "center", va) for x in range(1, 10)
                   for dy, va in ((2, "bottom"), (-2, "top"))]
        movable(label, places)


def log_ticks(axis: Any) -> None:
    """Log-scale x ticks at 1, 2 and 5 per decade, labelled plainly, minor ticks unlabelled.

    A panel spanning less than a decade otherwise labels every minor tick in
    scientific notation, and the labels run into one another.
    """
    from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter

    axis.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.xaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
    axis.xaxis.set_minor_formatter(NullFormatter())


# ------------------------------------------------------------------ label placement
#: Attribute of an annotation holding the places :func:`place_labels` may put it.
_PLACES = "_cost_envs_places"
#: Points between a label and what it must not cover.
_PAD = 1.5


def _ring() -> list[tuple[tuple[float, float], str, str]]:
    """Offsets (points) around a group's top marker, nearest first: above, beside, below."""
    places: list[tuple[tuple[float, float], str, str]] = []
    for r in (9, 15, 21, 28, 36, 45):
        places += [((0, r), "center", "bottom"), ((r, 0), "left", "center"),
                   ((-r, 0), "right", "center"), ((r, r), "left", "bottom"),
                   ((-r, r), "right", "bottom"), ((0, -r), "center", "top"),
                   ((r, -r), "left", "top"), ((-r, -r), "right", "top")]
    return places


def movable(label: Any, places: Sequence[tuple[tuple[float, float], tuple[float, float],
                                              str, str]]) -> None:
    """Let :func:`place_labels` put ``label`` at the first of ``places`` that covers nothing.

    Each place is ``(xy, offset in points, ha, va)``, ``xy`` in the label's own
    coordinates; the label is drawn at the first place until then.
    """
    setattr(label, _PLACES, list(places))


def place_labels(figure: Any) -> None:
    """Move every :func:`movable` label to its first place that covers no marker and no label.

    Markers, error bars and caps, and the other texts of the axes (labels already placed
    included) are obstacles, measured on the drawn figure; a place must also lie inside
    the axes. When none is free the label takes the place that covers the least. Lines
    (the references, a front) may run under a label. Deterministic: a rerun draws the
    same figure.
    """
    figure.canvas.draw()
    renderer = figure.canvas.get_renderer()
    for axis in figure.axes:
        labels = [t for t in axis.texts if getattr(t, _PLACES, None)]
        if not labels:
            continue
        obstacles = _marks(axis, figure.dpi)
        obstacles += [t.get_window_extent(renderer) for t in axis.texts
                      if t not in labels and t.get_visible() and t.get_text()]
        inside = axis.get_window_extent(renderer)
        for label in labels:
            best, least = None, math.inf
            for place in getattr(label, _PLACES):
                _put(label, place)
                box = label.get_window_extent(renderer)
                covered = sum(_area(box, other) for other in obstacles)
                if not (inside.x0 <= box.x0 and box.x1 <= inside.x1
                        and inside.y0 <= box.y0 and box.y1 <= inside.y1):
                    covered += box.width * box.height
                if covered < least:
                    best, least = place, covered
                if covered == 0:
                    break
            _put(label, best)
            obstacles.append(label.get_window_extent(renderer))


def _put(label: Any, place: Any) -> None:
    xy, offset, ha, va = place
    label.xy = xy
    label.xyann = offset
    label.set_horizontalalignment(ha)
    label.set_verticalalignment(va)


def _area(a: Any, b: Any) -> float:
    """The area two display boxes share (0 when apart)."""
    width = min(a.x1, b.x1) - max(a.x0, b.x0)
    height = min(a.y1, b.y1) - max(a.y0, b.y0)
    return width * height if width > 0 and height > 0 else 0.0


def _marks(axis: Any, dpi: float) -> list[Any]:
    """Display boxes of the axes' markers and error-bar segments (padded)."""
    from matplotlib.collections import LineCollection
    from matplotlib.transforms import Bbox

    pad = _PAD * dpi / 72
    boxes = []
    for line in axis.lines:
        if line.get_marker() in (None, "None", "none", "", " ") or not line.get_visible():
            continue
        half = line.get_markersize() * dpi / 72 / 2 + pad
        for x, y in line.get_transform().transform(line.get_xydata()):
            if math.isfinite(x) and math.isfinite(y):
                boxes.append(Bbox([[x - half, y - half], [x + half, y + half]]))
    for collection in axis.collections:
        if not isinstance(collection, LineCollection) or not collection.get_visible():
            continue
        transform = collection.get_transform()
        for segment in collection.get_segments():
            if len(segment):
                points = transform.transform(segment)
                low, high = points.min(axis=0), points.max(axis=0)
                boxes.append(Bbox([low - pad, high + pad]))
    return boxes
