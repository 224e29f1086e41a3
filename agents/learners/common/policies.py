"""The allocator network: an MLP encoder with peft LoRA adapters, and its actor-critic policy.

Architecture (``hidden_sizes=(64, 64)``)::

    obs -> [Linear -> Tanh] x 2  (the encoder W: frozen base + LoRA A/B)  -> features
    features -> action_net (Linear, one Bernoulli logit per agent; with the autoregressive
                            distribution also a coupling between agents' bits)
    features -> value_net  (Linear, the state value)

The same class with ``lora_rank=None`` is the plain network of the PPO baseline: the same
layers, all trainable, no adapters. Parameters fall into four named groups, which is how
the methods say what trains (:data:`PARAMETER_GROUPS`):

========  ==============================================  ===========================
group     tensors                                         trains by default
========  ==============================================  ===========================
base      the encoder's ``nn.Linear`` weights and biases  only without LoRA
adapter   ``lora_A`` / ``lora_B`` of every encoder layer  yes
action    ``action_net`` (its coupling too, if any)       yes
value     ``value_net``                                   yes
========  ==============================================  ===========================

Three traps are closed here rather than left to the user: adapters are injected in the
features extractor's constructor, before SB3's ``_build`` creates the optimizer, and the
optimizer is then rebuilt from the trainable groups only (checked by
:func:`agents.learners.common.adapters.verify_optimizer`); ``ortho_init`` is off with LoRA
or a pretrained base, because it would overwrite them (asking for it then is an error; the
plain network keeps SB3's default, on); adapters have no dropout.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import gymnasium as gym
import torch
from gymnasium import spaces
from safetensors import SafetensorError
from safetensors.torch import load
from stable_baselines3.common.distributions import BernoulliDistribution
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from agents.files import reading_files
from agents.learners import ACTION_DISTRIBUTIONS
from agents.learners.common.adapters import (
    LoraSettings,
    adapted_linear,
    inject_lora,
    verify_optimizer,
)
from agents.learners.common.distributions import (
    AutoregressiveBernoulliDistribution,
    AutoregressiveHead,
)
from agents.weight_files import ALLOCATOR_DTYPES, check_weights, read_weights
from cost_envs.config import integer, number
from cost_envs.config_files import read_config_file

#: Names of the parameter groups, see the module docstring.
PARAMETER_GROUPS = ("base", "adapter", "action", "value")


#: A frozen base encoder: the path of its ``<name>.safetensors`` (next to ``<name>.json``),
#: or the ``(state dict, config)`` pair that :func:`load_base` returns and
#: :func:`agents.learners.pretrain.pretrain_base` makes, handed over without a file.
BaseSource = str | Path | tuple[Mapping[str, torch.Tensor], Mapping[str, Any]]
#: Widest layer and highest adapter rank a config may ask for. Far above the 64 this
#: library trains, it stops a crafted file from making the loader allocate gigabytes.
MAX_WIDTH = 4096
#: Keys of a base's config: the two that define the network, then the recipe's record.
_BASE_KEYS = ("obs_dim", "hidden_sizes", "env_id", "recipe", "first_loss", "final_loss",
              "torch")


def _base_config_path(weights: Path) -> Path:
    return weights.with_suffix(".json")


def read_tensors(path: str | Path) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, each float32 and finite: the one reader of both.

    Never unpickles. The path must be a regular file of at most
    :data:`cost_envs.limits.MAX_WEIGHTS_BYTES` (``/dev/zero``, a FIFO or a directory is
    refused before a byte is read), and its header is checked before safetensors' torch
    loader sees the bytes (:mod:`agents.weight_files`: truncated, extended, empty, a zip, a
    pickle, a bad header, a header that repeats a key, a tensor other than float32). A
    tensor of NaN or infinite values is refused too. Each is a one-line ``ValueError``
    naming the file (and the tensor). Models, adapters and bases are read here alike.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: As above.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file")
    content = read_weights(path, "weights")
    check_weights(content, str(path), ALLOCATOR_DTYPES)
    try:
        state = load(content)
    except SafetensorError as error:  # the checks above leave nothing known for it
        raise ValueError(f"{path}: not a valid safetensors file "
                         f"({' '.join(str(error).split())})") from None
    for name, tensor in state.items():
        _check_tensor(tensor, f"{path}: tensor {name!r}")
    return state


def _check_tensor(tensor: Any, where: str) -> None:
    # One dtype for every allocator tensor, bases and models alike: what torch trains here
    if not isinstance(tensor, torch.Tensor) or tensor.dtype != torch.float32:
        kind = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
        raise ValueError(f"{where}: expected a float32 tensor, got {kind}")
    if not bool(torch.isfinite(tensor).all()):
        raise ValueError(f"{where}: holds NaN or infinite values")


def check_widths(value: Any, where: str) -> list[int]:
    """``value`` as layer widths: a non-empty list of ints in ``[1, MAX_WIDTH]``."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{where}: expected a non-empty list of layer widths, ints in "
                         f"[1, {MAX_WIDTH}], got {value!r}")
    return [integer(size, f"{where}[{index}]", minimum=1, maximum=MAX_WIDTH)
            for index, size in enumerate(value)]


