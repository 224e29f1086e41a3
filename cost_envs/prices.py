"""Token price tables: what a model call costs, with each price's source and date.

Environments that bill by tokens (ExpertRouting, AgenticRouting, TraceRouting) read a
:class:`PriceTable`. The packaged default, ``cost_envs/data/prices.yaml``, covers the
models they use; users pass their own table as a dict, a JSON file or a YAML file::

    currency: USD
    unit: per_million_tokens
    models:
      - name: gpt-4.1              # as the environment or the data names the model
        input: 2.00                # price per million input tokens
        output: 8.00               # price per million output tokens
        reasoning: 8.00            # optional: per million reasoning tokens (default: output)
        active_params_billion: 200 # optional: for FLOPs = 2 x params x tokens (default 0)
        params_source: estimate    # optional: where the parameter count comes from
        source: https://openai.com/api/pricing/   # required: where the price comes from
        date: 2025-04-14                          # required: when it was listed

Unknown keys, missing sources or dates, negative or non-finite prices and duplicate names
are errors naming the file and the entry.

A user table (a dict or a file) is merged onto the packaged one by :func:`coerce_prices`:
it lists only the models whose prices it changes or adds, each entry complete (its own
source and date, since a new price needs its own). A :class:`PriceTable` object passed
as it is stays exactly that table, and so does a table in another currency than the
packaged one's (mixing currencies in one table would be wrong): every model an env uses
must then be in it.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from cost_envs.config import number, one_of, records, reject_unknown, text
from cost_envs.config_files import FileTable, parse_config_text

_TABLE_KEYS = ("currency", "unit", "models")
_MODEL_KEYS = ("name", "input", "output", "reasoning", "active_params_billion",
               "params_source", "source", "date")
_REQUIRED_MODEL_KEYS = ("name", "input", "output", "source", "date")
UNIT = "per_million_tokens"


#: A token count, or an array of them: prices work elementwise.
Tokens = TypeVar("Tokens", float, np.ndarray)


@dataclass(frozen=True)
class ModelPrice:
    """One model's token prices (per million tokens) and where they come from.

    Args:
        name: The model's name, as environments and data files refer to it.
        input: Price per million input (prompt) tokens.
        output: Price per million output tokens.
        reasoning: Price per million reasoning tokens (``None``: the output price).
        active_params_billion: Active parameters, for FLOPs = 2 x params x tokens.
        params_source: Where the parameter count comes from ("estimate" if unpublished).
        source: Where the prices come from (a URL or a citation).
        date: When the prices were listed, ``YYYY-MM-DD``.
    """

    name: str
    input: float
    output: float
    source: str
    date: str
    reasoning: float | None = None
    active_params_billion: float = 0.0
    params_source: str = ""

    def __post_init__(self) -> None:
        text(self.name, "name")
        where = f"model {self.name!r}"
        for key in ("input", "output", "reasoning", "active_params_billion"):
            value = getattr(self, key)
            if value is None and key == "reasoning":
                continue
            object.__setattr__(self, key, number(value, key, minimum=0, where=where))
        for key in ("source", "date"):
            value = getattr(self, key)
            if isinstance(value, dt.date):  # YAML reads an unquoted 2025-04-14 as a date
                value = value.isoformat()
                object.__setattr__(self, key, value)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(
                    f"{where}: {key}: expected a non-empty string (every price says where "
                    f"and when it was listed), got {value!r}"
                )
        try:
            if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", self.date):
                raise ValueError  # fromisoformat alone also takes 20250414 and week dates
            dt.date.fromisoformat(self.date)
        except ValueError:
            raise ValueError(
                f"{where}: date: expected YYYY-MM-DD, got {self.date!r}"
            ) from None
        if not isinstance(self.params_source, str):
            raise ValueError(f"{where}: params_source: expected a string, "
                             f"got {self.params_source!r}")

    @property
    def reasoning_price(self) -> float:
        """Price per million reasoning tokens (billed as output unless stated)."""
        return self.output if self.reasoning is None else self.reasoning

    def cost(self, input_tokens: Tokens, output_tokens: Tokens,
             reasoning_tokens: float | Tokens = 0.0) -> Tokens:
        """Money for one call with these token counts (or for arrays of calls)."""
        return (input_tokens * self.input + output_tokens * self.output
                + reasoning_tokens * self.reasoning_price) / 1e6

    def flops(self, tokens: Tokens) -> Tokens:
        """Forward-pass FLOPs for ``tokens`` tokens: ``2 * active params * tokens``."""
        return 2.0 * self.active_params_billion * 1e9 * tokens


@dataclass(frozen=True)
class PriceTable(FileTable):
    """Token prices of several models, looked up by name.

    Args:
        models: The models' prices; names must be unique.
        currency: Currency of every price (the default table uses ``"USD"``).
        source: The file the table was read from (``""`` if none): errors that an env
            raises about the table name it.
    """

    models: tuple[ModelPrice, ...]
    currency: str = "USD"
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        names = [m.name for m in self.models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"duplicate model name(s) {duplicates}")
        if not self.models:
            raise ValueError("models: expected at least one model")

    def __getitem__(self, name: str) -> ModelPrice:
        for model in self.models:
            if model.name == name:
                return model
        raise KeyError(f"no price for model {name!r}; the table has {list(self.names)}")

    def __contains__(self, name: object) -> bool:
        return any(m.name == name for m in self.models)

    def __iter__(self) -> Iterator[ModelPrice]:
        return iter(self.models)

    @property
    def names(self) -> tuple[str, ...]:
        """Model names in table order."""
        return tuple(m.name for m in self.models)

    @property
    def label(self) -> str:
        """``"price table <file>"``, or ``"price table"`` for a table not read from a file."""
        return f"price table {self.source}" if self.source else "price table"

    def require(self, names: list[str] | tuple[str, ...], source: str = "price table") -> None:
        """Raise ``ValueError`` naming every model of ``names`` the table has no price for.

        The message starts with ``source`` (who needs the prices) and names the table's
        file when it was read from one.
        """
        missing = [n for n in names if n not in self]
        if missing:
            packaged = default_price_table().currency
            why = ("" if self.currency == packaged else
                   f" (its currency is {self.currency!r}, not the packaged table's "
                   f"{packaged!r}, so it is not merged onto it and must price every model "
                   "the env uses)")
            raise ValueError(f"{source}: no price for model(s) {missing}; the {self.label} "
                             f"has {list(self.names)}{why}")

    def over(self, base: PriceTable) -> PriceTable:
        """This table merged onto ``base``: its models replace base's of the same name.

        Base's models keep their order, each replaced whole (no field is inherited: a new
        price carries its own source and date); models only this table has come after.
        The result keeps this table's ``source``, so errors name the user's file.

        Raises:
            ValueError: The two tables are in different currencies.
        """
        if self.currency != base.currency:
            raise ValueError(f"{self.label}: currency {self.currency!r} differs from "
                             f"{base.currency!r} of the table it would be merged onto")
        mine = {m.name: m for m in self.models}
        merged = [mine.pop(m.name, m) for m in base.models]
        return PriceTable((*merged, *mine.values()), self.currency, source=self.source)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>",
                  file: str = "") -> PriceTable:
        """Build a table from its dict form (the schema in the module doc).

        ``source`` prefixes every error message; ``file``, the file the data was read from,
        is kept as the table's ``source`` (``""``: none).
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: expected a mapping with keys {list(_TABLE_KEYS)}, "
                             f"got {type(data).__name__}")
        reject_unknown(data, _TABLE_KEYS, source)
        # null for an optional key means absent (YAML's `key:` with no value reads as null)
        unit, currency = data.get("unit"), data.get("currency")
        one_of(UNIT if unit is None else unit, "unit", (UNIT,), where=source)
        currency = text("USD" if currency is None else currency, "currency", where=source)
        models = records(
            data.get("models"), "models", source,
            lambda entry: ModelPrice(**{key: value for key, value in entry.items()
                                        if value is not None or key in _REQUIRED_MODEL_KEYS}),
            allowed=_MODEL_KEYS, required=_REQUIRED_MODEL_KEYS,
            not_a_mapping=lambda entry: f"expected a mapping, got {entry!r}")
        try:
            return cls(tuple(models), currency, source=file)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None


