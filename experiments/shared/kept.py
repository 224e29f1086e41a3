"""Finished units kept on disk, so a grid longer than one sitting completes over several.

The one keeper of every experiment: :func:`experiments.shared.scheduler.run_units` reads
a unit back from it before running anything and writes each unit to it as it finishes,
on whatever machine or cluster the unit ran (the driver writes). Two kinds:

* :class:`Kept`: any unit's result, pickled (``<out>/kept_units/<experiment>-<scale>/``,
  :func:`units_folder`), only until the experiment's report is written (:meth:`Kept.clear`):
  it is there to resume an interrupted run, never to stand for a later one, which may run
  other code. The files are the run's own, read back from the ``--out`` it was given, and
  read by an unpickler that loads only the classes results are made of (never a function
  a file names); a file of other settings or of another unit is an error naming it.
* :class:`Runs`: the JSON run files of the studies whose reports name them (converged,
  memory), below.

A converged-budget run is 5 to 10 minutes on the project's 2-core machine (15 to 40 before
the faster learners and envs) and a grid of them more than an hour. An experiment that
keeps runs writes each one, as soon as it finishes, to a small JSON file of its own (the
settings it ran at and its per-task scores); a later call reuses every file whose
settings match and runs only what is missing. A file whose settings differ is an error
naming it: never silently retrained, never mixed into a report of other settings. The
experiment writes its report only when every run of its grid exists.
"""

from __future__ import annotations

import contextlib
import io
import json
import pickle
import re
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.files import write_files_atomic


def run_file(folder: Path, key: str, seed: int) -> Path:
    """Where the run of ``key`` (``/`` allowed) with ``seed`` is kept in ``folder``."""
    return Path(folder) / f"{key.replace('/', '+')}_seed{seed}.json"


#: Settings a kept run holds only when it was run the other way (``"fused_loss": true``: on
#: FastPPO's fused path, :func:`experiments.budgets.settings.on_path`; ``"tasks": "test"``:
#: scored on the test tasks, :func:`experiments.shared.task_sets.tagged`): settings without
#: one must find none in the file, else a run of the other way would pass for theirs (a
#: test run copied into a validation report's folder, say).
MARKS = ("fused_loss", "tasks")


def read_kept(path: Path, settings: dict[str, Any]) -> dict[str, Any] | None:
    """A kept file's content if it exists, ``None`` if not.

    Every key of ``settings`` must hold the same value in the file, and a key of
    :data:`MARKS` that ``settings`` lack must be absent from it.

    Raises:
        ValueError: If it exists but was run with other ``settings``, or is not a kept run.
    """
    if not path.exists():
        return None
    try:
        kept = json.loads(path.read_text(encoding="utf-8"))
        ran = {name: kept[name] for name in settings}
        ran.update({name: kept[name] for name in MARKS if name in kept and name not in settings})
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


#: The folder in ``--out`` of the units kept until a report is written (git ignores it).
UNITS = "kept_units"


def units_folder(out: Path, experiment: str, scale: str) -> Path:
    """Where ``experiment`` at ``scale`` keeps its units in ``out`` until its report is written."""
    return Path(out) / UNITS / f"{experiment}-{scale}"


class Kept:
    """Each finished unit of one experiment at one scale, a pickle of its own in ``folder``.

    ``settings`` (anything comparable: the scale's repr, say) is stored beside each
    result; a kept unit of other settings is refused rather than mixed in.
    """

    def __init__(self, folder: Path, settings: Any) -> None:
        self.folder = Path(folder)
        self.settings = settings

    def path(self, name: str) -> Path:
        """The file of unit ``name``."""
        return self.folder / f"{re.sub(r'[^A-Za-z0-9.+=-]+', '_', name)}.pickle"

    def read(self, name: str) -> tuple[bool, Any]:
        """``(True, result)`` if unit ``name`` is kept, else ``(False, None)``.

        Raises:
            ValueError: The file is not a kept unit, or of another unit or settings.
        """
        path = self.path(name)
        if not path.exists():
            return False, None
        try:
            kept = _Unpickler(io.BytesIO(path.read_bytes())).load()
            ran = (kept["name"], kept["settings"])
        except _Refused as error:  # a file that would run other code
            raise ValueError(f"{path}: {error}; delete it to run it again") from None
        except Exception:  # whatever a damaged file raises: one line
            raise ValueError(f"{path}: expected a kept unit; delete it to run it again"
                             ) from None
        if ran != (name, self.settings):
            raise ValueError(f"{path}: was run as {ran[0]!r} with {ran[1]!r}, this run needs "
                             f"{self.settings!r}; delete {self.folder} or give another --out")
        return True, kept["result"]

    def write(self, name: str, result: Any) -> None:
        """Keep unit ``name``'s result, whole or not at all."""
        record = {"name": name, "settings": self.settings, "result": result}
        buffer = io.BytesIO()
        _Pickler(buffer).dump(record)
        write_files_atomic(self.folder, {self.path(name).name: buffer.getvalue()})

    def clear(self) -> None:
        """Forget every kept unit (the report is written), and the folders left empty.

        Inside :func:`clears_deferred`, only once the whole command has finished.
        """
        if _deferred is not None:
            _deferred.append(self.folder)
            return
        _remove(self.folder)


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # another experiment's units are still there
        folder.parent.rmdir()


