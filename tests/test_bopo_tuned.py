"""BoPO's tuned rows: a sweep's choice trained on the table's steps, seeds and budget."""

from __future__ import annotations

from types import SimpleNamespace

from agents.learners import bopo
from experiments.bopo import jobs as bopo_jobs
from experiments.bopo import runner as bopo_experiment


def test_a_tuned_row_trains_the_sweeps_choice(monkeypatch) -> None:
    from experiments.tune import runner as tune

    warm = SimpleNamespace(profile="appworld", seed=3, cost_scale=2.0, train_boundaries=[],
                           sft_state={"w": 1})
    sc = bopo_jobs.SCALES["smoke"]
    jobs = {job.key: job for job in bopo_experiment.learn_jobs(warm, sc, 0.5, 0)}
    chosen = tune.chosen("bopo-ppo", bopo.ENV_ID)
    job = jobs["ppo/tuned"]
    assert (job.method, job.lam, job.seed, job.sft_state) == ("ppo", chosen["lam"], 3, None)
    assert dict(job.ppo) == {"learning_rate": chosen["learning_rate"],
                             "ent_coef": chosen["ent_coef"]}
    assert job.scale is sc and job.budget == 0.5  # the table's steps and budget
    assert jobs["ppo/0.5"].ppo == {} and not jobs["ppo/0.5"].tuned
    # another profile: the sweeps did not run there, no tuned row
    other = SimpleNamespace(**{**vars(warm), "profile": "alfworld"})
    assert not any(job.tuned for job in bopo_experiment.learn_jobs(other, sc, 0.5, 0))
    # a sweep that chose a linear cost term trains BoPO's linear variant from the warm start
    monkeypatch.setattr(bopo_experiment, "tuned_choices", lambda profile: {
        "bopo": {"config": {"cost_term": "linear", "lam": 0.5, "linear_lam": 8.0,
                            "learning_rate": 1e-3, "ent_coef": 0.02},
                 "paper": {}, "same_as_paper": False}})
    tuned = [job for job in bopo_experiment.learn_jobs(warm, sc, 0.5, 0) if job.tuned]
    assert [(j.key, j.method, j.lam, j.sft_state) for j in tuned] == [
        ("bopo/tuned", "bopo-linear", 8.0, {"w": 1})]
