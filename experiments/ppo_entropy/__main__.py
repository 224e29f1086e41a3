"""``python -m experiments.ppo_entropy``: :func:`experiments.ppo_entropy.runner.main`."""

from experiments.ppo_entropy.runner import main

if __name__ == "__main__":  # spawned workers import this module without running it
    main()
