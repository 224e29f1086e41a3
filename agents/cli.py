"""The ``cost-envs`` command (placeholder until the CLI lands)."""


def main() -> int:
    """Entry point."""
    return 0
