"""The checks on a checkpoint's path that need no torch: run before torch is imported.

:mod:`agents.learners.checkpoints` (which imports torch, SB3 and safetensors) saves and
loads the checkpoints; what only looks at the file system lives here, so that the command
line answers a missing model or an unwritable ``--out`` (``train``, ``pretrain``) at once,
not after the seconds importing torch takes (issue #26). :mod:`agents.learners.checkpoints` and
:mod:`agents.learners.pretrain` (the base's two files) re-export their names.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

from agents.files import check_creatable, is_directory_or_absent
from agents.weight_files import ALLOCATOR_DTYPES, check_weights_file
from cost_envs.config_files import read_config_file
from cost_envs.limits import MAX_CONFIG_BYTES, check_regular_file

MODEL_FORMAT = "cost-envs-allocator"
ADAPTER_FORMAT = "cost-envs-adapter"
#: The files of a model directory.
MODEL_FILES = ("model.safetensors", "config.json")


class UnsafeCheckpointError(ValueError):
    """A checkpoint would have to be unpickled and the caller did not say it is trusted."""


def is_sb3_zip(path: Path) -> bool:
    """Whether ``path`` is a file that is (or is named as) a Stable-Baselines3 ``.zip``."""
    return path.is_file() and (path.suffix == ".zip" or zipfile.is_zipfile(path))


def check_model_path(path: str | Path, trust_pickle: bool = False) -> Path:
    """Raise unless ``path`` looks like a model :func:`load_allocator` can open.

    Checks what is on disk, reading the weights' header only: ``path`` exists; an SB3
    ``.zip`` is allowed only with ``trust_pickle``; a directory holds :data:`MODEL_FILES`,
    regular files within the size limits, and the weights' header describes a complete
    file of float32 tensors (:func:`agents.weight_files.check_weights_file`).

    Raises:
        FileNotFoundError: ``path`` or one of the model's files is missing.
        UnsafeCheckpointError: ``path`` is an SB3 ``.zip`` and ``trust_pickle`` is false.
        ValueError: A model file is not a regular file, too large, truncated or of
            another dtype (one line naming it).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such model directory or file")
    if is_sb3_zip(path):
        if not trust_pickle:
            raise UnsafeCheckpointError(
                f"{path} is a Stable-Baselines3 .zip: its 'data' entry is deserialised "
                "with cloudpickle, which can run any code the file contains. Load it only "
                "if you trust where it came from, with trust_pickle=True (--trust-pickle "
                "on the command line). Models saved by cost-envs (a directory with "
                "model.safetensors and config.json) load without unpickling."
            )
        return path
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such model directory")
    for name in MODEL_FILES:
        if not (path / name).exists():
            raise FileNotFoundError(f"{path}: missing {name} (expected {list(MODEL_FILES)})")
    check_regular_file(path / "config.json", "model config", MAX_CONFIG_BYTES)
    check_weights_file(path / "model.safetensors", "model weights", ALLOCATOR_DTYPES)
    return path


def check_writable(directory: str | Path, expected_format: str = MODEL_FORMAT) -> Path:
    """Raise ``ValueError`` unless ``directory`` may be (over)written by a save.

    A save replaces the whole directory, so it may only be new, empty, or a checkpoint of
    the same kind; anything else is refused rather than deleted. Its parent must be a
    directory this process can write in (or be creatable in one). Run it before long work.
    """
    directory = Path(directory)
    if not is_directory_or_absent(directory):
        raise ValueError(f"{directory} exists and is not a directory")
    check_creatable(directory)  # a save writes its new version beside the old one
    try:
        if not any(directory.iterdir()):
            return directory
    except FileNotFoundError:  # absent, or a concurrent save has just moved it aside
        return directory
    config_name = "config.json" if expected_format == MODEL_FORMAT else "adapter_config.json"
    found = None
    # Two looks: a concurrent save may swap the directory between the listing and the read.
    for _ in range(2):
        try:
            found = read_config_file(directory / config_name).get("format")
            break
        except FileNotFoundError:
            if not directory.exists():
                return directory
        except (OSError, ValueError, AttributeError):
            break
    if found != expected_format:
        raise ValueError(f"{directory} is not empty and is not a {expected_format} "
                         "checkpoint; saving would delete its contents. Choose a new or "
                         "empty directory")
    return directory


def base_files(path: str | Path) -> tuple[Path, Path]:
    """The weights and config files :func:`save_base` writes for ``path``.

    ``<path>.safetensors`` and ``<path>.json``; a ``path`` already ending in
    ``.safetensors`` is used as is.
    """
    path = Path(path)
    weights = path if path.suffix == ".safetensors" else path.with_name(
        f"{path.name}.safetensors")
    return weights, weights.with_suffix(".json")


def check_base_writable(path: str | Path) -> tuple[Path, Path]:
    """Raise ``ValueError`` unless :func:`save_base` can write ``path``'s two files.

    Run it before :func:`pretrain_base`, so that a bad output path fails at once.

    Returns:
        The weights and config files, as :func:`base_files`.
    """
    files = base_files(path)
    for file in files:
        if file.exists() and not file.is_file():
            raise ValueError(f"{file} exists and is not a file")
        check_creatable(file)
    return files
