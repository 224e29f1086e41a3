"""``python -m experiments.learned_prior``: :func:`experiments.learned_prior.runner.main`."""

from experiments.learned_prior.runner import main

if __name__ == "__main__":  # spawned workers import this module without running it
    main()