def check_base(state: Any, config: Any, source: str) -> tuple[int, list[int]]:
    """Check a base's tensors against its config; returns ``(obs_dim, hidden_sizes)``.

    Args:
        state: The encoder's state dict (keys of a plain ``nn.Sequential``).
        config: Its config: ``obs_dim`` and ``hidden_sizes``, optionally the recipe's
            record (``env_id``, ``recipe``, ``first_loss``, ``final_loss``, ``torch``).
        source: How errors name the base (its files, or "in memory").

    Raises:
        ValueError: A config key is unknown, missing or of the wrong type, or a tensor is
            missing, unexpected, of the wrong shape, not floating point or not finite.
    """
    if not isinstance(config, Mapping):
        raise ValueError(f"{source}: config: expected an object, got {type(config).__name__}")
    unknown = sorted(str(key) for key in set(config) - set(_BASE_KEYS))
    missing = [key for key in _BASE_KEYS[:2] if key not in config]
    if unknown or missing:
        raise ValueError(f"{source}: config: unknown keys {unknown}, missing keys {missing}; "
                         f"expected keys from {list(_BASE_KEYS)}")
    obs_dim = integer(config["obs_dim"], "obs_dim", minimum=1, where=source)
    sizes = check_widths(config["hidden_sizes"], f"{source}: hidden_sizes")
    for key, kind in (("env_id", str), ("recipe", Mapping), ("torch", str)):
        if key in config and not isinstance(config[key], kind):
            raise ValueError(f"{source}: {key}: expected {kind.__name__}, "
                             f"got {config[key]!r}")
    for key in ("first_loss", "final_loss"):
        number(config.get(key, 0.0), key, where=source)
    if not isinstance(state, Mapping):
        raise ValueError(f"{source}: expected a state dict, got {type(state).__name__}")
    widths = [obs_dim, *sizes]
    expected: dict[str, tuple[int, ...]] = {}
    for index, (n_in, n_out) in enumerate(itertools.pairwise(widths)):
        expected[f"{2 * index}.weight"] = (n_out, n_in)
        expected[f"{2 * index}.bias"] = (n_out,)
    for name, tensor in state.items():
        _check_tensor(tensor, f"{source}: tensor {name!r}")
    wrong = sorted(name for name in set(state) & set(expected)
                   if tuple(state[name].shape) != expected[name])
    if set(state) != set(expected) or wrong:
        raise ValueError(f"{source}: tensors do not fit obs_dim={obs_dim}, hidden_sizes="
                         f"{sizes} (missing {sorted(set(expected) - set(state))}, unexpected "
                         f"{sorted(map(str, set(state) - set(expected)))}, wrong shape {wrong})")
    return obs_dim, sizes


