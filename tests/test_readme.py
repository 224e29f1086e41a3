"""Every code block of README.md and of every docs page runs as written.

Each page runs on its own: its blocks in order, in one namespace (as a reader pastes
them into one session), in a fresh directory. Conventions the pages can use:

* A ``yaml``/``json`` block whose first line is a comment naming a file
  (``# my_pool.yaml: ...``) is written to that file first, so a later Python block of the
  same page can read it.
* A Python block whose first line is ``# needs: <what>`` (data, network, a GPU) is
  skipped with that reason; so is a block that reads ``path/to/...`` files, which only
  the reader has.
* SB3 ``learn()`` calls are capped at :data:`MAX_STEPS` steps: the test checks that a
  training block runs, not what it learns.

The "Your own price table" YAML (docs/own-data.md) is checked on its own: as a
``prices=`` file it must build every env that bills tokens, listing only the model it
changes. The README is checked as a front door: under 300 lines, the quickstart within
the first 60, every link to a file of the repository, and its headline results table the
same as the results page's.
"""

from __future__ import annotations

import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from cost_envs.prices import PriceTable, coerce_prices, default_price_table

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_COMMENT = re.compile(r"^#\s*([\w.-]+\.(?:ya?ml|json))\b")
NEEDS = re.compile(r"^#\s*needs:\s*(.+)$")
LINK = re.compile(r"\]\(([^)\s]+)\)")
MAX_STEPS = 256


@dataclass(frozen=True)
class Block:
    """One fenced block: its language, its code and the line it starts on."""

    language: str
    code: str
    line: int

    @property
    def skip_reason(self) -> str | None:
        first = self.code.splitlines()[0] if self.code.strip() else ""
        needs = NEEDS.match(first)
        if needs:
            return f"needs {needs.group(1).strip()}"
        if "path/to/" in self.code:
            return "reads the reader's own files (path/to/...)"
        return None


def page_name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else page.name


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a page's ``text``, in order."""
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in FENCE.finditer(text)]


def python_blocks() -> list[tuple[str, Block]]:
    return [(page_name(page), block) for page in PAGES
            for block in blocks(page.read_text(encoding="utf-8"))
            if block.language == "python"]


def run_page(page: Path, workdir: Path) -> dict[int, str | None]:
    """Run one page's blocks in order; block line -> ``None`` (ran), a skip, or an error."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    learn = BaseAlgorithm.learn

    def capped(self: Any, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        return learn(self, min(int(total_timesteps), MAX_STEPS), *args, **kwargs)

    results: dict[int, str | None] = {}
    # A module of its own, as a reader's session has __main__: a page may define classes
    # (dataclasses look their module up in sys.modules).
    module = types.ModuleType("__docs__")
    namespace: dict[str, Any] = module.__dict__
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, module.__name__, module)
        patch.chdir(workdir)
        patch.setattr(BaseAlgorithm, "learn", capped)
        for block in blocks(page.read_text(encoding="utf-8")):
            named = FILE_COMMENT.match(block.code)
            if block.language in ("yaml", "yml", "json") and named:
                (workdir / named.group(1)).write_text(block.code, encoding="utf-8")
            if block.language != "python":
                continue
            if block.skip_reason is not None:
                results[block.line] = f"skip: {block.skip_reason}"
                continue
            try:
                exec(compile(block.code, f"{page_name(page)}:{block.line}", "exec"), namespace)
            except Exception as error:  # reported by the block's own test
                results[block.line] = f"{type(error).__name__}: {error}"
            else:
                results[block.line] = None
    return results


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, str | None]]:
    """Each page's outcomes, run once per test session, each page in its own directory."""
    return {}


@pytest.mark.parametrize(("page", "block"), python_blocks(),
                         ids=[f"{page}:{block.line}" for page, block in python_blocks()])
def test_python_block_runs(page: str, block: Block, outcomes: dict[str, dict[int, str | None]],
                           tmp_path_factory: pytest.TempPathFactory) -> None:
    if page not in outcomes:
        outcomes[page] = run_page(ROOT / page, tmp_path_factory.mktemp("page"))
    outcome = outcomes[page][block.line]
    if outcome is not None and outcome.startswith("skip: "):
        pytest.skip(outcome.removeprefix("skip: "))
    assert outcome is None, f"{page} line {block.line}: {outcome}"


