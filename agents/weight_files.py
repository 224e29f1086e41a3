"""Weights files (safetensors): the one file, header and dtype policy of every loader.

Allocator models, adapters and frozen bases
(:func:`agents.learners.common.policies.read_tensors`), the model check run before torch
is imported (:func:`agents.learners.checkpoint_paths.check_model_path`) and saved routers
(:mod:`agents.routers.state`) read their safetensors files through here:

* the path must be a regular file of at most :data:`cost_envs.limits.MAX_WEIGHTS_BYTES`
  (:func:`cost_envs.limits.check_regular_file`), checked before a byte is read, so
  ``/dev/zero``, a FIFO or a directory never blocks or fills memory (:func:`read_weights`);
* the header is checked whole before safetensors (and torch) sees the bytes
  (:func:`check_weights`): the 8-byte length, a JSON object read strictly (a repeated key
  is refused: safetensors keeps the last of two entries silently), every tensor's dtype
  one the loader accepts, its shape, and offsets that cover the data exactly. So a file
  cut short, or a header claiming more bytes than the file has, is named "truncated" in
  one line, where safetensors would say "incomplete metadata, file not fully covered";
* :func:`check_weights_file` runs the same check reading the header only, for the command
  line to answer a bad model before importing torch.

Nothing here imports torch or numpy.
"""

from __future__ import annotations

import reprlib
from collections.abc import Collection
from pathlib import Path
from typing import Any

from cost_envs.config_files import json_loads
from cost_envs.limits import MAX_WEIGHTS_BYTES, check_memory, check_regular_file

#: Longest header accepted (safetensors itself refuses 100 MB).
MAX_HEADER = 100_000_000
#: safetensors' dtype names: the element type they stand for and its bytes.
DTYPES = {"BOOL": ("bool", 1), "U8": ("uint8", 1), "I8": ("int8", 1), "I16": ("int16", 2),
          "U16": ("uint16", 2), "F16": ("float16", 2), "BF16": ("bfloat16", 2),
          "I32": ("int32", 4), "U32": ("uint32", 4), "F32": ("float32", 4),
          "I64": ("int64", 8), "U64": ("uint64", 8), "F64": ("float64", 8)}
#: The one dtype of each format: allocators' tensors (models, adapters, bases: what torch
#: trains here) and saved routers' arrays (float64, as the routers' ``save_router`` writes).
ALLOCATOR_DTYPES = ("F32",)
ROUTER_DTYPES = ("F64",)
_LENGTH = 8  # bytes of the little-endian header length


def read_weights(path: str | Path, what: str) -> bytes:
    """The bytes of the weights file ``path``, after checking it may be read whole.

    A regular file of at most :data:`~cost_envs.limits.MAX_WEIGHTS_BYTES` whose bytes and
    the arrays made from them (twice its size) fit in the memory available. The content is
    not checked: call :func:`check_weights` on it.

    Args:
        path: The file.
        what: What it is, for messages (``"model weights"``, ``"router weights"``).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: One line naming ``what``, the path and what was expected.
    """
    size = check_regular_file(path, what, MAX_WEIGHTS_BYTES)
    check_memory(2 * size, f"{what} {path} ({size} bytes)")
    try:
        with open(path, "rb") as handle:
            return handle.read(size)  # the size checked: no more, should it have grown
    except OSError as error:
        raise ValueError(f"{what}: cannot read {path} ({error.strerror or error})") from None


def check_weights(content: bytes, where: str, dtypes: Collection[str]) -> None:
    """Refuse safetensors bytes that are not one complete file of ``dtypes`` tensors.

    Args:
        content: The whole file.
        where: How messages name it (its path).
        dtypes: The safetensors dtypes the loader accepts (``("F32",)``).

    Raises:
        ValueError: ``<where>: not a valid safetensors file (<problem>)``, or naming the
            tensor whose dtype is not accepted.
    """
    length = _header_length(content[:_LENGTH], len(content), where)
    _check_header(content[_LENGTH:_LENGTH + length], len(content), where, dtypes)


def check_weights_file(path: str | Path, what: str, dtypes: Collection[str]) -> int:
    """:func:`read_weights`' file checks and :func:`check_weights`' on the header alone.

    Reads the header only (the tensors' bytes are compared with the file's size), so it is
    cheap and needs no torch: the command line runs it before importing torch.

    Returns:
        The file's size in bytes.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: As :func:`read_weights` and :func:`check_weights`.
    """
    size = check_regular_file(path, what, MAX_WEIGHTS_BYTES)
    try:
        with open(path, "rb") as handle:
            length = _header_length(handle.read(_LENGTH), size, str(path))
            header = handle.read(length)
    except OSError as error:
        raise ValueError(f"{what}: cannot read {path} ({error.strerror or error})") from None
    _check_header(header, size, str(path), dtypes)
    return size


