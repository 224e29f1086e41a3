"""Finished runs kept on disk, so a grid longer than one sitting completes over several.

A converged-budget run is 15 to 40 minutes on the project's 2-core machine and a grid of
them several CPU-hours. An experiment that keeps runs writes each one, as soon as it
finishes, to a small JSON file of its own (the settings it ran at and its per-task
scores); a later call reuses every file whose settings match and runs only what is
missing. A file whose settings differ is an error naming it: never silently retrained,
never mixed into a report of other settings. The experiment writes its report only when
every run of its grid exists.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agents.files import write_files_atomic


def run_file(folder: Path, key: str, seed: int) -> Path:
    """Where the run of ``key`` (``/`` allowed) with ``seed`` is kept in ``folder``."""
    return Path(folder) / f"{key.replace('/', '+')}_seed{seed}.json"


def read_kept(path: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """A kept file's content if it exists, ``None`` if not.

    Raises:
        ValueError: If it exists but was run with other ``settings``, or is not a kept run.
    """
    if not path.exists():
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        ran = {name: kept[name] for name in settings}
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{path}: expected a kept run (JSON with {sorted(settings)}); delete "
                         "it to run it again") from None
    if ran != settings:
        raise ValueError(f"{path}: was run with {ran}, this scale needs {settings}; delete it "
                         "or give another --out")
    return kept


def keep(path: Path, content: dict[str, Any]) -> None:
    """Write one kept file, whole or not at all."""
    write_files_atomic(Path(path).parent, {Path(path).name: json.dumps(content, indent=1) + "\n"})
