"""The one reader of configuration files: strict YAML and JSON.

:func:`read_config_file` reads the ``.json``, ``.yaml`` and ``.yml`` files users bring
(pools, price tables, profiles) and the configs of saved models, adapters and bases;
:func:`parse_config_text` parses text already read and :func:`json_loads` one JSON
document. All three are strict where the standard parsers let a mistake through silently
or crash: a duplicate key (the last one would win), an integer too large for a float, NaN
or infinity, nesting deeper than :data:`MAX_DEPTH` levels and a recursive YAML alias are
``ValueError`` s naming the file, the key and, where the parser knows it, the line. A
UTF-8 byte-order mark is accepted. The value checks are :mod:`cost_envs.config`'s.
:class:`FileTable` gives a table users bring as a file (a pool, a price table) its
``from_file``.
"""

from __future__ import annotations

import functools
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from cost_envs.config import _shown
from cost_envs.limits import MAX_CONFIG_BYTES, check_regular_file

#: Deepest nesting of lists and mappings a configuration file may have. The schemas need
#: four levels; the limit keeps the parsers' recursion far from Python's stack limit.
MAX_DEPTH = 32
#: Largest configuration file read (pools, price tables, profiles, checkpoint configs).
MAX_BYTES = MAX_CONFIG_BYTES
#: Suffixes :func:`read_config_file` reads, by format.
CONFIG_SUFFIXES = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}


