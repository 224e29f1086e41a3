"""``python -m agents.cli``: the ``cost-envs`` command."""

import sys

from agents.cli.main import main

sys.exit(main())
