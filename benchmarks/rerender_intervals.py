"""Re-render the on-request results' shares of the gap from the data they keep (issue #36).

Usage: ``python benchmarks/rerender_intervals.py [--results DIR] [--dry-run]``

A share of the rule-to-planner gap now has Fieller's interval on the exact moments of the
two-level bootstrap (:func:`cost_envs.metrics.bootstrap_gap_closed`): no draws, no seed.
``make reproduce`` rewrites the default tables; the files run on request keep their old
percentile ends until this script re-renders them, with today's renderers, from the
per-episode scores they already hold (no training, no new episode):

* ``full/table_<Env>.md``/``.json``, ``full/corl_tiers*.md``/``.json``, ``full/bopo.*``
  and ``bopo_long/bopo.*``: each JSON's ``gap_closed`` shares get their new ends (the
  point and each seed's share are kept as written), then the page is rendered from the
  JSON (:mod:`experiments.lora_ppo.report`, :mod:`experiments.corl.report`,
  :mod:`experiments.bopo.report`). A table whose JSON predates the per-episode scores
  cannot be, and is named and left as it is (none today: the last two,
  ``full/table_FlightPlanner-v*``, were regenerated on 2026-12-07);
* ``converged_FlightPlanner-v1.md``: :func:`experiments.converged.report.render` of the kept
  runs its CSV names (the CSV comes out the same);
* the learning curves ``budgets_<Env>*.md``: :func:`experiments.budgets.report.curve_table`
  (through :func:`experiments.ppo_entropy.report.render` and
  :func:`experiments.bopo.curve.render` where those wrote them) of the CSV's scores. The
  CSVs do not keep the gap's ends: they are the same tasks' rule and planner as kept by
  ``full/table_ToolBench-v0.json`` (400 tasks of task seed 0), the first 1000 of
  ``converged_runs/fixed.json`` (FlightPlanner-v1) and ``bopo_long/bopo.json``
  (AgenticRouting-v0's AppWorld, 1000 tasks). ``budgets_ExpertRouting-v1.md``, whose CSV
  keeps them, was re-rendered with the change itself.

What no file of scores keeps (the machine, the wall times, the steps and sub-envs of a
curve's runs) is read from the page being re-rendered. A page is written only if nothing
but its intervals changed (its point values, labels and words are the same; a renamed
module path in how the interval is made is the one word allowed to follow the code), and
a JSON only if nothing but its shares' ends changed; otherwise the script stops, writing
nothing. Every changed interval is printed as ``file: row: old -> new``; ``--dry-run``
prints them and writes nothing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the experiments run from a checkout

from agents.files import write_files_atomic  # noqa: E402
from cost_envs.metrics import bootstrap_gap_closed  # noqa: E402
from experiments.shared.gaps import decode_scores  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
#: A bracketed interval of a page: ``[0.30, 0.55]``, ``[-0.009, +0.005]``, ``[n/a]``.
INTERVAL = re.compile(r"\[[^\[\]]*\]")
#: Module paths a page names in how its interval is made, moved since it was written.
MOVED = {"`experiments/gaps.py`": "`experiments/shared/gaps.py`"}


# ------------------------------------------------------------------------ the checks
def changed_intervals(name: str, old: str, new: str) -> list[str]:
    """``name: [section:] row [column]: old -> new`` for every cell whose interval moved.

    Raises:
        ValueError: If the pages differ in anything but their bracketed intervals (after
            :data:`MOVED`'s renames): a line count, a point value, a label, a word.
    """
    changes, section, header = [], "", []
    for before, after in MOVED.items():
        if before in old and after in new:
            changes.append(f"{name}: how the interval is made: {before} -> {after}")
            old = old.replace(before, after)
    old_lines, new_lines = old.splitlines(), new.splitlines()
    if len(old_lines) != len(new_lines):
        raise ValueError(f"{name}: {len(old_lines)} lines became {len(new_lines)}")
    for index, (before, after) in enumerate(zip(old_lines, new_lines, strict=True)):
        if before.startswith("## "):
            section = before.lstrip("# ") + ": "
        if before.startswith("|") and index + 1 < len(old_lines) \
                and re.match(r"\|\s*:?-", old_lines[index + 1]):
            header = [cell.strip() for cell in before.strip("|").split("|")]
        if before == after:
            continue
        if INTERVAL.sub("[]", before) != INTERVAL.sub("[]", after):
            raise ValueError(f"{name}: more than an interval changed:\n- {before}\n+ {after}")
        if not before.startswith("|"):  # a sentence: its intervals in order
            changes += [f"{name}: {section}{before[:50]}...: {was} -> {now}" for was, now
                        in zip(INTERVAL.findall(before), INTERVAL.findall(after), strict=True)
                        if was != now]
            continue
        cells = [[cell.strip() for cell in line.strip("|").split("|")] for line in (before, after)]
        row = cells[0][0] + (f" / {cells[0][1]}" if header[1:2] == ["Method"] else "")
        changes += [f"{name}: {section}{row} [{header[column]}]: {was} -> {now}"
                    for column, (was, now) in enumerate(zip(*cells, strict=True)) if was != now]
    return changes


def _without_ends(value: Any) -> Any:
    """A JSON value with every ``gap_closed`` share's ends blanked (what may change)."""
    value = json.loads(json.dumps(value))
    for task in value.get("gap_closed", {}).get("tasks", {}).values():
        for entry in task["methods"].values():
            entry["share"][1:] = [None, None]
    return value


def check_json(name: str, old: str, new: str) -> None:
    """Raise ``ValueError`` unless the two JSON texts differ only in their shares' ends."""
    if _without_ends(json.loads(old)) != _without_ends(json.loads(new)):
        raise ValueError(f"{name}: more than the shares' interval ends changed")


# ------------------------------------------------------------------------ the shares
def _plain(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def has_scores(report: Mapping[str, Any]) -> bool:
    """Whether a report's ``gap_closed`` block keeps the per-episode scores of its shares."""
    tasks = report.get("gap_closed", {}).get("tasks", {}).values()
    return all("rule_scores" in task for task in tasks)


def refresh_shares(report: dict[str, Any]) -> None:
    """Give every share of the report's ``gap_closed`` block its interval from its scores.

    The point and each seed's share stay as written (computed from the unrounded scores);
    the ends are :func:`~cost_envs.metrics.bootstrap_gap_closed`'s on the kept scores.

    Raises:
        ValueError: If a point recomputed from the kept scores is not the written one.
    """
    for name, task in report["gap_closed"]["tasks"].items():
        rule, planner = decode_scores(task["rule_scores"]), decode_scores(task["reference_scores"])
        for key, entry in task["methods"].items():
            if entry["share"][0] is None:
                continue
            runs = np.array([decode_scores(text) for text in entry["seed_scores"]])
            point, low, high = bootstrap_gap_closed(runs, rule, planner)
            if abs(point - entry["share"][0]) > 1e-3 * max(1.0, abs(point)):
                raise ValueError(f"{name} {key}: share {point} from the kept scores, "
                                 f"{entry['share'][0]} written")
            entry["share"][1:] = [_plain(low), _plain(high)]


# ------------------------------------------------------------------------ the reports
def tables(results: Path) -> Iterator[tuple[str, Callable[[dict[str, Any]], dict[str, str]],
                                            dict[str, Any]]]:
    """``(JSON file, page and JSON renderer, report)`` of every gap-keeping report on request."""
    from experiments.bopo import report as bopo
    from experiments.corl import report as corl
    from experiments.corl import runner as corl_runner
    from experiments.lora_ppo import report as lora_ppo

    for path in sorted((results / "full").glob("table_*.json")):
        stem = path.name.removesuffix(".json")
        yield (f"full/{path.name}", lambda r, stem=stem: {
            f"{stem}.md": lora_ppo.markdown_table(r), f"{stem}.json": lora_ppo.json_report(r)},
            lora_ppo.read_report(path))
    for path in sorted((results / "full").glob("corl_tiers*.json")):
        stem = path.name.removesuffix(".json")
        yield (f"full/{path.name}", lambda r, stem=stem: {
            f"{stem}.md": corl.corl_markdown(r),
            f"{stem}.json": corl_runner.json_files(r)[f"{stem}.json"]},
            corl_runner.read_result(path))
    for folder in ("full", "bopo_long"):
        path = results / folder / "bopo.json"
        yield (f"{folder}/bopo.json", lambda r: {
            "bopo.md": bopo.markdown(r, r.get("wall_seconds")),
            "bopo.json": json.dumps(r, indent=2) + "\n"},
            json.loads(path.read_text(encoding="utf-8")))


def _find(pattern: str, page: str) -> tuple[str, ...]:
    """The groups of ``pattern``'s first match in a page (multi-line), or ``ValueError``."""
    found = re.search(pattern, page, re.M)
    if found is None:
        raise ValueError(f"expected {pattern!r} in the page being re-rendered")
    return found.groups()


def _machine(page: str) -> str:
    return _find(r"^Machine: (.*?)\.(?: Wall time|$)", page)[0]


def converged(results: Path) -> dict[str, str]:
    """``converged_FlightPlanner-v1``'s page and CSV from the kept runs its CSV names."""
    from experiments.budgets.settings import BUDGET_ROWS
    from experiments.converged import report
    from experiments.converged.settings import SCALES

    page = (results / "converged_FlightPlanner-v1.md").read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(
        (results / "converged_FlightPlanner-v1.csv").read_text(encoding="utf-8"))))
    kept = {row["kept_in"]: json.loads((results / row["kept_in"]).read_text(encoding="utf-8"))
            for row in rows}
    table = kept[rows[0]["kept_in"]]
    fixed = report.Fixed({key: entry["label"] for key, entry in table["rows"].items()},
                         {key: decode_scores(entry["returns"])
                          for key, entry in table["rows"].items()}, table["rule"])
    learned: dict[str, list[np.ndarray]] = {}
    for row in rows:
        if row["seed"]:
            returns = decode_scores(kept[row["kept_in"]]["returns"])
            learned.setdefault(row["row"], []).append(returns)
    walls = _find(r"Wall time per seed: (.*)\.$", page)[0].split("; ")
    labels = {row.label: key for key, row in BUDGET_ROWS.items()}
    minutes = {labels[part.rsplit(" ", 2)[0]]: float(part.rsplit(" ", 2)[1]) for part in walls}
    with mock.patch.object(report, "machine", lambda: _machine(page)):
        markdown, columns = report.render({k: np.array(v) for k, v in learned.items()}, fixed,
                                          SCALES["default"], minutes)
    return {"converged_FlightPlanner-v1.md": markdown, "converged_FlightPlanner-v1.csv": columns}


