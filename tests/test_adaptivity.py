"""The environments make adaptivity pay (issue #2's design targets), on a fixed task set.

Random is poor, calling everything succeeds often but at a high cost per success, and no
fixed rule reaches the hindsight oracle's CPS. If a change to a generative model breaks
one of these, the benchmark stops discriminating between allocators.
"""

from __future__ import annotations

import pytest

import cost_envs
from agents.baselines import BASELINES
from agents.evaluation import compare

EPISODES = 400


#: FlightPlanner-v1 in the slow tier (issue #36): it is v0's tasks and dynamics with a
#: longer observation, and in the fast tier tests/test_flight_planner_v1.py plays the two
#: in lockstep (rewards, infos and v0's slots of the observation equal at every step) and
#: finds v0's oracle, so its scores here are v0's to the digit.
PARAMS = [pytest.param(env_id, marks=pytest.mark.slow) if env_id == "cost_envs/FlightPlanner-v1"
          else env_id for env_id in sorted(cost_envs.ENV_IDS)]


@pytest.fixture(scope="module", params=PARAMS)
def scores(request: pytest.FixtureRequest) -> dict[str, dict]:
    return compare(dict(BASELINES), request.param, episodes=EPISODES, seed=7, n_resamples=10)


def test_no_baseline_reaches_the_oracle_cps(scores: dict[str, dict]) -> None:
    # The closest, capability match on ToolBench, sits at 1.2-1.6x over task seeds 0-5
    # (it succeeds cheaply on easy tasks and fails the rest); 1.1x leaves room for noise.
    oracle = scores["oracle"]["cps"]
    for name, summary in scores.items():
        if name != "oracle":
            assert summary["cps"] > 1.1 * oracle, name


def test_oracle_succeeds_at_least_as_often_as_anyone(scores: dict[str, dict]) -> None:
    best = max(summary["success_rate"] for summary in scores.values())
    assert scores["oracle"]["success_rate"] == best


#: How far random's success rate falls below the oracle's. In ExpertRouting a random
#: subset of experts, outvoting the controller, is right almost as often as the oracle
#: (0.88 vs 1.00 over the mixed profiles): there random is poor in cost, 16x the oracle's
#: CPS, which is what its budget tiers punish.
#: In AgenticRouting a step runs the small or the large model: random is a 50/50 mix that
#: runs the large model on half the steps, which clears most tasks (0.94 vs the oracle's
#: 1.00 at seed 7).
#: ExpertRouting-v1's shared wrong answers let random experts outvote the controller a
#: little less often (0.835 vs the oracle's 1.00 at seed 7), still at 17x its CPS.
RANDOM_SUCCESS_GAP = {"cost_envs/ExpertRouting-v0": 0.08, "cost_envs/ExpertRouting-v1": 0.08,
                      "cost_envs/AgenticRouting-v0": 0.03}
#: How many times the oracle's CPS random and call-all must cost (default 5). In
#: AgenticRouting a large step costs about 4.6x a small one and every step pays at least a
#: small one, so no policy can cost 5x the oracle per success unless it fails a lot:
#: random measures 3.2x, call-all (always the large model) 3.3x at seed 7.
CPS_FACTOR = {"cost_envs/AgenticRouting-v0": 2.0}


def test_random_is_poor(scores: dict[str, dict], request: pytest.FixtureRequest) -> None:
    env_id = request.node.callspec.params["scores"]
    assert scores["random"]["cps"] > CPS_FACTOR.get(env_id, 5) * scores["oracle"]["cps"]
    gap = RANDOM_SUCCESS_GAP.get(env_id, 0.25)
    assert scores["random"]["success_rate"] < scores["oracle"]["success_rate"] - gap


def test_calling_everything_often_succeeds_at_a_high_cps(
    scores: dict[str, dict], request: pytest.FixtureRequest
) -> None:
    env_id = request.node.callspec.params["scores"]
    assert scores["all"]["success_rate"] >= 0.5
    assert scores["all"]["cps"] > CPS_FACTOR.get(env_id, 5) * scores["oracle"]["cps"]
