"""``python -m experiments.converged``: :func:`experiments.converged.runner.main`."""

from experiments.converged.runner import main

if __name__ == "__main__":  # spawned workers import this module without running it
    main()
