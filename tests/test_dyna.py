"""Issue #38's Dyna on BDQ (agents.learners.dyna): the model, the imagination, the wiring."""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

import cost_envs  # noqa: F401  # registers the ids
from agents.learners.bdq import BranchingDQN
from agents.learners.common.policies import AllocatorPolicy
from agents.learners.dyna import DynaBDQ, LabelledReplay, OutcomeVocabulary, store
from agents.learners.training import quiet_logger, train

torch.set_num_threads(1)
ENV_ID = "cost_envs/ToolBench-v0"
#: The toy chain's law: bit 0 advances with this probability, at this cost.
ADVANCE, COST, ANSWER, GOAL = 0.75, 0.1, 0.3, 1.0


class Chain(gym.Env[np.ndarray, np.ndarray]):
    """A known stochastic transition: ``[position / 2, u]``, positions 0-2, two bits.

    Bit 1 answers: the episode terminates paying ``ANSWER``. Else bit 0 costs ``COST`` and
    advances with probability ``ADVANCE``; reaching position 3 terminates paying ``GOAL``
    (``GOAL - COST`` in all), a new position draws ``u ~ N(0.5, 0.1)``; otherwise ``u``
    stays. Idle steps pay 0.
    """

    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.MultiBinary(2)

    def __init__(self) -> None:
        self.position, self.u = 0, 0.5

    def _obs(self) -> np.ndarray:
        return np.array([self.position / 2, self.u], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.position, self.u = int(self.np_random.integers(3)), float(self.np_random.random())
        return self._obs(), {}

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        bits = np.asarray(action).astype(int)
        if bits[1]:
            return self._obs(), ANSWER, True, False, {}
        if not bits[0]:
            return self._obs(), 0.0, False, False, {}
        if self.np_random.random() < ADVANCE:
            self.position += 1
            if self.position == 3:
                self.position = 2
                return self._obs(), GOAL - COST, True, False, {}
            self.u = float(np.clip(self.np_random.normal(0.5, 0.1), 0.0, 1.0))
        return self._obs(), -COST, False, False, {}


def chain_model(seed: int = 0, **kwargs: Any) -> DynaBDQ:
    set_random_seed(seed)
    venv = DummyVecEnv([lambda: gym.wrappers.TimeLimit(Chain(), 8) for _ in range(4)])
    venv.seed(seed)
    settings = {"learning_starts": 64, "batch_size": 64, "rollout_steps": 16,
                "model_train_freq": 16, "model_gradient_steps": 16,
                "model_warmup_steps": 100, "rollout_batch": 64, "model_hidden": 32,
                "learning_rate": 3e-3, "target_update_interval": 50, **kwargs}
    model = DynaBDQ(AllocatorPolicy, venv, policy_kwargs={"hidden_sizes": (16,)}, **settings)
    quiet_logger(model)
    return model


def fill_with_chain_steps(model: DynaBDQ, steps: int, seed: int = 0) -> None:
    """``steps`` transitions of uniformly random actions into the model's real replay."""
    env = Chain()
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows: list[tuple[np.ndarray, ...]] = []
    for _ in range(steps):
        action = rng.integers(2, size=2).astype(np.int8)
        following, reward, terminated, _, _ = env.step(action)
        rows.append((obs, action, np.float32(reward), following,
                     np.float32(0.0 if terminated else model.gamma)))
        obs = env.reset()[0] if terminated else following
    store(model.replay, *(np.array(column) for column in zip(*rows, strict=True)))


@pytest.fixture(scope="module")
def fitted_chain() -> DynaBDQ:
    """The chain's model fitted once on 20,000 random steps: the costliest part of this
    module, shared by the two tests that read the fit (the other copies it first)."""
    model = chain_model(model_hidden=64, model_learning_rate=3e-3, rollout_batch=2000)
    fill_with_chain_steps(model, 20_000)
    model.fit_model(1500)
    return model


# ------------------------------------------------------------------ the model
def test_the_model_learns_the_known_toy_transition(fitted_chain: DynaBDQ) -> None:
    model = fitted_chain
    vocabulary = model.vocabulary
    assert vocabulary is not None
    # the position is discrete, u continuous
    assert model._discrete.tolist() == [True, False]
    # the position's change and whether u kept its value make the class
    advance = vocabulary._index[vocabulary.key([0.5], [False])]
    stay = vocabulary._index[vocabulary.key([0.0], [True])]
    assert vocabulary.size == 3  # terminated, advanced, stayed
    assert vocabulary.kept[stay].all() and not vocabulary.kept[advance].any()
    obs = np.array([[0.0, 0.3], [0.5, 0.7], [1.0, 0.2], [0.5, 0.4], [0.5, 0.4]], np.float32)
    actions = np.array([[1, 0], [1, 0], [1, 0], [0, 1], [0, 0]], np.int8)
    probs = model.outcome_probabilities(obs, actions)
    np.testing.assert_allclose(probs[:2, advance], ADVANCE, atol=0.06)
    np.testing.assert_allclose(probs[:2, stay], 1 - ADVANCE, atol=0.06)
    np.testing.assert_allclose(probs[2, 0], ADVANCE, atol=0.06)  # the goal terminates
    np.testing.assert_allclose(probs[3, 0], 1.0, atol=0.03)  # answering terminates
    np.testing.assert_allclose(probs[4, stay], 1.0, atol=0.03)  # idling stays
    # given the outcome: the reward, and u's law (kept when staying, drawn when advancing)
    net = model.model
    assert net is not None
    with torch.no_grad():
        x = torch.from_numpy(obs).expand(net.members, -1, -1)
        features = net.features(x, torch.from_numpy(actions).float().expand(net.members, -1, -1))
        for klass, rewards in ((advance, [-COST, -COST]), (stay, [-COST, -COST]),
                               (0, [None, None, GOAL - COST, ANSWER])):
            classes = torch.full((net.members, len(obs)), klass)
            reward, mean, log_std = net.outcome(features, classes)
            for row, expected in enumerate(rewards):
                if expected is not None:
                    assert float(reward[:, row].mean()) == pytest.approx(expected, abs=0.05)
            if klass == advance:
                assert float(mean[:, 0, 0].mean()) == pytest.approx(0.5, abs=0.05)
                assert float(log_std[:, 0, 0].exp().mean()) == pytest.approx(0.1, abs=0.05)


def test_an_outcome_class_moves_the_discrete_slots_together() -> None:
    env = gym.make(ENV_ID)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=3)
    rows = []
    for _ in range(3000):
        following, _, terminated, truncated, _ = env.step(rng.integers(2, size=8))
        rows.append((obs, following, terminated))
        obs = env.reset()[0] if terminated or truncated else following
    before, after, ended = (np.array(column) for column in zip(*rows, strict=True))
    from agents.learners.dyna import discrete_slots
    discrete = discrete_slots(before, 32)
    assert not discrete[4] and discrete.sum() == 16  # the stage's difficulty is continuous
    vocabulary = OutcomeVocabulary(discrete, 256)
    classes = vocabulary.encode(before, after, ended)
    assert (classes[ended] == 0).all() and (classes[~ended] > 0).all()
    rebuilt = before[~ended][:, discrete] + vocabulary.changes[classes[~ended]]
    np.testing.assert_allclose(rebuilt, after[~ended][:, discrete], atol=1e-5)
    # a full vocabulary gives unseen changes no class
    small = OutcomeVocabulary(discrete, 3)
    assert (small.encode(before, after, ended)[~ended] == -1).any()


