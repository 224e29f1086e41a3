"""The LoRA-Guided PPO paper: its Tables 1-2 on FlightPlanner-v0, ToolBench-v0 and v1.

Writes ``table_<Env>.md`` and ``.json``, ``pareto_<Env>.png``/``.svg``,
``learning_curves_<Env>.png``/``.svg`` and ``learning_curves_<Env>.csv`` for each env.
Command: ``python -m experiments lora_ppo``.

:mod:`~experiments.lora_ppo.runner` trains and scores the rows (``report``);
:mod:`~experiments.lora_ppo.report` renders and writes the files;
:mod:`~experiments.lora_ppo.settings` holds the paper's envs and row kinds both read.
"""