@functools.cache
def default_price_table() -> PriceTable:
    """The packaged table (``cost_envs/data/prices.yaml``), parsed once per process.

    Every env that bills by tokens asks for it, and parsing the YAML costs milliseconds
    per env; the table is frozen, so one shared instance is safe.
    """
    source = "cost_envs/data/prices.yaml"
    content = resources.files("cost_envs").joinpath("data/prices.yaml").read_text(encoding="utf-8")
    return PriceTable.from_dict(parse_config_text(content, source, "yaml"), source=source,
                                file=source)


def coerce_prices(prices: PriceTable | Mapping[str, Any] | str | Path | None) -> PriceTable:
    """Accept a table, its dict form, a path to a table file, or ``None`` for the default.

    A dict or a file is a user table: it is validated alone (errors name the file, the
    entry and the field) and then merged onto the packaged table (:meth:`PriceTable.over`),
    so it need list only the models it changes. A :class:`PriceTable` is used as it is,
    and a user table in another currency than the packaged one is not merged.
    """
    if prices is None:
        return default_price_table()
    if isinstance(prices, PriceTable):
        return prices
    if isinstance(prices, Mapping):
        return _onto_default(PriceTable.from_dict(prices))
    if isinstance(prices, (str, Path)):
        return _onto_default(PriceTable.from_file(prices))
    raise ValueError(
        f"prices: expected a PriceTable, a mapping, a file path or None, got {prices!r}"
    )


def _onto_default(table: PriceTable) -> PriceTable:
    """``table`` merged onto the packaged table, or alone if its currency differs."""
    base = default_price_table()
    return table.over(base) if table.currency == base.currency else table
