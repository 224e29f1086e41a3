"""The learners, one module each, with their training entries.

* **PPO** from scratch: :mod:`agents.learners.ppo` (``FastPPO``, SB3's PPO updates in
  fewer calls); entry :func:`~agents.learners.training.train` with ``method="ppo"``.
* **Supervised LoRA**: :mod:`agents.learners.supervised` (+ :mod:`~agents.learners.dagger`);
  entry ``train(..., method="lora")``.
* **LoRA-guided PPO**: :mod:`agents.learners.lora_ppo` (``LoraGuidedPPO``); entry
  ``train(..., method="lora-ppo")``.
* **From interaction alone** (issue #38): :mod:`agents.learners.sil` (PPO with
  self-imitation of its best episodes) and :mod:`agents.learners.grpo` (PPO on
  group-relative advantages); entries ``train(..., method="ppo-sil")`` and
  ``method="ppo-grpo"``; and value learning over the action's bits,
  :mod:`agents.learners.bdq` (a branching dueling Q-network), ``method="bdq"``, and
  :mod:`agents.learners.dyna` (BDQ on a learned model's imagined steps too),
  ``method="dyna"``, and :mod:`agents.learners.sac_bits` (discrete soft actor-critic per
  bit), ``method="sac-bits"``.
* **CORL**, one controller for every budget tier: :mod:`agents.learners.corl`; entries
  :func:`~agents.learners.corl.train_shared_ppo` (the controller), then
  :func:`~agents.learners.corl.train_tier_adapters` (one LoRA adapter per tier).
* **BoPO**: :mod:`agents.learners.bopo` (boundaries, rewards) and
  :mod:`~agents.learners.bopo_sft` (SFT data, warm start, the masked router); its model is
  :func:`~agents.learners.bopo_sft.build_model`, warm-started by
  :func:`~agents.learners.bopo_sft.sft_warm_start`, trained on
  :class:`~agents.learners.bopo.BoPOReward` (the loop is ``experiments/bopo/jobs.py``'s).
* **Multi-tenant shared-parameter PPO**: :mod:`agents.learners.multitenant`; entry
  :func:`~agents.learners.multitenant.train_shared`, then one LoRA adapter per tenant with
  :func:`~agents.learners.multitenant_adapters.train_adapters`.

Beside them: :mod:`agents.learners.training` (the one ``train`` of the PPO family and the
:class:`~agents.learners.training.TrainedAllocator` it returns),
:mod:`agents.learners.checkpoints` (models saved as safetensors, never unpickled),
:mod:`agents.learners.pretrain` (the frozen bases, shipped in ``pretrained/``) and
:mod:`agents.learners.common` (what the learners share: the policy network, LoRA adapters,
action distributions, PPO's fused update, hyperparameter checks). The references they are
scored against are not learners and live beside this package: the baselines
(:mod:`agents.baselines`, :mod:`agents.multiagent`), the rules (:mod:`agents.rules`) and
the planners (:mod:`agents.planning`).

Importing this package does not import torch: it names the methods and bases (the CLI's
choices); its modules import torch themselves.
"""

#: Training methods, in table order: supervised LoRA, PPO from scratch, LoRA-guided PPO,
#: then issue #38's learners from interaction alone (PPO with self-imitation, PPO on
#: group-relative advantages, a branching dueling Q-network, Dyna on it, discrete SAC per bit).
METHODS = ("lora", "ppo", "lora-ppo", "ppo-sil", "ppo-grpo", "bdq", "dyna", "sac-bits")
#: The methods trained from scratch on the plain network: each one's model class, as
#: ``(module, class)`` (imported when training: this package does not import torch).
FROM_SCRATCH = {"ppo": ("agents.learners.ppo", "FastPPO"),
                "ppo-sil": ("agents.learners.sil", "SelfImitationPPO"),
                "ppo-grpo": ("agents.learners.grpo", "GroupRelativePPO"),
                "bdq": ("agents.learners.bdq", "BranchingDQN"),
                "dyna": ("agents.learners.dyna", "DynaBDQ"),
                "sac-bits": ("agents.learners.sac_bits", "SACPerBit")}
#: The from-scratch methods that are not PPO: their settings are their model class's own
#: arguments, none of :data:`PPO_SETTINGS` (``bdq``'s are ``BranchingDQN``'s, ``dyna``'s
#: ``DynaBDQ``'s and BDQ's, ``sac-bits``' ``SACPerBit``'s).
NOT_PPO = frozenset({"bdq", "dyna", "sac-bits"})
#: Settings a from-scratch method changes from :data:`PPO_SETTINGS` (GRPO has no critic and
#: scales its advantages per rollout: ``agents.learners.grpo``).
METHOD_SETTINGS: dict[str, dict[str, object]] = {
    "ppo-grpo": {"vf_coef": 0.0, "normalize_advantage": False}}
#: Where the LoRA encoder's frozen base comes from.
BASES = ("pretrained", "random")
#: The policy's action distributions (:mod:`agents.learners.common.distributions`): SB3's
#: independent bits, or bits drawn in agent order, each seeing the earlier ones.
ACTION_DISTRIBUTIONS = ("independent", "autoregressive")
#: PPO settings shared by ``ppo`` and ``lora-ppo`` (the paper's A.4); here, not in the
#: torch-importing training module, so the CLI sizes a rollout before importing torch.
PPO_SETTINGS = {"n_steps": 512, "batch_size": 64, "gae_lambda": 0.95, "clip_range": 0.2,
                "ent_coef": 0.01, "vf_coef": 0.5}
