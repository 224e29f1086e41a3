"""One sweep's results file, the YAML that :mod:`experiments.tune.runner` writes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from experiments.shared.common import machine


def render(record: Mapping[str, Any], scale: str, address: str | None) -> str:
    """The results file of one sweep, as YAML with a header comment."""
    from importlib.metadata import version

    header = (f"# Tuned {record['label']} on {record['env_id']}: `python -m experiments tune "
              f"--scale {scale}`{'' if address is None else f' --address {address}'}.\n"
              "# Chosen: the trial with the best validation score; its configuration is "
              "`chosen`.\n")
    body = {**record, "scale": scale, "where": address or "local",
            "machine": machine(),
            "versions": {name: version(name) for name in ("ray", "optuna")}}
    return header + yaml.dump(body, Dumper=_PlainDumper, sort_keys=False, width=100)


class _PlainDumper(yaml.SafeDumper):
    """YAML's safe dumper, writing a repeated value out again instead of an alias."""

    def ignore_aliases(self, data: Any) -> bool:
        return True
