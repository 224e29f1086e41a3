"""The names ``train(ppo=...)`` accepts, known without importing SB3 or torch.

:mod:`agents.learners.common.ppo_args` reads the accepted hyperparameters from SB3's own
signature, which costs the import of SB3 and torch (seconds). A config file with a
misspelt key must be answered before that (issue #26: any argument or file error in
under 1.5 s), so the names are also kept here, for the pinned SB3
(``constraints.txt``); ``tests/test_cli_startup.py`` checks they are exactly the
signature's, so an SB3 upgrade that adds an argument fails that test until it is added.
"""

from __future__ import annotations

from agents.learners import NOT_PPO

#: SB3 ``PPO``'s hyperparameters (stable-baselines3 2.9).
PPO_NAMES = frozenset({
    "batch_size", "clip_range", "clip_range_vf", "ent_coef", "gae_lambda", "gamma",
    "learning_rate", "max_grad_norm", "n_epochs", "n_steps", "normalize_advantage",
    "sde_sample_freq", "stats_window_size", "target_kl", "use_sde", "vf_coef"})
#: What ``lora-ppo`` adds (:class:`agents.learners.lora_ppo.LoraGuidedPPO`).
LORA_PPO_NAMES = frozenset({"action_lr_scale", "cost_coef", "value_lr_scale"})
#: What every RL stage adds (:class:`agents.learners.ppo.FastPPO`).
FAST_PPO_NAMES = frozenset({"fused_loss"})
#: What each other method's model class adds (``ppo_args.METHOD_ARGUMENTS``).
METHOD_NAMES = {"lora-ppo": LORA_PPO_NAMES,
                "ppo-sil": frozenset({"sil_updates", "sil_batch_size", "sil_coef",
                                      "sil_value_coef", "sil_capacity"}),
                "ppo-grpo": frozenset({"group_size"}),
                # not PPO: BranchingDQN's own arguments, none of PPO's
                "bdq": frozenset({"learning_rate", "buffer_size", "learning_starts",
                                  "batch_size", "gamma", "train_freq", "gradient_steps",
                                  "n_steps", "target_update_interval", "per_branch_targets",
                                  "exploration_fraction", "exploration_initial_eps",
                                  "exploration_final_eps", "max_grad_norm", "rollout_steps",
                                  "stats_window_size"})}
#: ``dyna`` (:class:`agents.learners.dyna.DynaBDQ`): BDQ's and its model's.
METHOD_NAMES["dyna"] = METHOD_NAMES["bdq"] | frozenset({
    "imagined_ratio", "rollout_horizon", "rollout_batch", "imagined_buffer_size",
    "model_train_freq", "model_gradient_steps", "model_warmup_steps", "model_batch_size",
    "model_learning_rate", "model_members", "model_hidden", "model_classes", "max_levels"})
#: ``sac-bits`` (:class:`agents.learners.sac_bits.SACPerBit`): its own arguments.
METHOD_NAMES["sac-bits"] = frozenset({
    "learning_rate", "buffer_size", "learning_starts", "batch_size", "gamma", "train_freq",
    "gradient_steps", "n_steps", "tau", "initial_alpha", "target_entropy_ratio",
    "shared_temperature", "mean_targets", "critic_hidden_sizes", "max_grad_norm", "rollout_steps",
    "stats_window_size"})


def accepted_names(method: str) -> frozenset[str]:
    """The hyperparameter names ``method`` accepts (as ``ppo_args.accepted(method)``)."""
    if method in NOT_PPO:
        return METHOD_NAMES[method]
    return PPO_NAMES | FAST_PPO_NAMES | METHOD_NAMES.get(method, frozenset())