def load_base(path: str | Path) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read a frozen base: ``<name>.safetensors`` and its ``<name>.json`` config.

    Never unpickles: safetensors holds raw tensors only. Both files are checked (see
    :func:`read_tensors` and :func:`check_base`); the config is read strictly (see
    :func:`cost_envs.config_files.read_config_file`).

    Returns:
        The encoder's state dict (keys of a plain ``nn.Sequential``) and its config.

    Raises:
        FileNotFoundError: A file is missing.
        ValueError: A file is corrupt or the two do not fit each other.
    """
    weights = Path(path)
    config_path = _base_config_path(weights)
    # the pair is one save (agents.files): read through its reader, so that a save killed
    # after its commit point is read as saved, never half old and half new
    with reading_files(weights.parent, (weights.name, config_path.name)) as where:
        for file in (weights, config_path):  # what exists but is no file: the readers say
            if not where[file.name].exists():
                raise FileNotFoundError(f"base encoder: {file} does not exist")
        state = read_tensors(where[weights.name])
        config = read_config_file(where[config_path.name])
    check_base(state, config, f"base encoder {weights} (config {config_path.name})")
    return state, config


def _resolve_base(base: BaseSource) -> tuple[Mapping[str, torch.Tensor], Mapping[str, Any], str]:
    """The state, config and name in errors of a base given as a path or as tensors."""
    if isinstance(base, (str, Path)):
        return (*load_base(base), f"base encoder {base}")
    if isinstance(base, tuple) and len(base) == 2:
        state, config = base
        check_base(state, config, "base encoder (in memory)")
        return state, config, "base encoder (in memory)"
    raise ValueError("base: expected a path to a .safetensors file or a (state dict, config) "
                     f"pair, got {type(base).__name__}")


def tanh_mlp(obs_dim: int, hidden_sizes: Sequence[int]) -> nn.Sequential:
    """``[Linear -> Tanh]`` per width: the encoder layout the shipped bases are saved in."""
    widths = [int(obs_dim), *(int(size) for size in hidden_sizes)]
    if min(widths) < 1:
        raise ValueError(f"hidden_sizes: expected positive layer widths, got {hidden_sizes!r}")
    layers: list[nn.Module] = []
    for n_in, n_out in itertools.pairwise(widths):
        layers += [nn.Linear(n_in, n_out), nn.Tanh()]
    return nn.Sequential(*layers)


class MlpEncoder(BaseFeaturesExtractor):
    """A tanh MLP from the observation to ``hidden_sizes[-1]`` features.

    Args:
        observation_space: A flat ``Box``.
        hidden_sizes: Width of each layer.
        lora_rank: Adapter rank; ``None`` for a plain, fully trainable MLP.
        lora_alpha: Adapter scale.
        base: A pretrained base (:data:`BaseSource`): the path of its ``.safetensors``
            file or its ``(state dict, config)`` pair; ``None`` keeps PyTorch's random
            initialisation.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        lora_rank: int | None = 8,
        lora_alpha: float = 16.0,
        base: BaseSource | None = None,
    ) -> None:
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 1:
            raise ValueError(f"MlpEncoder: expected a flat Box observation space, "
                             f"got {observation_space}")
        sizes = [int(size) for size in hidden_sizes]
        if not sizes:
            raise ValueError("hidden_sizes: expected at least one layer width, got none")
        super().__init__(observation_space, features_dim=sizes[-1])
        widths = [observation_space.shape[0], *sizes]
        self.net = tanh_mlp(widths[0], sizes)
        if base is not None:
            state, config, name = _resolve_base(base)
            if list(config["hidden_sizes"]) != sizes or config["obs_dim"] != widths[0]:
                raise ValueError(
                    f"{name}: built for obs_dim={config['obs_dim']}, "
                    f"hidden_sizes={config['hidden_sizes']}; this policy has "
                    f"obs_dim={widths[0]}, hidden_sizes={sizes}"
                )
            self.net.load_state_dict(state)  # copies: the caller's tensors stay theirs
        if lora_rank is not None:
            inject_lora(self.net, LoraSettings(lora_rank, lora_alpha))

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        """Features of a batch of observations.

        The same function as ``self.net(observations)``; each layer goes through
        :func:`agents.learners.common.adapters.adapted_linear`, which skips peft's per-call
        dispatch.
        """
        hidden = observations
        for layer in list(self.net)[::2]:  # Linear, Tanh, ...; slicing the Sequential builds one
            hidden = torch.tanh(adapted_linear(layer, hidden))
        return hidden


