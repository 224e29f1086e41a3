"""``python -m experiments.teacher_memory``: :func:`experiments.teacher_memory.runner.main`."""

from experiments.teacher_memory.runner import main

if __name__ == "__main__":  # spawned workers import this module without running it
    main()