#: Folders whose clearing waits for :func:`clears_deferred` to end (``None``: none waits).
_deferred: list[Path] | None = None


@contextlib.contextmanager
def clears_deferred() -> Iterator[None]:
    """Keep every experiment's units until the block ends without an error.

    ``python -m experiments all`` runs several experiments in turn: were each one's units
    forgotten as soon as its files were written, running ``all`` again after a later
    experiment failed would train the finished ones again. Their units stay until the
    last experiment is done, so the same command reads them back (their files come out
    the same) and runs only what is missing.
    """
    global _deferred
    outer, _deferred = _deferred, []
    try:
        yield
    except BaseException:  # the units stay, for the same command to read back
        _deferred = outer
        raise
    folders, _deferred = _deferred, outer
    for folder in folders:
        if outer is not None:
            outer.append(folder)
        else:
            _remove(folder)


#: Modules whose classes a kept unit may hold (results are built of these): a class's
#: own ``__init__`` is all a file can call, not a function such as ``os.system``.
_OWN_PACKAGES = ("cost_envs", "agents", "experiments", "numpy", "collections", "datetime",
                 "pathlib")
_BUILTINS = {"dict", "list", "tuple", "set", "frozenset", "str", "bytes", "bytearray", "int",
             "float", "complex", "bool", "slice", "range", "object"}
#: numpy's functions that rebuild arrays, dtypes and scalars from a pickle.
_NUMPY_REBUILDERS = {("numpy.core.multiarray", "_reconstruct"),
                     ("numpy._core.multiarray", "_reconstruct"),
                     ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
                     ("numpy._core.numeric", "_frombuffer"), ("numpy.core.numeric", "_frombuffer"),
                     ("copyreg", "_reconstructor"), ("experiments.shared.kept", "_tensor")}


def _tensor(values: Any, parameter: bool, requires_grad: bool) -> Any:
    """A torch tensor (or parameter) back from the numpy array :class:`_Pickler` kept."""
    import torch

    tensor = torch.from_numpy(values.copy())
    if parameter:
        return torch.nn.Parameter(tensor, requires_grad=requires_grad)
    return tensor.requires_grad_(requires_grad)


class _Pickler(pickle.Pickler):
    """Pickles a unit's torch tensors as numpy arrays (torch's own rebuild may run code)."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")  # a unit with tensors has imported it already
        if torch is not None and isinstance(obj, torch.Tensor):
            return _tensor, (obj.detach().cpu().numpy(), isinstance(obj, torch.nn.Parameter),
                             obj.requires_grad)
        return NotImplemented


class _Refused(pickle.UnpicklingError):
    """A kept unit names a global it may not load."""


class _Unpickler(pickle.Unpickler):
    """Reads a kept unit, refusing any global but the classes of what results hold.

    The files are the run's own, in the ``--out`` it was given; still, a pickle names any
    function to call, and the project loads no file that runs code (a checkpoint is
    safetensors and JSON): a file naming anything else is refused, never loaded.
    """

    def find_class(self, module: str, name: str) -> Any:
        found = super().find_class(module, name)
        if ((module, name) in _NUMPY_REBUILDERS
                or (module == "builtins" and name in _BUILTINS)
                or (isinstance(found, type) and module.split(".")[0] in _OWN_PACKAGES)):
            return found
        raise _Refused(f"a kept unit may not load {module}.{name}")


@dataclass(frozen=True)
class Runs:
    """Units kept as JSON run files (:func:`run_file`), which a report names.

    ``path`` and ``settings`` give a unit's file and what it must have been run with
    (:func:`read_kept`); ``encode`` turns a result into the file's content and
    ``decode`` the content back into the result.
    """

    path: Callable[[str], Path]
    settings: Callable[[str], dict[str, Any]]
    encode: Callable[[str, Any], dict[str, Any]] = lambda _name, result: result
    decode: Callable[[dict[str, Any]], Any] = lambda content: content

    def read(self, name: str) -> tuple[bool, Any]:
        """``(True, result)`` if unit ``name``'s file exists, else ``(False, None)``."""
        kept = read_kept(self.path(name), self.settings(name))
        return (False, None) if kept is None else (True, self.decode(kept))

    def write(self, name: str, result: Any) -> None:
        """Write unit ``name``'s file."""
        keep(self.path(name), self.encode(name, result))
