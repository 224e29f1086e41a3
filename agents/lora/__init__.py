"""The learned allocators of the LoRA-Guided PPO paper: peft adapters, policies, training.

Importing this package does not import torch: it names the methods and bases (the CLI's
choices); its modules import torch themselves.
"""

#: Training methods, in table order: supervised LoRA, PPO from scratch, LoRA-guided PPO.
METHODS = ("lora", "ppo", "lora-ppo")
#: Where the LoRA encoder's frozen base comes from.
BASES = ("pretrained", "random")
#: The policy's action distributions (:mod:`agents.lora.distributions`): SB3's independent bits, or
#: bits drawn in agent order, each seeing the earlier ones.
ACTION_DISTRIBUTIONS = ("independent", "autoregressive")
