"""No option abbreviations (issue #26, item 20): a misspelt option is an error, never a guess.

argparse takes any unique prefix of a long option by default, so ``--n-env 4`` set
``--n-envs`` and ``--scal smoke`` set ``--scale``: a typo was silently read as another
option (and an option added later could change what an old command line meant). Every
parser of the project's command lines sets ``allow_abbrev=False``:

* the parsers of ``cost-envs`` (every subcommand), ``python -m experiments`` and
  ``python -m agents.zoo`` are walked, and the prefix of each of their long options is
  refused (left unrecognised);
* a refused abbreviation still gets argparse's error and the project's "did you mean";
* every ``ArgumentParser(...)`` built in ``agents``, ``experiments``, ``benchmarks`` and
  ``examples`` passes ``allow_abbrev=False`` (read from the source: the scripts' parsers
  live inside their ``main`` or run at import).
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import agents
from agents.cli.main import build_parser
from agents.zoo.__main__ import _parser as zoo_parser
from experiments.__main__ import build_parser as experiments_parser

ROOT = Path(agents.__file__).resolve().parents[1]
TOOL = "cost_envs/ToolBench-v0"
#: Each command line: the function building its parser.
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "cost-envs": build_parser,
    "python -m experiments": experiments_parser,
    "python -m agents.zoo": zoo_parser,
}


def _tree(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
          ) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """``(subcommand path, parser)`` of ``parser`` and of every subcommand below it."""
    yield path, parser
    for action in parser._actions:  # argparse keeps no public list of its subparsers
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, child in action.choices.items():
                if id(child) not in seen:  # an alias names the same parser
                    seen.add(id(child))
                    yield from _tree(child, (*path, name))


def _abbreviations() -> list[tuple[str, tuple[str, ...], str]]:
    """``(command line, subcommand path, abbreviated option)``: each long option less a letter."""
    found = []
    for program, build in PARSERS.items():
        for path, parser in _tree(build()):
            options = {option for action in parser._actions for option in action.option_strings}
            for option in sorted(options):
                if option.startswith("--") and option[:-1] not in options:
                    found.append((program, path, option[:-1]))
    return found


ABBREVIATIONS = _abbreviations()


def test_the_walk_sees_every_subcommand_and_option():
    paths = {(program, path) for program, path, _ in ABBREVIATIONS}
    for path in (("train",), ("evaluate",), ("route", "train"), ("route", "score"),
                 ("export-minari",), ("pretrain",)):
        assert ("cost-envs", path) in paths, path
    assert ("python -m agents.zoo", ("warm-start",)) in paths
    assert ("cost-envs", ("train",), "--n-env") in ABBREVIATIONS
    assert ("python -m experiments", (), "--scal") in ABBREVIATIONS
    assert len(ABBREVIATIONS) > 60


@pytest.mark.parametrize(("program", "path", "abbreviation"), ABBREVIATIONS,
                         ids=[" ".join((p, *s, a)) for p, s, a in ABBREVIATIONS])
def test_an_abbreviated_option_is_not_taken_for_the_option(program, path, abbreviation,
                                                           capsys):
    parser = dict(_tree(PARSERS[program]()))[path]
    # nothing else may fail: the parser is alone, with no argument required
    for action in parser._actions:
        action.required = False
    for group in parser._mutually_exclusive_groups:
        group.required = False
    try:
        _, unknown = parser.parse_known_args([abbreviation])
    except SystemExit:
        pytest.fail(f"{abbreviation} was taken for an option of {program} "
                    f"{' '.join(path)}: {capsys.readouterr()}")
    assert unknown == [abbreviation]


def test_cost_envs_refuses_an_abbreviation_with_did_you_mean(tmp_path, capsys):
    with pytest.raises(SystemExit) as end:
        build_parser().parse_args(["train", "--env", TOOL, "--method", "lora", "--out",
                                   str(tmp_path / "m"), "--n-env", "4"])
    assert end.value.code == 2
    err = capsys.readouterr().err
    assert "usage: cost-envs train" in err, err
    assert "unrecognized arguments: --n-env 4; did you mean '--n-envs'?" in err, err


def test_experiments_refuses_an_abbreviation_with_did_you_mean(capsys):
    with pytest.raises(SystemExit) as end:
        experiments_parser().parse_args(["lora_ppo", "--scal", "smoke"])
    assert end.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # its errors are one line
    assert "unrecognized arguments: --scal smoke; did you mean '--scale'?" in err, err


def _parser_calls() -> list[tuple[str, int, bool]]:
    """``(file, line, whether allow_abbrev=False is passed)`` of each ``ArgumentParser(...)``."""
    calls = []
    for package in ("agents", "experiments", "benchmarks", "examples"):
        for file in sorted((ROOT / package).rglob("*.py")):
            source = file.read_text(encoding="utf-8")
            if "ArgumentParser" not in source:  # nothing to find: not parsed (issue #36)
                continue
            for node in ast.walk(ast.parse(source)):
                if not isinstance(node, ast.Call):
                    continue
                name = getattr(node.func, "attr", getattr(node.func, "id", None))
                if name != "ArgumentParser":
                    continue
                refused = any(k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant)
                              and k.value.value is False for k in node.keywords)
                calls.append((str(file.relative_to(ROOT)), node.lineno, refused))
    return calls


def test_every_argument_parser_of_the_scripts_refuses_abbreviations():
    calls = _parser_calls()
    assert len(calls) >= 17  # benchmarks' and examples' scripts, bopo_long, agents.zoo
    assert [f"{file}:{line}" for file, line, refused in calls if not refused] == []
