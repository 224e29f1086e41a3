"""``cost-envs serve``: the OpenAI-compatible routing server with hard budgets.

::

    cost-envs serve --config serve.yaml [--host 127.0.0.1] [--port 8000]

The configuration (:mod:`agents.serve.config`) is read and checked, and the ``serve``
extra looked up, before FastAPI, uvicorn or a router is imported: a bad key of the file
is one line on stderr and status 1, at once. The server (:mod:`agents.serve.app`) then
loads its routers, opens its ledger (releasing the reservations a killed server left) and
listens until Ctrl-C. See docs/serving.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.cli.arguments import int_at_least
from cost_envs.extras import install_hint, missing_modules

#: The modules of the ``serve`` extra the server needs.
SERVE_MODULES = ("fastapi", "uvicorn", "httpx")


def add_serve(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``serve``."""
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