def test_the_conventions() -> None:
    found = blocks("```python\n# needs: routellm data\nx = 1\n```\n"
                   "```yaml\n# my.yaml: a file\na: 1\n```\n```python\ny = 2\n```\n")
    assert [b.language for b in found] == ["python", "yaml", "python"]
    assert found[0].skip_reason == "needs routellm data"
    assert found[2].skip_reason is None and found[2].line == 9
    assert FILE_COMMENT.match(found[1].code).group(1) == "my.yaml"


def test_each_page_runs_in_its_own_namespace(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("```python\nshared = 1\n```\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("```python\nshared\n```\n", encoding="utf-8")
    assert run_page(tmp_path / "a.md", tmp_path) == {1: None}
    assert run_page(tmp_path / "b.md", tmp_path)[1].startswith("NameError")


# ---------------------------------------------------------------- the README as front door
def test_readme_is_a_front_door() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 300, f"README.md has {len(lines)} lines; move detail to docs/"
    quickstart = lines.index("## Quickstart")
    fence = lines.index("```python", quickstart)
    assert fence < 60, f"the quickstart's code starts on line {fence + 1}, past the first 60"
    assert "make install" in "\n".join(lines[:fence]) and "make test" in "\n".join(lines[:fence])


@pytest.mark.parametrize("page", PAGES, ids=page_name)
def test_links_name_files_of_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(FENCE.sub("", text)):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = target.split("#", 1)[0]
        assert (page.parent / path).exists(), f"{page_name(page)} links to missing {target}"


def table_rows(text: str, header: str) -> dict[str, list[str]]:
    """The rows of the table that starts with ``header``, by their first cell (the env)."""
    start = text.index(header)
    lines = text[start:text.index("\n\n", start)].splitlines()[2:]
    return {cells[0]: cells[1:] for cells in
            ([cell.strip() for cell in line.strip().strip("|").split(" | ")] for line in lines)}


INTERVAL = re.compile(r"[-+]?\d+\.\d+ \[[-+]?\d+\.\d+, [-+]?\d+\.\d+\]")


def test_readme_results_table_summarises_the_results_page_in_short_cells() -> None:
    """The README's table: one short line per cell, every env of the results page in its
    order, and every interval it quotes quoted by the results page's row of that env (where
    the reasoning is), so the two cannot drift apart."""
    readme = table_rows(README.read_text(encoding="utf-8"), "| env | best fixed row (return) |")
    page = table_rows((DOCS / "results.md").read_text(encoding="utf-8"),
                      "| env | best fixed row (test tasks) |")
    assert [env.split(" (")[0] for env in readme] == [env.split(" (")[0] for env in page]
    assert len(readme) >= 7  # every env's row
    for (env, cells), page_cells in zip(readme.items(), page.values(), strict=True):
        assert all(len(cell) <= 100 for cell in cells), (env, [len(c) for c in cells])
        for interval in INTERVAL.findall(" ".join(cells)):
            assert interval in " ".join(page_cells), (env, interval)


# ---------------------------------------------------------------- the price table snippet
def price_snippet() -> str:
    text = (DOCS / "own-data.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own price table"):]
    section = section[:section.index("\n## ", 1)]
    yaml_blocks = [b for b in blocks(section) if b.language == "yaml"]
    assert len(yaml_blocks) == 1, "the price-table section should show one YAML table"
    return yaml_blocks[0].code


@pytest.mark.parametrize("env_id", ["cost_envs/ExpertRouting-v0",
                                    "cost_envs/AgenticRouting-v0",
                                    "cost_envs/TraceRouting-v0"])
def test_price_table_works_as_written(tmp_path: Path, env_id: str) -> None:
    path = tmp_path / "my_prices.yaml"
    path.write_text(price_snippet(), encoding="utf-8")
    mine, merged = PriceTable.from_file(path), coerce_prices(path)
    assert set(mine.names) < set(default_price_table().names)  # a partial table, as shown
    assert all(merged[name] == mine[name] for name in mine.names)
    env = gym.make(env_id, prices=str(path))  # the models it does not list: shipped prices
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()
