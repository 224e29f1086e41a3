"""No file git tracks is over 1 MB (issue #25): results stay small enough to read and clone.

A learning-curve history belongs in a CSV (:mod:`experiments.shared.histories`), not in a JSON
table; a file that grows past the limit is a format to rethink, not a limit to raise.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: 1 MB, as ``du -b`` counts (decimal: the largest committed file was 1.06 MB).
LIMIT = 1_000_000


def tracked_files() -> list[Path]:
    """The files ``git ls-files`` lists that are in the working tree."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (no .git or no git): nothing lists the tracked files")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode("utf-8").split("\0")
    return [REPO / name for name in listed if name and (REPO / name).is_file()]


def test_no_tracked_file_is_over_1_mb() -> None:
    files = tracked_files()
    assert len(files) > 100  # the listing worked: the package, tests, docs and results
    big = {str(path.relative_to(REPO)): path.stat().st_size for path in files
           if path.stat().st_size > LIMIT}
    assert big == {}, f"tracked files over {LIMIT} bytes: {big}"
