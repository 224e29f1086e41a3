"""The documentation site builds strictly: no broken link, anchor or API reference.

``make docs`` runs ``mkdocs build --strict``; this test runs the same build into a
temporary directory and fails on any warning (mkdocs' strict mode turns warnings into a
non-zero exit; the output is checked too, so a warning strict mode lets pass still
fails). It needs the ``docs`` extra, which ``make install`` installs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

needs_mkdocs = pytest.mark.skipif(
    find_spec("mkdocs") is None,
    reason="the docs extra is not installed (pip install -c constraints.txt -e '.[docs]')")


def build(site: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "--config-file", str(config), "--site-dir", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@needs_mkdocs
@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path: Path) -> None:
    result = build(tmp_path / "site")
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "WARNING" not in output, output
    site = tmp_path / "site"
    for page in ["index.html", "envs/toolbench/index.html", "reference/agents/index.html",
                 "howto/add-env/index.html", "architecture/index.html"]:
        assert (site / page).is_file(), page
    # the env page renders the class docstring, the one home of the generative model
    toolbench = (site / "envs/toolbench/index.html").read_text(encoding="utf-8")
    assert "Generative model." in toolbench and "Version History" in toolbench


@needs_mkdocs
@pytest.mark.slow
def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\nSee [nothing](missing.md).\n", encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text("site_name: x\ndocs_dir: docs\n", encoding="utf-8")
    result = build(tmp_path / "site", config)
    assert result.returncode != 0
    assert "missing.md" in result.stdout + result.stderr


def test_no_docstring_line_is_read_as_a_heading() -> None:
    # The API reference renders docstrings as Markdown, where a line starting with "#"
    # and a digit ("#23), the ...": an issue number wrapped to the line's start) becomes
    # a heading that splits the page.
    starts = re.compile(r"^\s+#\d", re.MULTILINE)
    found = [f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}"
             for package in ("cost_envs", "agents")
             for path in sorted((ROOT / package).rglob("*.py"))
             for text in [path.read_text(encoding="utf-8")]
             for m in starts.finditer(text)]
    assert not found, f"lines starting with '#<digit>': {found}"