def _invalid(where: str, problem: str) -> ValueError:
    return ValueError(f"{where}: not a valid safetensors file ({problem})")


def _header_length(first: bytes, size: int, where: str) -> int:
    """The header's length from the file's first bytes, checked against the file's size."""
    if size < _LENGTH or len(first) < _LENGTH:
        raise _invalid(where, f"truncated: {size} bytes, fewer than the {_LENGTH} of the "
                              "header length")
    length = int.from_bytes(first[:_LENGTH], "little")
    if length > MAX_HEADER:
        raise _invalid(where, f"the header length says {length} bytes, more than the limit "
                              f"of {MAX_HEADER}")
    if length > size - _LENGTH:
        raise _invalid(where, f"truncated: the header length says {length} bytes, the file "
                              f"has {size - _LENGTH} after it")
    if length < 2:
        raise _invalid(where, f"header of {length} bytes, too short for a JSON object")
    return length


def _check_header(header: bytes, size: int, where: str, dtypes: Collection[str]) -> None:
    """Check the JSON header of a file of ``size`` bytes (see :func:`check_weights`)."""
    try:
        parsed = json_loads(header.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise _invalid(where, f"header: {' '.join(str(error).split())}") from None
    if not isinstance(parsed, dict):
        raise _invalid(where, f"header: expected a JSON object, got {type(parsed).__name__}")
    metadata = parsed.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise _invalid(where, "header: __metadata__: expected an object of strings")
    spans = sorted((_span(name, entry, where, dtypes), name) for name, entry in parsed.items())
    data = size - _LENGTH - len(header)
    end = 0
    for (begin, stop), name in spans:
        if begin != end:
            raise _invalid(where, f"tensor {_short(name)} starts at byte {begin} of the data, "
                                  f"expected {end} (tensors overlap or leave a gap)")
        end = stop
    if end > data:
        raise _invalid(where, f"truncated: the header's tensors take {end} bytes, the file "
                              f"has {data} after the header")
    if end < data:
        raise _invalid(where, f"{data - end} bytes after the last tensor's data")


def _span(name: str, entry: Any, where: str, dtypes: Collection[str]) -> tuple[int, int]:
    """A tensor entry's ``(begin, end)`` offsets after checking its dtype and shape."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise _invalid(where, f"tensor {_short(name)}: expected an object of dtype, shape and "
                              f"data_offsets, got {_short(entry)}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in dtypes:
        known = isinstance(dtype, str) and dtype in DTYPES
        got = f"{DTYPES[dtype][0]} ({dtype})" if known else _short(dtype)
        wanted = " or ".join(DTYPES[d][0] if d in DTYPES else d for d in dtypes)
        raise ValueError(f"{where}: tensor {_short(name)}: expected a {wanted} tensor, got {got}")
    if not (isinstance(shape, list) and all(_natural(n) for n in shape)):
        raise _invalid(where, f"tensor {_short(name)}: shape: expected a list of integers >= 0, "
                              f"got {_short(shape)}")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_natural, offsets))
            and offsets[0] <= offsets[1]):
        raise _invalid(where, f"tensor {_short(name)}: data_offsets: expected [begin, end] with "
                              f"0 <= begin <= end, got {_short(offsets)}")
    span = offsets[1] - offsets[0]
    need = DTYPES[dtype][1]
    for size in shape:  # stops early: a crafted shape of huge numbers is no long product
        need *= size
        if need > span:
            break
    shown = str(shape) if len(shape) <= 8 else f"of {len(shape)} dimensions"
    if need != span and 0 not in shape:
        raise _invalid(where, f"tensor {_short(name)}: shape {shown} of {dtype} takes "
                              f"{'more than ' if need > span else ''}{need} bytes, its "
                              f"data_offsets {span}")
    if 0 in shape and span:
        raise _invalid(where, f"tensor {_short(name)}: an empty shape {shown} takes 0 bytes, its "
                              f"data_offsets {span}")
    return offsets[0], offsets[1]


def _short(value: Any) -> str:
    """``repr(value)`` of at most about 100 characters: a crafted header's may be huge."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 100 else repr(value[:100]) + "..."
    text = reprlib.repr(value)
    return text if len(text) <= 100 else text[:97] + "..."


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
