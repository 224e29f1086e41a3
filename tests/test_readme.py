"""Every code block of README.md runs as written.

The blocks run in order, in one namespace (as a reader pastes them into one session),
in a fresh directory. Conventions the README can use:

* A ``yaml``/``json`` block whose first line is a comment naming a file
  (``# my_pool.yaml: ...``) is written to that file first, so a later Python block can
  read it.
* A Python block whose first line is ``# needs: <what>`` (data, network, a GPU) is
  skipped with that reason; so is a block that reads ``path/to/...`` files, which only
  the reader has.
* SB3 ``learn()`` calls are capped at :data:`MAX_STEPS` steps: the test checks that a
  training block runs, not what it learns.

The "Your own price table" YAML is checked on its own: as a ``prices=`` file it must
build every env that bills tokens, listing only the model it changes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

from cost_envs.prices import PriceTable, coerce_prices, default_price_table

README = Path(__file__).resolve().parents[1] / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_COMMENT = re.compile(r"^#\s*([\w.-]+\.(?:ya?ml|json))\b")
NEEDS = re.compile(r"^#\s*needs:\s*(.+)$")
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


def blocks(text: str | None = None) -> list[Block]:
    """The fenced blocks of README.md (or ``text``), in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return [Block(m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1)
            for m in FENCE.finditer(text)]


def python_blocks() -> list[Block]:
    return [block for block in blocks() if block.language == "python"]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str | None]:
    """Run the README in order; block line -> ``None`` (ran), a skip reason, or an error."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    workdir = tmp_path_factory.mktemp("readme")
    learn = BaseAlgorithm.learn

    def capped(self: Any, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        return learn(self, min(int(total_timesteps), MAX_STEPS), *args, **kwargs)

    results: dict[int, str | None] = {}
    namespace: dict[str, Any] = {"__name__": "__readme__"}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        patch.setattr(BaseAlgorithm, "learn", capped)
        for block in blocks():
            named = FILE_COMMENT.match(block.code)
            if block.language in ("yaml", "yml", "json") and named:
                (workdir / named.group(1)).write_text(block.code, encoding="utf-8")
            if block.language != "python":
                continue
            if block.skip_reason is not None:
                results[block.line] = f"skip: {block.skip_reason}"
                continue
            try:
                exec(compile(block.code, f"README.md:{block.line}", "exec"), namespace)
            except Exception as error:  # reported by the block's own test
                results[block.line] = f"{type(error).__name__}: {error}"
            else:
                results[block.line] = None
    return results


@pytest.mark.parametrize("block", python_blocks(), ids=lambda b: f"line{b.line}")
def test_readme_python_block_runs(block: Block, outcomes: dict[int, str | None]) -> None:
    outcome = outcomes[block.line]
    if outcome is not None and outcome.startswith("skip: "):
        pytest.skip(outcome.removeprefix("skip: "))
    assert outcome is None, f"README.md line {block.line}: {outcome}"


def test_the_conventions() -> None:
    found = blocks("```python\n# needs: routellm data\nx = 1\n```\n"
                   "```yaml\n# my.yaml: a file\na: 1\n```\n```python\ny = 2\n```\n")
    assert [b.language for b in found] == ["python", "yaml", "python"]
    assert found[0].skip_reason == "needs routellm data"
    assert found[2].skip_reason is None and found[2].line == 9
    assert FILE_COMMENT.match(found[1].code).group(1) == "my.yaml"


# ---------------------------------------------------------------- the price table snippet
def price_snippet() -> str:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Your own price table"):]
    section = section[:section.index("\n## ", 1)]
    yaml_blocks = [b for b in blocks(section) if b.language == "yaml"]
    assert len(yaml_blocks) == 1, "the price-table section should show one YAML table"
    return yaml_blocks[0].code


@pytest.mark.parametrize("env_id", ["cost_envs/ExpertRouting-v0",
                                    "cost_envs/AgenticRouting-v0",
                                    "cost_envs/TraceRouting-v0"])
def test_readme_price_table_works_as_written(tmp_path: Path, env_id: str) -> None:
    path = tmp_path / "my_prices.yaml"
    path.write_text(price_snippet(), encoding="utf-8")
    mine, merged = PriceTable.from_file(path), coerce_prices(path)
    assert set(mine.names) < set(default_price_table().names)  # a partial table, as shown
    assert all(merged[name] == mine[name] for name in mine.names)
    env = gym.make(env_id, prices=str(path))  # the models it does not list: shipped prices
    env.reset(seed=0)
    env.step(env.action_space.sample())
    env.close()