class AllocatorPolicy(ActorCriticPolicy):
    """Actor-critic for ``MultiBinary(m)``: a Bernoulli logit per agent, a value head.

    Args:
        observation_space: A flat ``Box``.
        action_space: ``MultiBinary(m)``.
        lr_schedule: SB3's learning-rate schedule.
        hidden_sizes: Encoder widths.
        lora_rank: Adapter rank (8 as in the paper), or ``None`` for the plain network.
        lora_alpha: Adapter scale.
        base: A pretrained frozen base, ``None`` for a random one: the path of its
            ``.safetensors`` file, or its ``(state dict, config)`` pair in memory (as
            :func:`load_base` returns and :func:`agents.learners.pretrain.pretrain_base` makes);
            both give the same network.
        trainable: Group name -> learning-rate multiplier for the groups that train.
            Default: ``adapter``, ``action`` and ``value`` with LoRA, every group without.
        action_distribution: ``independent`` (SB3's Bernoulli: one logit per agent, the paper's)
            or ``autoregressive`` (each agent's logit also sees the earlier agents' bits,
            :mod:`agents.learners.common.distributions`; its coupling is in the ``action`` group).
        **kwargs: Passed to ``ActorCriticPolicy`` (not ``net_arch``, the features
            extractor or ``share_features_extractor``: this architecture fixes them).
    """

    features_extractor: MlpEncoder  # features_extractor_class is fixed

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        lr_schedule: Any,
        hidden_sizes: Sequence[int] = (64, 64),
        lora_rank: int | None = 8,
        lora_alpha: float = 16.0,
        base: BaseSource | None = None,
        trainable: Mapping[str, float] | None = None,
        action_distribution: str = "independent",
        **kwargs: Any,
    ) -> None:
        if action_distribution not in ACTION_DISTRIBUTIONS:
            raise ValueError(f"action_distribution: expected one of {list(ACTION_DISTRIBUTIONS)}, "
                             f"got {action_distribution!r}")
        if not isinstance(action_space, spaces.MultiBinary):
            raise ValueError(f"AllocatorPolicy: expected a MultiBinary action space, "
                             f"got {action_space}")
        fixed = {"net_arch", "features_extractor_class", "features_extractor_kwargs",
                 "share_features_extractor"} & set(kwargs)
        if fixed:
            raise ValueError(f"AllocatorPolicy fixes {sorted(fixed)}; use hidden_sizes, "
                             "lora_rank, lora_alpha and base instead")
        if (lora_rank is not None or base is not None) and kwargs.get("ortho_init", False):
            raise ValueError("ortho_init=True would overwrite the pretrained base and the "
                             "LoRA initialisation; leave it off with LoRA or a base")
        # SB3's default (orthogonal init) where nothing pretrained lives; off otherwise.
        kwargs.setdefault("ortho_init", lora_rank is None and base is None)
        default = ("adapter", "action", "value") if lora_rank is not None else PARAMETER_GROUPS
        self.hidden_sizes = tuple(int(size) for size in hidden_sizes)
        self.lora_rank = lora_rank
        self.lora_alpha = float(lora_alpha)
        self.base = base
        self.action_distribution = action_distribution
        self.trainable = _check_groups(trainable if trainable is not None
                                       else dict.fromkeys(default, 1.0))
        super().__init__(
            observation_space,
            action_space,
            lr_schedule,
            net_arch=[],
            features_extractor_class=MlpEncoder,
            features_extractor_kwargs={
                "hidden_sizes": self.hidden_sizes,
                "lora_rank": lora_rank,
                "lora_alpha": self.lora_alpha,
                "base": base,
            },
            share_features_extractor=True,
            **kwargs,
        )

    def _build(self, lr_schedule: Any) -> None:
        # SB3 made a Bernoulli distribution from the space; the autoregressive one is ours.
        if self.action_distribution == "autoregressive":
            self.action_dist = AutoregressiveBernoulliDistribution(self.n_agents)
        super()._build(lr_schedule)
        self.learning_rate = float(lr_schedule(1))
        # SB3 just built an optimizer over every parameter; keep only the trainable groups.
        self.train_only(self.trainable)

    @property
    def n_agents(self) -> int:
        """The number of agents: the bits of the flat ``MultiBinary`` action space."""
        space = self.action_space  # a flat MultiBinary: __init__ and SB3 check it first
        assert isinstance(space, spaces.MultiBinary) and isinstance(space.n, int)
        return space.n

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        for key in ("net_arch", "features_extractor_class", "features_extractor_kwargs",
                    "share_features_extractor"):
            data.pop(key, None)
        data.update(hidden_sizes=self.hidden_sizes, lora_rank=self.lora_rank,
                    lora_alpha=self.lora_alpha, base=None, trainable=self.trainable,
                    action_distribution=self.action_distribution)
        return data

    # ----------------------------------------------------------- parameter groups
    def parameter_groups(self) -> dict[str, list[tuple[str, nn.Parameter]]]:
        """Group name -> ``(name, tensor)`` pairs, in :data:`PARAMETER_GROUPS` order."""
        groups: dict[str, list[tuple[str, nn.Parameter]]] = {g: [] for g in PARAMETER_GROUPS}
        for name, param in self.named_parameters():
            if name.startswith("action_net."):
                groups["action"].append((name, param))
            elif name.startswith("value_net."):
                groups["value"].append((name, param))
            elif ".lora_" in name:
                groups["adapter"].append((name, param))
            else:
                groups["base"].append((name, param))
        return groups

    def train_only(self, groups: Mapping[str, float]) -> None:
        """Train exactly ``groups`` (name -> learning-rate multiplier); freeze the rest.

        Sets ``requires_grad`` and rebuilds the optimizer with one parameter group per
        trained group, each carrying its ``lr_scale``; then checks the result.
        """
        self.trainable = _check_groups(groups)
        param_groups = []
        for group, members in self.parameter_groups().items():
            train = group in self.trainable
            for _, param in members:
                param.requires_grad_(train)
            if train and members:
                scale = self.trainable[group]
                param_groups.append({"params": [p for _, p in members], "name": group,
                                     "lr": self.learning_rate * scale, "lr_scale": scale})
        if not param_groups:
            raise ValueError(f"nothing to train: groups {sorted(self.trainable)} are empty")
        # SB3 types optimizer_class as the Optimizer base, whose __init__ has no lr; SB3's
        # own _build makes the same call.
        self.optimizer = self.optimizer_class(  # type: ignore[call-arg]  # see the comment above
            param_groups, lr=self.learning_rate, **self.optimizer_kwargs)
        verify_optimizer(self, self.optimizer)

    def set_learning_rate(self, learning_rate: float) -> None:
        """Set the base learning rate; each group gets it times its ``lr_scale``."""
        self.learning_rate = float(learning_rate)
        for group in self.optimizer.param_groups:
            group["lr"] = self.learning_rate * group.get("lr_scale", 1.0)

    # ------------------------------------------------------------------ outputs
    def shared_features(self, obs: torch.Tensor) -> torch.Tensor:
        """``extract_features(obs)``: one tensor, the extractor being shared.

        Not an override of ``extract_features``: :func:`agents.learners.ppo.fast_bernoulli`
        takes SB3's own as the sign of a policy it may compute by hand.
        """
        # SB3 returns a (pi, vf) pair only when share_features_extractor is False.
        return cast(torch.Tensor, self.extract_features(obs))

    def _head(self) -> AutoregressiveHead:
        """``action_net`` of the autoregressive distribution (its proba_distribution_net)."""
        return cast(AutoregressiveHead, self.action_net)

    def _action_dims(self) -> int:
        """The number of agents: ``action_dims`` of the Bernoulli ``action_dist`` SB3 built."""
        return cast(BernoulliDistribution, self.action_dist).action_dims

    def _get_action_dist_from_latent(self, latent_pi: torch.Tensor) -> Any:
        if self.action_distribution == "autoregressive":
            return self.action_dist.proba_distribution(self.action_net(latent_pi),
                                                       head=self._head())
        return super()._get_action_dist_from_latent(latent_pi)

    def _distribution(self, features: torch.Tensor) -> Any:
        """A fresh distribution of the features' actions.

        Fresh, not SB3's shared ``self.action_dist``: that one would keep this batch's
        autograd graph alive (and make the policy impossible to deep-copy).
        """
        logits = self.action_net(features)
        if self.action_distribution == "autoregressive":
            return AutoregressiveBernoulliDistribution(self._action_dims()
                                                       ).proba_distribution(logits, self._head())
        return BernoulliDistribution(self._action_dims()).proba_distribution(
            action_logits=logits)

    def call_probabilities(self, features: torch.Tensor,
                           actions: torch.Tensor | None = None) -> torch.Tensor:
        """``p_t``: each agent's call probability, shape ``(batch, m)``.

        With the autoregressive head, agent i's probability given the earlier bits of
        ``actions`` (teacher forcing: the labels in supervision, the rollout's actions in
        PPO); without ``actions``, given the bits of the greedy chain.
        """
        distribution = self._distribution(features)
        if self.action_distribution == "autoregressive" and actions is None:
            actions = distribution.mode()
        return self._probabilities(distribution, actions)

    def _probabilities(self, distribution: Any, actions: torch.Tensor | None) -> torch.Tensor:
        """Each agent's call probability under ``distribution`` (at ``actions``' earlier bits)."""
        if self.action_distribution == "autoregressive":
            return distribution.conditional_probabilities(actions)
        return distribution.distribution.probs

    def action_probabilities(self, obs: torch.Tensor) -> torch.Tensor:
        """``p_t``: the probability of calling each agent, shape ``(batch, m)``.

        With the autoregressive head: along the greedy chain (:meth:`call_probabilities`).
        """
        return self.call_probabilities(self.shared_features(obs))

    def evaluate_actions_and_probabilities(
        self, obs: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``evaluate_actions`` and ``p_t`` at ``actions``, one forward pass (LoRA-guided PPO)."""
        features = self.shared_features(obs)
        distribution = self._distribution(features)
        log_prob = distribution.log_prob(actions)
        return (self.value_net(features), log_prob, distribution.entropy(),
                self._probabilities(distribution, actions))

    def architecture(self) -> dict[str, Any]:
        """The constructor arguments that rebuild this network (JSON-ready)."""
        architecture: dict[str, Any] = {
            "hidden_sizes": list(self.hidden_sizes), "lora_rank": self.lora_rank,
            "lora_alpha": self.lora_alpha}
        if self.action_distribution != "independent":  # absent: the independent head (older files)
            architecture["action_distribution"] = self.action_distribution
        return architecture


def _check_groups(groups: Mapping[str, float]) -> dict[str, float]:
    unknown = sorted(set(groups) - set(PARAMETER_GROUPS))
    if unknown:
        raise ValueError(f"unknown parameter group(s) {unknown}; expected names from "
                         f"{list(PARAMETER_GROUPS)}")
    out = {}
    for name, scale in groups.items():
        out[name] = number(scale, f"learning-rate multiplier of group {name!r}", minimum=0,
                           inclusive=False)
    return out
