"""Study (issue #38, point 2): the Bayes teacher with a prior learned from logged episodes.

The ``lora/bayes`` row of :mod:`experiments.lora_ppo` is taught by ToolBench-v0's Bayes
reference, which knows the family's generative model *and its parameters*. Here the
teacher knows the form (the env's code) but fits the parameters (the stage counts and
skills, the difficulty law, the tools' capabilities, prices and FLOPs) from logs of the
uniform random allocator of 10k, 100k and 1M steps (:mod:`agents.planning.learned_prior`),
and teaches the same row with DAgger, nothing else changed. Each training seed fits its
own log, so the intervals cover the fit's spread too. Both the students and the teachers
are scored on the tables' 400 evaluation tasks, as shares of the rule-to-planner gap,
paired by seed against the true-prior student.

On FlightPlanner-v1 (``--env FlightPlanner-v1``) the teacher is
:class:`~agents.planning.flight_bayes.BayesFlightPlanner` on a prior fitted by
:mod:`agents.planning.learned_prior_flight` (the agents' strengths, prices and FLOPs, the
network generator's edge probability, fare factor and slack ranges), 5 fits a log size;
the teachers are scored against the true-prior reference, and with ``--students`` the
``lora/bayes`` row's students too (the tables have no such row there).

Writes ``learned_prior.md`` (or ``learned_prior_FlightPlanner-v1.md``) into ``--out``
(default ``benchmarks/results``). Command: ``python -m experiments.learned_prior [--env
ENV] [--students] [--jobs N] [--out DIR]``.

:mod:`~experiments.learned_prior.settings` holds the env, the log sizes and the scale;
:mod:`~experiments.learned_prior.runner` logs, fits, trains and scores;
:mod:`~experiments.learned_prior.report` renders the tables.
"""
