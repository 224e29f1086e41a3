"""Names of the learned methods and bases, importable without torch (the CLI's choices)."""

#: Training methods, in table order: supervised LoRA, PPO from scratch, LoRA-guided PPO.
METHODS = ("lora", "ppo", "lora-ppo")
#: Where the LoRA encoder's frozen base comes from.
BASES = ("pretrained", "random")