# ------------------------------------------------------------------ imagination
def test_imagined_steps_branch_from_real_states_with_the_models_outcomes(
        fitted_chain: DynaBDQ) -> None:
    model = copy.deepcopy(fitted_chain)  # this test imagines into it
    model.exploration_rate = 1.0  # uniformly random imagined actions
    assert model.imagine() == 2000
    imagined = model.imagined
    assert imagined.size == 2000
    starts = imagined.obs[:imagined.size]
    real = {row.tobytes() for row in model.replay.obs[:model.replay.size]}
    assert all(row.tobytes() in real for row in starts)  # every rollout starts at a real state
    actions, rewards = imagined.actions[:imagined.size], imagined.returns[:imagined.size]
    discounts = imagined.discounts[:imagined.size]
    answered = actions[:, 1] == 1
    assert (discounts[answered] == 0).all()
    np.testing.assert_allclose(rewards[answered], ANSWER, atol=0.06)
    idle = (actions == 0).all(axis=1)
    np.testing.assert_allclose(rewards[idle], 0.0, atol=0.06)
    assert (discounts[idle] == np.float32(model.gamma)).all()
    # idling keeps the position and u (u's value is kept by the class, not redrawn)
    np.testing.assert_array_equal(imagined.next_obs[:imagined.size][idle], starts[idle])
    going = (actions[:, 0] == 1) & ~answered & (starts[:, 0] < 1.0)
    np.testing.assert_allclose(rewards[going], -COST, atol=0.06)
    moved = imagined.next_obs[:imagined.size][going, 0] - starts[going, 0]
    assert set(np.round(moved, 4)) <= {0.0, 0.5}
    assert np.mean(moved > 0) == pytest.approx(ADVANCE, abs=0.06)
    # horizon 2: the second steps start where the model's first steps led
    model.rollout_horizon = 2
    before = model.imagined.size
    added = model.imagine()
    assert 2000 < added < 4000 and model.imagined.size == before + added


