"""Each mechanism's tests fail when the mechanism is broken (issue #23, point 6).

An audit broke mechanisms in a copy of the source and their tests still passed. Each
:class:`Mutation` here is that break, written as explicit text edits: the source packages
are copied to a temporary directory, the edits are applied to the copy (never to the
checkout), and the named tests run in a subprocess with the copy first on the path. They
must fail (pytest's exit status 1: tests ran and failed, not "not found" or "no tests").

An edit whose text is not found exactly once fails loudly, so a refactor of the source
cannot make a mutation silently vacuous: update the edit to the new code instead.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The packages copied (the tests import all three).
PACKAGES = ("agents", "cost_envs", "experiments")


@dataclass(frozen=True)
class Mutation:
    """A break of one mechanism and the tests that must catch it.

    Attributes:
        name: What is broken (the test id).
        path: The source file edited, relative to the repository root.
        edits: ``(old, new)`` text replacements; each ``old`` must occur exactly once.
        tests: Test node ids (relative to the repository root) that must each fail; an id
            without parameters fails when any of its parameters does.
        slow: The tests train a policy (tens of seconds): marked ``slow``.
        also: More ``(path, edits)`` pairs broken together with ``path`` (one mechanism
            can live in two places, e.g. SB3's path and FastPPO's).
    """

    name: str
    path: str
    edits: tuple[tuple[str, str], ...]
    tests: tuple[str, ...]
    slow: bool = False
    also: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()

    @property
    def module(self) -> str:
        """The dotted name of the edited module."""
        return self.path.removesuffix(".py").replace("/", ".")


#: The "RL changes decisions" tests that train an allocator until it improves.
RL_DECISIONS = tuple(
    f"tests/test_rl_moves_decisions.py::{name}" for name in (
        "test_ppo_changes_decisions_of_its_initial_policy[0.0003-True]",
        "test_lora_guided_ppo_changes_decisions_of_its_warm_start[0.001-True]",
        "test_corl_tier_adapters_change_decisions_of_the_shared_policy"))

BOPO_DECISIONS = ("tests/test_rl_moves_decisions.py::"
                  "test_bopo_changes_decisions_of_its_sft_warm_start[0.001-True]")

MUTATIONS = (
    # The FlightPlanner reads the plan's true route from the env's state (privileged):
    # every sampled scenario gets the route the plan really is.
    Mutation(
        "flight_planner_peeks_at_the_route",
        "agents/planning/flight.py",
        (("        route, multiplier = np.divmod(picks, len(GRID))\n",
          "        route, multiplier = np.divmod(picks, len(GRID))\n"
          "        true = (NONE, OPT, DET, BRK)[int(self.env._state[0]) + 1]\n"
          "        route = np.full_like(route, true)\n"),),
        ("tests/test_planning_flight.py::test_the_planner_cannot_see_which_route_the_plan_is",),
    ),
    # The Bayes FlightPlanner teacher does not widen its posterior to a plan's legs that
    # no particle has: it keeps the posterior it had and acts on a stale plan.
    Mutation(
        "bayes_flight_teacher_does_not_widen",
        "agents/planning/flight_bayes.py",
        (("            stacks = self._widened(turn, called, seen)\n",
          "            stacks = []\n"),),
        ("tests/test_planning_flight_bayes.py::"
         "test_a_plan_whose_legs_no_particle_has_widens_the_posterior_to_them",),
    ),
    # BudgetTier's one-hot always shows the low tier: only the budget left tells the tiers
    # apart, and only once a query has spent something.
    Mutation(
        "tier_one_hot_held_constant",
        "cost_envs/wrappers/tiers.py",
        (("extra[TIERS.index(self._tier)] = 1.0", "extra[0] = 1.0"),),
        ("tests/test_rl_moves_decisions.py::"
         "test_a_trained_corl_controller_consults_more_as_only_the_tier_rises",),
        slow=True,
    ),
    # Only the critic trains: the allocator's action distribution carries no gradient
    # (SB3's PPO path and LoRA-guided PPO's), so its decisions move only as the value loss
    # drags the shared encoder (or the adapters) along.
    Mutation(
        "allocator_trains_only_its_critic",
        "agents/learners/common/policies.py",
        (("        logits = self.action_net(features)\n",
          "        logits = self.action_net(features).detach()\n"),
         ("    def architecture(self) -> dict[str, Any]:\n",
          "    def _get_action_dist_from_latent(self, latent_pi):\n"
          "        with torch.no_grad():\n"
          "            return super()._get_action_dist_from_latent(latent_pi)\n\n"
          "    def architecture(self) -> dict[str, Any]:\n")),
        RL_DECISIONS,
        slow=True,
        # FastPPO's own path computes the logits from the action head itself, and its
        # exact backward (plain network) writes the logits' gradient by hand.
        also=(("agents/learners/ppo.py",
               (("    return plain_linear(policy.action_net, latent_pi), "
                 "plain_linear(policy.value_net, latent_vf)\n",
                 "    return plain_linear(policy.action_net, latent_pi).detach(), "
                 "plain_linear(policy.value_net, latent_vf)\n"),)),
              ("agents/learners/common/exact_backward.py",
               (("        # the heads (addmm: weight gradient grad^T h, bias gradient summed "
                 "over rows)\n",
                 "        grad_logits = torch.zeros_like(grad_logits)\n"),)),),
    ),
    # The allocator is blind to its input: its encoder sees zeros.
    Mutation(
        "allocator_blind_to_its_input",
        "agents/learners/common/policies.py",
        (("        hidden = observations\n", "        hidden = observations * 0.0\n"),),
        RL_DECISIONS,
        slow=True,
        # FastPPO's exact backward and its rollout's forward (plain network) run the
        # encoder's layers themselves.
        also=(("agents/learners/common/exact_backward.py",
               (("        hidden = obs if obs.dtype == torch.float32 else obs.float()\n",
                 "        hidden = obs.float() * 0.0\n"),)),
              ("agents/learners/ppo.py",
               (("        hidden = obs.float()\n", "        hidden = obs.float() * 0.0\n"),))),
    ),
    # BoPO's RL stage trains only the critic: the optimizer holds the value network only.
    Mutation(
        "bopo_trains_only_its_critic",
        "agents/learners/bopo_sft.py",
        (("    quiet_logger(model)\n    return model\n",
          "    quiet_logger(model)\n"
          "    model.policy.optimizer = type(model.policy.optimizer)(\n"
          "        [p for n, p in model.policy.named_parameters() if 'value' in n],\n"
          "        lr=learning_rate)\n"
          "    return model\n"),),
        (BOPO_DECISIONS,),
        slow=True,
    ),
    # BoPO's router (the trained policy as an allocator) is blind to its input.
    Mutation(
        "bopo_router_blind_to_its_input",
        "agents/learners/bopo_sft.py",
        (("        hidden = np.asarray(observation, dtype=np.float64)\n",
          "        hidden = 0.0 * np.asarray(observation, dtype=np.float64)\n"),),
        (BOPO_DECISIONS,),
        slow=True,
    ),
    # The trace router's word features (hashed n-grams) are zeroed: only the text
    # statistics (length, numbers, sentences, ...) remain.
    Mutation(
        "router_without_word_features",
        "agents/routers/features.py",
        (("weight * text])", "0.0 * text])"),),
        ("tests/test_trace_router.py::test_router_learns_a_visible_difficulty",),
    ),
    # HardBudget lets an episode spend up to 1.5x its budget (masking and truncating
    # only beyond that), while still reporting the budget it was given.
    Mutation(
        "hard_budget_overspends_by_half",
        "cost_envs/wrappers/budget.py",
        (("if self._spent + cost > self._budget:", "if self._spent + cost > 1.5 * self._budget:"),
         ("if self._spent + (total + self._cost_list[i]) <= self._budget:",
          "if self._spent + (total + self._cost_list[i]) <= 1.5 * self._budget:")),
        ("tests/test_hard_budget.py::test_hard_budget_never_lets_the_ledger_pass_the_budget",),
    ),
)


def mutated_copy(mutation: Mutation, where: Path) -> Path:
    """Copy the packages under ``where`` and apply ``mutation`` to the copy; returns it.

    Raises:
        AssertionError: An edit's text does not occur exactly once in the source.
    """
    for package in PACKAGES:
        shutil.copytree(ROOT / package, where / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for path, edits in ((mutation.path, mutation.edits), *mutation.also):
        target = where / path
        text = target.read_text()
        for old, new in edits:
            count = text.count(old)
            assert count == 1, (f"{mutation.name}: the edit's text occurs {count} times in "
                                f"{path} (expected once; update the mutation): {old!r}")
            text = text.replace(old, new)
        target.write_text(text)
    return where


def run_mutated(mutation: Mutation, copy: Path) -> subprocess.CompletedProcess[str]:
    """Run ``mutation.tests`` in a subprocess that imports the packages from ``copy``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(copy), *filter(None, [os.environ.get("PYTHONPATH", "")])]),
        OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    # The copy must be what the tests import (not the checkout nor an installed package).
    probe = subprocess.run(
        [sys.executable, "-c", f"import {mutation.module} as m; print(m.__file__)"],
        cwd=copy, env=env, capture_output=True, text=True, check=False)
    assert probe.returncode == 0, probe.stderr
    assert Path(probe.stdout.strip()) == copy / mutation.path, probe.stdout
    # cwd is the copy: `python -m` puts the working directory first on sys.path.
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"),
         *(str(ROOT / test) for test in mutation.tests)],
        cwd=copy, env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize("mutation", [
    pytest.param(m, id=m.name, marks=[pytest.mark.slow] if m.slow else []) for m in MUTATIONS])
def test_the_tests_of_a_mechanism_fail_when_it_is_broken(mutation: Mutation,
                                                        tmp_path: Path) -> None:
    result = run_mutated(mutation, mutated_copy(mutation, tmp_path))
    output = f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    # 1: tests ran and some failed (2-5 would be an interruption, a usage error or no tests)
    assert result.returncode == 1, (
        f"{mutation.name}: expected {list(mutation.tests)} to fail, pytest exited "
        f"{result.returncode}\n{output}")
    failed = [line for line in result.stdout.splitlines() if line.startswith("FAILED ")]
    for test in mutation.tests:  # each named test (any of its parameters) failed
        assert any(test in line for line in failed), f"{mutation.name}: {test} passed\n{output}"


def test_an_edit_that_no_longer_applies_fails_loudly(tmp_path: Path) -> None:
    stale = Mutation("stale", MUTATIONS[0].path, (("text that is not in the source", ""),),
                     MUTATIONS[0].tests)
    with pytest.raises(AssertionError, match="occurs 0 times"):
        mutated_copy(stale, tmp_path)
