"""Your own text features on the command line: --features, entry points, the digest check."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents import cli
from agents.cli.route import EXIT_USAGE

DOCUMENTED = [  # docs/routing.md's worked example, word for word
    "cost-envs route train --data cost_envs/data/example_traces.jsonl --weak gpt-4.1-nano "
    "--strong o3 --features examples/text_features.py:shape --save routers/shape",
    "cost-envs route score --router routers/shape --data cost_envs/data/example_traces.jsonl "
    "--features examples/text_features.py:shape",
]


@pytest.fixture
def own_encoders():
    """The encoders registered in this process, restored after the test.

    Yields a function that restores them at once (a new process's registry).
    """
    from agents.routers.features import TEXT_ENCODERS

    before = dict(TEXT_ENCODERS)

    def restore() -> None:
        TEXT_ENCODERS.clear()
        TEXT_ENCODERS.update(before)

    yield restore
    restore()


def _in_process(argv: list[str], capsys) -> tuple[int, str, str]:
    """``cost-envs ARGV`` in this process: its exit status, stdout and stderr."""
    capsys.readouterr()
    try:
        code = cli.main(argv)
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def test_the_documented_features_example_runs_and_checks_its_features(
        tmp_path, monkeypatch, capsys, own_encoders) -> None:
    import shlex

    root = Path(__file__).resolve().parents[1]
    docs = " ".join((root / "docs" / "routing.md").read_text().replace("\\\n", " ").split())
    for command in DOCUMENTED:
        assert command in docs, command
    for name in ("cost_envs/data/example_traces.jsonl", "examples/text_features.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, tmp_path / name)
    # both commands in this process (each new interpreter costs seconds of imports), from
    # the directory the docs run them in; tests/test_cli.py runs the console script itself
    monkeypatch.chdir(tmp_path)
    code, _, err = _in_process(shlex.split(DOCUMENTED[0])[1:], capsys)
    assert code == 0, err
    own_encoders()  # scored as by another process: the features are registered anew
    code, out, err = _in_process(shlex.split(DOCUMENTED[1])[1:], capsys)
    assert code == 0 and "300 queries scored" in out, err
    saved = json.loads((tmp_path / "routers" / "shape.json").read_text())
    assert saved["text_features"]["name"] == "shape" and saved["text_features"]["dim"] == 3
    assert saved["state"]["text_features"] == "shape" and saved["state"]["with_ngrams"]
    only = ["route", "train", "--data", str(tmp_path / "cost_envs/data/example_traces.jsonl"),
            "--weak", "gpt-4.1-nano", "--strong", "o3", "--save", str(tmp_path / "only"),
            "--features-only"]
    with pytest.raises(SystemExit) as info:  # --features-only without --features
        cli.main(only)
    assert info.value.code == EXIT_USAGE
    assert cli.main([*only, "--features",
                     f"{tmp_path / 'examples/text_features.py'}:shape"]) == 0
    state = json.loads((tmp_path / "only.json").read_text())["state"]
    assert state["with_ngrams"] is False and state["text_features"] == "shape"
    # no features: where to find them, in one line (no module named in the file is run)
    code, _, err = _in_process(shlex.split(DOCUMENTED[1])[1:-2], capsys)
    assert code == EXIT_USAGE and "--features" in err
    assert "cost_envs.text_features" in err and len(err.splitlines()) == 1
    # an edited module: refused, naming both digests
    with (tmp_path / "examples" / "text_features.py").open("a") as module:
        module.write("# edited\n")
    code, _, err = _in_process(shlex.split(DOCUMENTED[1])[1:], capsys)
    assert code == EXIT_USAGE and "edited module" in err, err


def test_an_installed_entry_point_gives_a_router_its_features(tmp_path, monkeypatch,
                                                              own_encoders) -> None:
    import importlib.metadata

    from agents.routers import user_features
    from agents.routers.features import TEXT_ENCODERS

    module = tmp_path / "entry_features.py"
    module.write_text("import numpy as np\n\ndef lengths(texts):\n"
                      "    return np.array([[len(t) / 100.0] for t in texts])\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    record = user_features.register_spec("entry_features:lengths", "a prompt")
    assert record["dim"] == 1 and TEXT_ENCODERS["lengths"].dim == 1
    point = importlib.metadata.EntryPoint("lengths", "entry_features:lengths",
                                          user_features.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group: [point] if group == user_features.ENTRY_POINT_GROUP
                        else [])
    del TEXT_ENCODERS["lengths"]
    user_features.activate(record, None, "saved.json")  # found by its name, checked
    assert TEXT_ENCODERS["lengths"].encode(["x" * 50])[0, 0] == 0.5
    with pytest.raises(user_features.FeaturesError, match="another function or an edited"):
        user_features.activate({**record, "source_sha256": "0" * 64}, None, "saved.json")