def test_imagined_transitions_enter_the_q_update() -> None:
    model = chain_model(imagined_ratio=0.25)
    fill_with_chain_steps(model, 512)
    marked = np.full((1, 2), 0.9, np.float32)
    store(model.imagined, marked, np.array([[1, 1]], np.int8), np.array([5.0], np.float32),
          marked, np.array([0.0], np.float32))
    obs, _, returns, _, _ = model.minibatch()
    assert len(obs) == model.batch_size
    assert int((returns == 5.0).sum()) == 16  # a quarter of 64
    # all imagined: the Q-values of the imagined state and action learn its reward
    model.imagined_ratio = 1.0
    for _ in range(400):
        model.train_step()
    with torch.no_grad():
        q = model.q_net(torch.from_numpy(marked))[0]
    np.testing.assert_allclose(q[:, 1].numpy(), 5.0, atol=0.25)


def test_the_run_fits_the_model_and_imagines() -> None:
    model = chain_model()
    model.learn(1024)  # 256 batched steps of 4: a model round every 16 (64 stored by then)
    assert model.model_fits == 16
    assert model.imagined.size == 16 * 64
    assert isinstance(model.replay, LabelledReplay)
    assert (model.replay.classes[:model.replay.size] >= 0).all()  # each round labels all


def test_without_imagination_it_is_bdq_bit_for_bit() -> None:
    def weights(cls: type[BranchingDQN], **kwargs: Any) -> list[torch.Tensor]:
        set_random_seed(4)
        venv = DummyVecEnv([lambda: gym.wrappers.TimeLimit(Chain(), 8) for _ in range(4)])
        venv.seed(4)
        model = cls(AllocatorPolicy, venv, policy_kwargs={"hidden_sizes": (16,)},
                    learning_starts=64, batch_size=32, rollout_steps=16, **kwargs)
        quiet_logger(model)
        model.learn(2048)
        return [param.detach().clone() for param in model.q_net.parameters()]

    bdq, dyna = weights(BranchingDQN), weights(DynaBDQ, imagined_ratio=0.0)
    assert all(torch.equal(a, b) for a, b in zip(bdq, dyna, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(
        bdq, weights(DynaBDQ, imagined_ratio=0.5, model_train_freq=16), strict=True))


def test_dyna_refuses_n_step_returns_and_bad_ratios() -> None:
    with pytest.raises(ValueError, match="n_steps"):
        chain_model(n_steps=3)
    with pytest.raises(ValueError, match="imagined_ratio"):
        chain_model(imagined_ratio=1.5)


# ------------------------------------------------------------------ wiring
def test_train_dispatches_dyna_and_the_cli_accepts_it() -> None:
    from agents.learners.common.ppo_args import accepted
    from agents.learners.hyperparameter_names import accepted_names

    settings = {"learning_starts": 128, "batch_size": 32, "rollout_steps": 16,
                "model_train_freq": 4, "model_warmup_steps": 8, "model_gradient_steps": 2,
                "rollout_batch": 32}
    trained = train(ENV_ID, "dyna", 512, n_envs=8, ppo=settings)
    assert trained.method == "dyna" and trained.timesteps == 512 and trained.base is None
    assert accepted_names("dyna") == frozenset(accepted("dyna"))
    assert accepted_names("bdq") < accepted_names("dyna")
    import argparse

    from agents.cli.train import add_train

    parser = argparse.ArgumentParser()
    add_train(parser)
    args = parser.parse_args(["--env", ENV_ID, "--method", "dyna", "--out", "x"])
    assert args.method == "dyna"
