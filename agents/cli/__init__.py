"""The ``cost-envs`` command.

Subcommands::

    cost-envs list                       registered environment ids, one per line
    cost-envs evaluate --env ID [--methods random,rule,...] [--model DIR [--trust-pickle]]
                       [--episodes N] [--seed S] [--fit-tasks N] [--json]
                       [--pool FILE] [--prices FILE] [--env-kwargs MAPPING]
    cost-envs train --env ID --method ppo|lora|lora-ppo --out DIR [--config FILE]
                    [--timesteps N] [--seed S] [--n-envs N] [--base pretrained|random]
                    [--pool FILE] [--prices FILE] [--env-kwargs MAPPING] [--tensorboard DIR]
    cost-envs pretrain --env ID --out PATH [--seed S]
    cost-envs route train --data FILE... --weak M --strong M --save PATH [...]
    cost-envs route score --router PATH --data FILE... [...]
    cost-envs export-minari --env ID --policy NAME|--supervised T|--logged [--out DIR] [...]
    cost-envs serve --config FILE [--host H] [--port P]

``serve`` (an OpenAI-compatible routing server with hard budgets) lives in
:mod:`agents.cli.serve`; ``route`` (train a router on your logged outcomes, save it, score
it) lives in
:mod:`agents.cli.route`; ``export-minari`` (offline-RL datasets) in
:mod:`agents.cli.export_minari`; ``evaluate`` in :mod:`agents.cli.evaluate`; ``train`` and
``pretrain`` in :mod:`agents.cli.train`; the env arguments ``train`` and ``evaluate``
share (``--pool``, ``--prices``, ``--env-kwargs``) in :mod:`agents.cli.env`; ``train
--config`` (SB3 hyperparameters and training settings in a JSON/YAML file; flags override
it) in :mod:`agents.cli.config`; the argument types they share in
:mod:`agents.cli.arguments`.

The paper's experiments are not a subcommand: they live in ``experiments/`` beside the
installed packages and run with ``python -m experiments all`` (``make reproduce``).

Each subcommand is one :class:`Command` (a name, a function adding its arguments and a
function running it, each named ``"module:function"`` so that it is imported only when
that subcommand is given) in :data:`agents.cli.main.COMMANDS`; adding a subcommand is
adding an entry. ``cost-envs --help`` and ``--version`` import no ``cost_envs``, NumPy,
Gymnasium or torch (a few hundredths of a second of CPU); ``--version`` takes no other
argument.

Errors end the command with one line on stderr and no traceback:

========================================================  ===========
what                                                      exit status
========================================================  ===========
a usage error (unknown env id or method, a bad number),   2
  naming the valid choices, as argparse does
a bad input file or output path (``--model``, ``--out``;  1
  ``route``'s logs, saved router and ``--save``), a bad
  key or value of ``--config`` or of the env arguments
  (unreadable ``--env-kwargs`` text is a usage error)
a model ``route`` does not find in the logs               2
a missing extra (``train`` without torch: ``pip install   1
  'cost-envs[agents]'``), named with its install line
an operating-system error (a full disk, no permission)    1
stdout closed early (``cost-envs list | head -1``)        141
Ctrl-C                                                    130
========================================================  ===========

``--out`` of ``train`` and ``pretrain`` (and ``train --tensorboard``) is checked
writable before any work starts. Sizes that become memory (``evaluate --episodes`` and
``--fit-tasks``, ``export-minari --episodes``, ``train --n-envs`` x ``n_steps``) are
checked against the memory available before it is allocated
(:mod:`cost_envs.limits`). Progress goes to stderr (:mod:`agents.cli.progress`): a line
per step, episode bars on a terminal only, and a step that draws no bar (fitting
best-rule, training into a log) repeats its line every 10 s while it runs.
Arguments and files are checked before torch, SB3 or peft is imported (seconds), so an
error in them is answered at once (``benchmarks/cli_startup.py``); a config file's
hyperparameter keys are the exception, checked against SB3's own signature. A mistyped
subcommand, option, choice, env id or method gets the usage of the subcommand and the
closest valid name ("did you mean"). Without the ``agents`` extra (an env-only install),
``list``, ``--help`` and ``evaluate`` of the baselines work; ``train``, ``pretrain`` and
``evaluate --model`` say which extra to install.
"""

from agents.cli.main import COMMANDS, Command, build_parser, main

__all__ = ["COMMANDS", "Command", "build_parser", "main"]