# ------------------------------------------------------------------------ file reader
def read_config_file(path: str | Path) -> Any:
    """The data of a ``.json``, ``.yaml`` or ``.yml`` file: the one reader of configuration.

    Pools, price tables and profiles, and the configs of saved models, adapters and bases
    (:mod:`agents.learners.checkpoints`) are all read here.

    Raises:
        ValueError: Naming the file, on another suffix, a file over :data:`MAX_BYTES`
            or not a regular file (``/dev/zero``, a FIFO), text that is not UTF-8, invalid
            JSON/YAML, and (naming the key too) a duplicate key, an integer too large for
            a float, NaN or infinity, nesting deeper than :data:`MAX_DEPTH` levels or a
            recursive YAML alias.
        FileNotFoundError: If ``path`` does not exist.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in CONFIG_SUFFIXES:
        raise ValueError(f"{path}: expected a .json, .yaml or .yml file, got {suffix!r}")
    check_regular_file(path, "configuration file", MAX_BYTES)  # before reading a byte
    try:
        content = path.read_text(encoding="utf-8-sig")  # a byte-order mark is no error
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text: {err}") from None
    return parse_config_text(content, str(path), CONFIG_SUFFIXES[suffix])


def parse_config_text(content: str, source: str, fmt: str) -> Any:
    """Parse ``content`` as ``fmt`` (``"json"`` or ``"yaml"``) with the checks above.

    Args:
        content: The document.
        source: Where it comes from (a path); prefixed to every error message.
        fmt: ``"json"`` or ``"yaml"``.

    Raises:
        ValueError: ``<source>: [line N: ]<key>: <problem>``, on one line.
    """
    if fmt not in ("json", "yaml"):
        raise ValueError(f"format: expected 'json' or 'yaml', got {fmt!r}")
    content = content.removeprefix("\ufeff")
    if fmt == "yaml":
        return _load_yaml(content, source)
    try:
        return json_loads(content)  # a long integer is a _LongInt the tree check names
    except json.JSONDecodeError as err:
        raise ValueError(f"{source}: line {err.lineno}, column {err.colno}: not valid JSON: "
                         f"{err.msg}") from None
    except _DocumentError as err:
        raise ValueError(f"{source}: {err}") from None
    except ValueError as err:  # no other is known; kept as a safety net
        raise ValueError(f"{source}: not valid JSON: {err}") from None


def json_loads(content: str) -> Any:
    """One JSON document, strictly (see the module doc).

    Raises:
        json.JSONDecodeError: On invalid JSON syntax.
        ValueError: ``[line N: ]<key>: <problem>`` on a duplicate key, an integer too large
            for a float, NaN or infinity, or nesting deeper than :data:`MAX_DEPTH`.
    """
    _check_json_depth(content)  # before json.loads, whose recursion has no key to name
    data = json.loads(content, object_pairs_hook=_unique_pairs, parse_int=_parse_int)
    _check_tree(data)
    return data


_Table = TypeVar("_Table", bound="FileTable")


class FileTable:
    """A table users bring as a file (a pool, a price table): ``from_file`` for free.

    A subclass builds itself from plain data in ``from_dict(data, source, file)``, where
    ``source`` prefixes every error message and ``file`` is kept as the table's own
    ``source``; reading the file is the same for every table, so it lives here.
    """

    @classmethod
    def from_dict(cls: type[_Table], data: Mapping[str, Any], source: str = "<dict>",
                  file: str = "") -> _Table:
        """Build the table from plain data, rejecting anything unexpected."""
        raise NotImplementedError

    @classmethod
    def from_file(cls: type[_Table], path: str | Path) -> _Table:
        """Load the table from a ``.json``, ``.yaml`` or ``.yml`` file (its errors name it)."""
        path = Path(path)
        return cls.from_dict(read_config_file(path), source=str(path), file=str(path))


class _DocumentError(ValueError):
    """A located problem in a parsed document (``[line N: ]<key>: <problem>``)."""


#: Digits beyond which an integer literal is too large for a float whatever its base (but
#: binary): kept as a :class:`_LongInt`, since ``int()`` refuses over 4300 digits.
LONG_INT_DIGITS = 400


class _LongInt:
    """An integer literal of over :data:`LONG_INT_DIGITS` digits, left unconverted.

    ``int()`` refuses over 4300 digits without naming the key; :func:`_check_tree`
    reports the marker with its key path instead.
    """

    __slots__ = ("digits",)

    def __init__(self, text: str) -> None:
        self.digits = text.replace("_", "").lstrip("+-")

    def __repr__(self) -> str:  # as cost_envs.config._shown shows a large int
        return (f"an integer of {len(self.digits)} digits ({self.digits[:8]}...), too large "
                "for a float")


def _parse_int(text: str) -> Any:
    return _LongInt(text) if len(text) > LONG_INT_DIGITS else int(text)


def _huge(value: Any) -> str:
    """How :func:`_check_tree` shows an integer too large for a float."""
    try:
        return _shown(value)
    except ValueError:  # over 4300 digits (from a binary or hexadecimal YAML literal)
        return f"an integer of over {sys.get_int_max_str_digits()} digits, too large for a float"


class _Duplicates(dict):
    """A JSON object with a repeated key; :func:`_check_tree` reports it with its path.

    ``object_pairs_hook`` sees an object's pairs but not where the object sits in the
    document, so the hook marks the object and the walk that knows the path raises.
    """

    duplicate: Any = None


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) == len(pairs):
        return out
    marked = _Duplicates(out)
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            marked.duplicate = key
            break
        seen.add(key)
    return marked


def _key_path(path: Sequence[Any]) -> str:
    """``agents[0].capability`` for ``("agents", 0, "capability")``; the root is "top level"."""
    if len(path) > 8:  # a deep path: its head says where, its tail how deep
        return f"{_key_path(path[:4])}...{_key_path(path[-2:]).lstrip('.')}"
    out = ""
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out or "top level"


# a string's body unrolled as runs of plain characters between escapes: the alternation
# (?:[^"\\]|\\.)* kept a backtracking entry per character (135 bytes each: 5 MB for one
# 40 kB prompt of a JSONL line)
_JSON_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')


def _check_json_depth(content: str) -> None:
    """Raise ``ValueError`` naming the line and key where JSON nests too deeply."""
    open_: list[str] = []  # "{" or "[" per open container
    path: list[Any] = []  # the key or index of each open container but the outermost
    index: list[int] = []
    key: Any = None
    for token in _JSON_TOKEN.finditer(content):
        char = token.group()
        if char[0] == '"':
            key = token.group()[1:-1]
        elif char in "{[":
            if open_:
                path.append(_unquote(key) if open_[-1] == "{" else index[-1])
            if len(open_) >= MAX_DEPTH:
                line = content.count("\n", 0, token.start()) + 1
                raise _DocumentError(f"line {line}: {_key_path(path)}: nested deeper than "
                                 f"{MAX_DEPTH} levels")
            open_.append(char)
            index.append(0)
        elif char in "}]" and open_:
            open_.pop()
            index.pop()
            if path and len(path) > len(open_) - 1:
                path.pop()
        elif char == "," and open_ and open_[-1] == "[":
            index[-1] += 1


def _unquote(raw: Any) -> Any:
    try:
        return json.loads(f'"{raw}"')
    except (ValueError, TypeError):
        return raw


def _check_tree(data: Any) -> None:
    """Raise ``ValueError`` at the first bad leaf, duplicate key or too deep a branch.

    Containers shared through YAML aliases are visited once (their height is memoised),
    so the check is linear in the document and its recursion stays within
    :data:`MAX_DEPTH` frames.
    """
    heights: dict[int, int] = {}
    open_ids: set[int] = set()

    def visit(node: Any, path: tuple[Any, ...]) -> int:
        if isinstance(node, Mapping):
            if isinstance(node, _Duplicates):
                raise _DocumentError(f"{_key_path(path)}: duplicate key {node.duplicate!r}")
            long_key = next((k for k in node if isinstance(k, _LongInt)), None)
            if long_key is not None:  # a YAML key
                raise _DocumentError(f"{_key_path(path)}: unusable key: {long_key!r}")
            items: Iterable[tuple[Any, Any]] = node.items()
        elif isinstance(node, (list, tuple)):
            items = enumerate(node)
        else:
            if isinstance(node, _LongInt):
                raise _DocumentError(f"{_key_path(path)}: expected a finite number, got {node!r}")
            if isinstance(node, float) and not math.isfinite(node):
                raise _DocumentError(f"{_key_path(path)}: expected a finite number, got {node!r}")
            if isinstance(node, int) and abs(node) > sys.float_info.max:
                raise _DocumentError(f"{_key_path(path)}: expected a finite number, "
                                 f"got {_huge(node)}")
            return 0
        if id(node) in open_ids:
            raise _DocumentError(f"{_key_path(path)}: contains itself (a recursive YAML alias)")
        height = heights.get(id(node))
        if height is None:
            if len(path) >= MAX_DEPTH:
                raise _DocumentError(f"{_key_path(path)}: nested deeper than {MAX_DEPTH} levels")
            open_ids.add(id(node))
            height = 1 + max((visit(v, (*path, k)) for k, v in items), default=0)
            open_ids.discard(id(node))
            heights[id(node)] = height
        if len(path) + height > MAX_DEPTH:  # a shared container, deep below this point
            raise _DocumentError(f"{_key_path(path)}: nested deeper than {MAX_DEPTH} levels")
        return height

    visit(data, ())


def _load_yaml(content: str, source: str) -> Any:
    import yaml  # only needed for YAML files

    try:
        data = yaml.load(content, Loader=_yaml_loader())  # a SafeLoader: no arbitrary objects
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = ": ".join(p for p in (err.context, err.problem) if p)
        raise ValueError(f"{source}: {where}not valid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{source}: not valid YAML: {' '.join(str(err).split())}") from None
    except _DocumentError as err:
        raise ValueError(f"{source}: {err}") from None
    except ValueError as err:  # an impossible date, ...
        raise ValueError(f"{source}: not valid YAML: {err}") from None
    try:
        _check_tree(data)
    except _DocumentError as err:
        raise ValueError(f"{source}: {err}") from None
    return data


@functools.cache
def _yaml_loader() -> type:
    """A ``yaml.SafeLoader`` subclass: YAML 1.2 floats, no duplicate keys, bounded nesting.

    PyYAML follows YAML 1.1, where a float needs a dot and a signed exponent, so the
    FLOP counts people naturally write (``1.4e13``) would load as strings; YAML 1.2's
    float rule is added. Its composer recurses once per nesting level, so nesting is
    counted there, before Python's recursion limit is reached.
    """
    import yaml

    class Loader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self._path: list[Any] = []
            self._node_paths: dict[int, tuple[Any, ...]] = {}

        def compose_node(self, parent: Any, index: Any) -> Any:
            part = index.value if isinstance(index, yaml.ScalarNode) else (
                "?" if index is None or isinstance(index, yaml.Node) else index)
            if parent is not None:
                self._path.append(part)
            try:
                return super().compose_node(parent, index)
            finally:
                if parent is not None:
                    self._path.pop()

        def _collection(self, compose: Any, anchor: Any) -> Any:
            if len(self._path) >= MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise _DocumentError(f"line {line}: {_key_path(self._path)}: nested deeper than "
                                 f"{MAX_DEPTH} levels")
            node = compose(anchor)
            self._node_paths[id(node)] = tuple(self._path)
            return node

        def compose_sequence_node(self, anchor: Any) -> Any:
            return self._collection(super().compose_sequence_node, anchor)

        def compose_mapping_node(self, anchor: Any) -> Any:
            return self._collection(super().compose_mapping_node, anchor)

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            first: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # merged keys may be overridden: that is what << is for
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.setdefault(key, key_node)
                except TypeError:  # an unhashable key: the base class reports it
                    continue
                if seen is not key_node:
                    path = _key_path(self._node_paths.get(id(node), ()))
                    raise _DocumentError(
                        f"line {key_node.start_mark.line + 1}: {path}: duplicate key "
                        f"{key!r} (first on line {seen.start_mark.line + 1})")
            return super().construct_mapping(node, deep)

        def construct_long_int(self, node: Any) -> Any:
            text = self.construct_scalar(node)
            digits = text.replace("_", "").lstrip("+-")
            if len(digits) > LONG_INT_DIGITS and not digits.lower().startswith("0b"):
                return _LongInt(text)  # too large for a float, and perhaps for int()
            return self.construct_yaml_int(node)

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_long_int)

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?\.(?:inf|Inf|INF)$"
                   r"|^\.(?:nan|NaN|NAN)$"),
        list("-+0123456789."),
    )
    return Loader
