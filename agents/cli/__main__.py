"""``python -m agents.cli``: the ``cost-envs`` command."""

import sys

from agents.cli.main import main

if __name__ == "__main__":  # importing it (as the import tests do) runs nothing
    sys.exit(main())
