"""Every script in examples/ runs and prints what it promises."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
# script -> (extra args to keep it fast, a string its output must contain)
EXPECTED = {
    "quickstart.py": ([], "episode cost"),
    "custom_pool.py": (["--episodes", "30"], "| oracle |"),
    "train_allocator.py": (["--timesteps", "512"], "| lora-ppo |"),
    "budget_tiers.py": (["--episodes", "20", "--timesteps", "512"], "| high | ppo |"),
    "text_features.py": ([], "questions 1, digits 0.057"),
}


def test_every_example_is_covered() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs(script: str) -> None:
    args, expected = EXPECTED[script]
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert expected in result.stdout
