"""Study (issue #38, point 4): the Bayes teacher's memory, given to its student.

The Bayes reference that teaches the LoRA allocator on ToolBench-v0 (the ``lora/bayes``
row of :mod:`experiments.lora_ppo`) remembers the difficulties of the stages already
cleared; the student's observation does not hold them. This trains that row (the same
teacher, DAgger rounds and settings; 15 seeds, the tables' 5 also paired alone) twice,
memoryless and with ToolBench's ``cleared_difficulties=True`` observation option (the
teacher's memory, observed), scores both on the tables' 400 evaluation tasks, and pairs
them: the share of the rule-to-planner gap each closes and the difference, with 95%
intervals over seeds and tasks.

Writes ``teacher_memory.md`` into ``--out`` (default ``benchmarks/results``).
Command: ``python -m experiments.teacher_memory [--jobs N] [--out DIR]``.

:mod:`~experiments.teacher_memory.settings` holds the env, the arms and the scale;
:mod:`~experiments.teacher_memory.runner` trains and scores them;
:mod:`~experiments.teacher_memory.report` renders the table.
"""