def curve_runs(page: str, columns: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """A curve table's runs from its CSV, each seed's wall time the page's mean for its row."""
    rows = list(csv.DictReader(io.StringIO(columns)))
    runs = []
    for key in dict.fromkeys(row["row"] for row in rows):
        section = page.split(f"## {labels[key]}\n", 1)[1]
        minutes = float(_find(r"Wall time per seed: ([\d.]+) min", section)[0])
        for seed in dict.fromkeys(int(row["seed"]) for row in rows if row["row"] == key):
            runs.append({"key": key, "seed": seed, "seconds": 60 * minutes, "curve": [
                {"timesteps": int(row["timesteps"]), "gradient_steps": int(row["gradient_steps"]),
                 "returns": decode_scores(row["returns"])}
                for row in rows if row["row"] == key and int(row["seed"]) == seed]})
    return runs


def curves(results: Path) -> dict[str, str]:
    """Every learning-curve page whose gap ends another file keeps, by file name."""
    from experiments.bopo import curve as bopo_curve
    from experiments.bopo.report import label
    from experiments.budgets import report
    from experiments.budgets import runner as budgets_runner
    from experiments.budgets.settings import BUDGET_ROWS, Scale
    from experiments.ppo_entropy import report as ppo_entropy
    from experiments.ppo_entropy import runner as ppo_entropy_runner
    from experiments.ppo_entropy.settings import SCALE

    table = json.loads((results / "full" / "table_ToolBench-v0.json").read_text(encoding="utf-8"))
    toolbench = next(iter(table["gap_closed"]["tasks"].values()))
    fixed = json.loads((results / "converged_runs" / "fixed.json").read_text(encoding="utf-8"))
    ends = {"ToolBench-v0": [decode_scores(toolbench[f"{end}_scores"])
                             for end in ("rule", "reference")],
            "FlightPlanner-v1": [decode_scores(fixed["rows"][key]["returns"])[:1000]
                                 for key in (fixed["rule"], "planner")]}
    labels = {key: row.label for key, row in BUDGET_ROWS.items()}
    files = {}
    for path in sorted(results.glob("budgets_*.md")):
        name, page = path.stem, path.read_text(encoding="utf-8")
        columns = (results / f"{name}.csv").read_text(encoding="utf-8")
        env = name.removeprefix("budgets_").split("_")[0]
        if env not in ends:
            continue
        runs = curve_runs(page, columns, labels)
        seeds, steps, n_envs = map(int, _find(
            r"(\d+) seeds x (\d+) env steps on (\d+) batched", page))
        scale = Scale(name, steps, seeds, tuple(e["timesteps"] for e in runs[0]["curve"]),
                      episodes=len(ends[env][0]), n_envs=n_envs)
        with mock.patch.object(report, "machine", lambda page=page: _machine(page)), \
                mock.patch.object(budgets_runner, "reference_returns",
                                  lambda *_, env=env: ends[env]):
            if name.endswith("_no_entropy"):
                ppo = ppo_entropy_runner.last_returns(results / f"{name[:-11]}_ppo.csv", "ppo")
                markdown, _ = ppo_entropy.render(runs, ppo, SCALE)
            else:
                rule, planner = ends[env]
                markdown, _ = report.curve_table(f"cost_envs/{env}", runs, list(rule),
                                                 list(planner), scale)
        files[path.name] = markdown
    long = json.loads((results / "bopo_long" / "bopo.json").read_text(encoding="utf-8"))
    appworld = long["gap_closed"]["tasks"][bopo_curve.PROFILE]
    for suffix in ("", "_tuned"):
        name = f"budgets_{bopo_curve.NAME}{suffix}"
        page = (results / f"{name}.md").read_text(encoding="utf-8")
        columns = (results / f"{name}.csv").read_text(encoding="utf-8")
        keys = dict.fromkeys(row["row"] for row in csv.DictReader(io.StringIO(columns)))
        sc = bopo_curve.SCALES["curve"]
        data = {"scale": sc.name, "budget": long["profiles"][bopo_curve.PROFILE]["budget"],
                "rule_key": appworld["rule_method"], "n_envs": sc.n_envs,
                "rule": decode_scores(appworld["rule_scores"]), "resamples": sc.resamples,
                "planner": decode_scores(appworld["reference_scores"]), "suffix": suffix,
                "runs": curve_runs(page, columns, {key: label(key) for key in keys}),
                "seconds": 60 * float(_find(r"Total wall time (\d+) min", page)[0])}
        with mock.patch.object(report, "machine", lambda page=page: _machine(page)):
            files[f"{name}.md"] = bopo_curve.render(data)[f"{name}.md"]
    return files


# ------------------------------------------------------------------------ the command
def rerender(results: Path) -> tuple[dict[str, str], list[str], list[str]]:
    """``(files whose intervals changed, the changed intervals, the files left as they are)``.

    Raises:
        ValueError: If anything but an interval would change (nothing is returned).
    """
    new: dict[str, str] = {}
    skipped = []
    for name, render, report in tables(results):
        if not has_scores(report):
            skipped.append(f"{name}: its gap_closed block keeps no per-episode scores")
            continue
        refresh_shares(report)
        folder = name.split("/")[0]
        new |= {f"{folder}/{file}": text for file, text in render(report).items()}
    new |= converged(results)
    new |= curves(results)
    changed, intervals = {}, []
    for name, text in new.items():
        old = (results / name).read_text(encoding="utf-8")
        if name.endswith(".json"):
            check_json(name, old, text)
        elif name.endswith(".md"):
            intervals += changed_intervals(name, old, text)
        elif old != text:
            raise ValueError(f"{name}: expected it unchanged")
        if text != old:
            changed[name] = text
    return changed, intervals, skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results folder")
    parser.add_argument("--dry-run", action="store_true", help="print the changes only")
    args = parser.parse_args(argv)
    try:
        changed, intervals, skipped = rerender(args.results)
    except ValueError as error:
        print(f"rerender_intervals: nothing written: {error}", file=sys.stderr)
        return 1
    print("\n".join(intervals + [f"left as it is: {line}" for line in skipped]))
    if args.dry_run:
        return 0
    folders: dict[Path, dict[str, str]] = {}
    for name, text in changed.items():  # each folder's files all or nothing
        folders.setdefault((args.results / name).parent, {})[Path(name).name] = text
    for folder, files in folders.items():
        for path in write_files_atomic(folder, files):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
