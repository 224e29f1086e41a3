"""The plumbing every experiment shares; no experiment of its own, no command.

* :mod:`experiments.shared.scheduler`: the units of every experiment, run in local processes
  or on a Ray cluster (:mod:`experiments.shared.cluster`), kept as they finish;
* :mod:`experiments.shared.common`: the machine, the writability check;
* :mod:`experiments.shared.gaps`: the ``gap_closed`` block of each experiment's JSON (the
  share of the rule-to-planner gap each learned row closes; :mod:`experiments.aggregates`
  pools them) and the per-episode scores as kept in files;
* :mod:`experiments.shared.figures`: the figures' shared style, rendered to PNG and SVG;
* :mod:`experiments.shared.histories`: training histories as CSV beside a JSON;
* :mod:`experiments.shared.kept`: units kept as they finish, so a long run resumes.

Every package of :mod:`experiments` may import these; they import no experiment.
"""
