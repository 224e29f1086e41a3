"""``python -m experiments.memory``: :func:`experiments.memory.runner.main`."""

import sys

from experiments.memory.runner import main

if __name__ == "__main__":  # spawned workers import this module without running it
    sys.exit(main())
