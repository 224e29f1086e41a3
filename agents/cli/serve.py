"""``cost-envs serve``: the OpenAI-compatible routing server with hard budgets.

::

    cost-envs serve --config serve.yaml [--host 127.0.0.1] [--port 8000]
    cost-envs serve export --config serve.yaml --out traces.jsonl [--models M ...]

The configuration (:mod:`agents.serve.config`) is read and checked, and the ``serve``
extra looked up, before FastAPI, uvicorn or a router is imported: a bad key of the file
is one line on stderr and status 1, at once. The server (:mod:`agents.serve.app`) then
loads its routers, opens its ledger (releasing the reservations a killed server left) and
listens until Ctrl-C; ``kill -HUP`` or ``POST /admin/reload`` (with the admin key) reloads
its routers from their files (a router retrained in place) without a restart. ``export``
writes the ledger's calls that clients scored (``POST /v1/feedback``) as a trace file
``load_traces`` reads (:mod:`agents.serve.export`). See docs/serving.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from agents.cli.arguments import int_at_least
from cost_envs.extras import install_hint, missing_modules

if TYPE_CHECKING:
    from agents.serve.config import ServeConfig

#: The modules of the ``serve`` extra the server needs.
SERVE_MODULES = ("fastapi", "uvicorn", "httpx")


def add_serve(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``serve`` (and of ``serve export``)."""
    parser.add_argument("action", nargs="?", choices=("export",), default=None,
                        help="export: write the scored calls as a trace file")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="export: the .jsonl trace file to write")
    parser.add_argument("--models", nargs="+", default=None, metavar="MODEL",
                        help="export: the models each written prompt was scored on "
                             "(default: all that have scores)")
    parser.add_argument("--config", type=Path, required=True, metavar="FILE",
                        help="the server's YAML configuration (docs/serving.md)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default: %(default)s)")
    parser.add_argument("--port", type=int_at_least(1, "a port in [1, 65535]", 65535),
                        default=8000, help="port to listen on (default: %(default)s)")


def run_serve(args: argparse.Namespace) -> int:
    """Check the configuration, then serve until interrupted."""
    from agents.serve.config import load_config

    try:
        config = load_config(args.config)
    except FileNotFoundError:
        raise SystemExit(f"cost-envs serve: --config: no such file: {args.config}") from None
    except ValueError as err:
        raise SystemExit(f"cost-envs serve: {err}") from None
    if args.action == "export":
        return _export(args, config)
    if args.out is not None or args.models is not None:
        raise SystemExit("cost-envs serve: --out/--models: only with 'serve export'")
    missing = missing_modules(SERVE_MODULES)
    if missing:
        raise SystemExit(f"cost-envs serve: needs the 'serve' extra, which is not installed "
                         f"(missing: {', '.join(missing)}): {install_hint('serve')}")
    import uvicorn

    from agents.serve.app import create_app

    try:
        app = create_app(config)
    except (ValueError, OSError) as err:
        raise SystemExit(f"cost-envs serve: {err}") from None
    print(f"cost-envs serve: {len(config.models)} models, {len(config.routes)} routes, "
          f"ledger {config.storage}, on http://{args.host}:{args.port}/v1", flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def _export(args: argparse.Namespace, config: ServeConfig) -> int:
    from agents.serve.export import export_traces
    from agents.serve.ledger import Ledger
    from agents.serve.storage import open_storage

    if args.out is None:
        raise SystemExit("cost-envs serve export: --out: expected the .jsonl file to write")
    try:
        ledger = Ledger(open_storage(config.storage), config.keys, config.organisations)
        summary = export_traces(ledger, args.out, args.models)
    except (ValueError, ImportError) as err:
        raise SystemExit(f"cost-envs serve export: {err}") from None
    print(f"cost-envs serve export: {summary.queries} prompts x {len(summary.models)} models "
          f"({', '.join(summary.models)}) -> {summary.path}; {summary.incomplete} scored "
          "prompts left out (not scored on every model)")
    return 0
