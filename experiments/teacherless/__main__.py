"""``python -m experiments.teacherless``: :func:`experiments.teacherless.runner.main`."""

from experiments.teacherless.runner import main

if __name__ == "__main__":
    main()
