import math

import numpy as np
import pytest

from cost_envs import metrics
from cost_envs.metrics import EpisodeRecord


def rec(success, cost, flops=0.0, quality=0.0, calls=(0, 0), length=1, violation=False):
    return EpisodeRecord(success, quality, cost, flops, np.array(calls), length, violation)


@pytest.fixture
def tiny():
    # 2 successes out of 4; total cost 1.0; total flops 100; 8 steps
    return [
        rec(True, 0.1, 10.0, quality=8.0, calls=(1, 0), length=2),
        rec(False, 0.2, 20.0, quality=1.0, calls=(2, 1), length=2, violation=True),
        rec(True, 0.3, 30.0, quality=6.0, calls=(0, 1), length=1),
        rec(False, 0.4, 40.0, quality=1.0, calls=(3, 2), length=3),
    ]


def test_hand_computed_metrics(tiny):
    assert metrics.success_rate(tiny) == 0.5
    assert metrics.cps(tiny) == pytest.approx(1.0 / 2)
    assert metrics.flops_per_success(tiny) == pytest.approx(100.0 / 2)
    assert metrics.avg_quality(tiny) == pytest.approx(16.0 / 4)
    assert metrics.avg_cost(tiny) == pytest.approx(1.0 / 4)
    np.testing.assert_allclose(metrics.call_ratio(tiny), [6 / 8, 4 / 8])
    assert metrics.budget_exceeded(tiny) == 1


def test_ratios_with_zero_successes_divide_by_one():
    records = [rec(False, 0.25, 5.0), rec(False, 0.5, 7.0)]
    assert metrics.cps(records) == pytest.approx(0.75)
    assert metrics.flops_per_success(records) == pytest.approx(12.0)
    assert metrics.success_rate(records) == 0.0


def test_cps_is_a_ratio_of_sums_not_a_mean_of_ratios():
    # mean of per-episode cost/max(1, success) would be (1 + 3) / 2 = 2; total/successes = 4
    records = [rec(True, 1.0), rec(False, 3.0)]
    assert metrics.cps(records) == pytest.approx(4.0)


def test_call_ratio_zero_steps_and_mismatched_pools():
    np.testing.assert_array_equal(metrics.call_ratio([rec(False, 0.0, length=0)]), [0.0, 0.0])
    with pytest.raises(ValueError, match="pool sizes"):
        metrics.call_ratio([rec(False, 0.0), rec(False, 0.0, calls=(0, 0, 0))])


def test_summarize_is_json_ready(tiny):
    summary = metrics.summarize(tiny)
    assert summary == {
        "success_rate": 0.5,
        "cps": pytest.approx(0.5),
        "flops_per_success": pytest.approx(50.0),
        "avg_quality": pytest.approx(4.0),
        "avg_cost": pytest.approx(0.25),
        "call_ratio": [0.75, 0.5],
        "budget_exceeded": 1,
        "episodes": 4,
    }
    assert all(type(v) is float for v in summary["call_ratio"])


@pytest.mark.parametrize(
    "fn",
    [metrics.success_rate, metrics.cps, metrics.flops_per_success, metrics.avg_quality,
     metrics.avg_cost, metrics.call_ratio, metrics.budget_exceeded, metrics.summarize,
     lambda r: metrics.bootstrap_ci(r, "cps")],
)
def test_empty_input_raises(fn):
    with pytest.raises(ValueError, match="at least one EpisodeRecord"):
        fn([])


def test_record_validation_and_immutability():
    calls = np.array([1, 0])
    r = EpisodeRecord(True, 5.0, 0.1, 1e9, calls, 2)
    calls[0] = 7  # the record keeps its own copy
    assert r.calls.tolist() == [1, 0]
    assert not r.calls.flags.writeable
    assert r == EpisodeRecord(True, 5.0, 0.1, 1e9, np.array([1, 0], dtype=np.int8), 2)
    assert r != EpisodeRecord(True, 5.0, 0.1, 1e9, np.array([0, 1]), 2)
    for bad in (dict(cost=-1.0), dict(flops=math.nan), dict(length=-1),
                dict(calls=np.array([0.5, 1.0])), dict(calls=np.array([[1, 0]]))):
        kwargs = dict(success=True, quality=1.0, cost=0.1, flops=1.0,
                      calls=np.array([1, 0]), length=1) | bad
        with pytest.raises(ValueError, match="EpisodeRecord"):
            EpisodeRecord(**kwargs)


def _random_records(n, seed):
    rng = np.random.default_rng(seed)
    return [
        rec(bool(rng.random() < 0.6), float(rng.gamma(2.0, 0.05)), float(rng.gamma(2.0, 1e12)),
            quality=float(rng.uniform(0, 10)), calls=rng.integers(0, 3, 2), length=3)
        for _ in range(n)
    ]


@pytest.mark.parametrize("statistic", metrics.HEADLINE_METRICS)
def test_bootstrap_contains_point_and_narrows(statistic):
    small, large = _random_records(50, 1), _random_records(800, 1)
    widths = []
    for records in (small, large):
        low, high = metrics.bootstrap_ci(records, statistic, n_resamples=500, seed=3)
        point = getattr(metrics, statistic)(records)
        assert low <= point <= high
        assert low < high
        widths.append(high - low)
    assert widths[1] < widths[0] / 2  # ~ 1/sqrt(16) = 1/4 of the width


def test_bootstrap_is_reproducible_and_seeded():
    records = _random_records(100, 2)
    a = metrics.bootstrap_ci(records, "cps", seed=0)
    assert a == metrics.bootstrap_ci(records, "cps", seed=0)
    assert a != metrics.bootstrap_ci(records, "cps", seed=1)


def test_bootstrap_recomputes_ratio_per_resample():
    # With one success in 40 episodes, many resamples have no success and then CPS is
    # total cost / 1; a mean of per-episode ratios would be exactly 1.0 on every resample.
    records = [rec(True, 1.0)] + [rec(False, 1.0)] * 39
    low, high = metrics.bootstrap_ci(records, "cps", n_resamples=2000)
    assert high == pytest.approx(40.0)
    assert low > 5.0


def test_bootstrap_callable_matches_named_statistic():
    records = _random_records(60, 4)
    named = metrics.bootstrap_ci(records, "avg_cost", n_resamples=200, seed=5)
    generic = metrics.bootstrap_ci(records, metrics.avg_cost, n_resamples=200, seed=5)
    assert generic == pytest.approx(named)


def test_bootstrap_of_one_episode_is_degenerate():
    assert metrics.bootstrap_ci([rec(True, 0.3)], "cps") == (0.3, 0.3)


def test_bootstrap_rejects_bad_arguments():
    records = _random_records(5, 0)
    with pytest.raises(ValueError, match="unknown metric"):
        metrics.bootstrap_ci(records, "median_cost")
    with pytest.raises(ValueError, match="n_resamples"):
        metrics.bootstrap_ci(records, "cps", n_resamples=0)
    with pytest.raises(ValueError, match="confidence"):
        metrics.bootstrap_ci(records, "cps", confidence=1.0)




def test_pareto_front_hand_example():
    points = [(0.9, 10.0), (0.8, 2.0), (0.8, 3.0), (0.5, 2.0), (0.95, 10.0), (0.3, 0.5),
              (0.8, 2.0)]
    # (0.9, 10) is dominated by (0.95, 10); (0.8, 3) and (0.5, 2) by (0.8, 2);
    # the duplicate (0.8, 2) does not dominate its twin.
    assert metrics.pareto_front(points) == [(0.3, 0.5), (0.8, 2.0), (0.8, 2.0), (0.95, 10.0)]


def test_pareto_front_mapping_keeps_names():
    front = metrics.pareto_front(
        {"oracle": (1.0, 0.004), "rule": (0.95, 0.05), "all": (0.6, 0.3), "cheap": (0.4, 0.001)}
    )
    assert front == {"cheap": (0.4, 0.001), "oracle": (1.0, 0.004)}
    assert list(front) == ["cheap", "oracle"]


def test_pareto_front_rejects_bad_input():
    with pytest.raises(ValueError, match="at least one"):
        metrics.pareto_front([])
    with pytest.raises(ValueError, match="pairs"):
        metrics.pareto_front([(0.5,)])
    with pytest.raises(ValueError, match="finite"):
        metrics.pareto_front({"x": (math.nan, 1.0)})


def test_oracle_gap():
    assert metrics.oracle_gap(0.05, 0.004) == pytest.approx(12.5)
    assert metrics.oracle_gap(0.0, 0.0) == 1.0
    assert metrics.oracle_gap(0.1, 0.0) == math.inf
    with pytest.raises(ValueError, match="oracle_cps"):
        metrics.oracle_gap(0.1, -1.0)


# Slow tier (issue #36): in the fast tier tests/test_imports.py imports every module of
# cost_envs, cost_envs.metrics among them, in a fresh process and finds no torch.
@pytest.mark.slow
def test_metrics_module_does_not_import_torch():
    import subprocess
    import sys

    code = "import sys, cost_envs.metrics; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ------------------------------------------------------------------ share of the gap closed
def test_gap_closed_is_zero_at_the_rule_one_at_the_reference_and_nan_without_a_gap():
    from cost_envs.metrics import gap_closed

    assert gap_closed(0.8, 0.8, 1.0) == 0.0
    assert gap_closed(1.0, 0.8, 1.0) == 1.0
    assert gap_closed(0.7, 0.8, 1.0) == pytest.approx(-0.5)
    assert math.isnan(gap_closed(0.9, 1.0, 1.0)) and math.isnan(gap_closed(0.9, 1.0, 0.9))
    with pytest.raises(ValueError, match="reference"):
        gap_closed(0.5, 0.1, math.inf)


def test_gap_closed_interval_keeps_the_pairing_of_the_shared_tasks():
    from cost_envs.metrics import bootstrap_gap_closed

    rng = np.random.default_rng(0)
    rule = rng.normal(0.5, 1.0, 300)  # tasks differ a lot ...
    reference = rule + 0.4
    method = rule + 0.1  # ... but the method sits a quarter of the way up on every one
    share, low, high = bootstrap_gap_closed(method, rule, reference)
    assert share == pytest.approx(0.25) and high - low < 1e-9
    # Unpaired draws would see the task spread (sd 1.0 / sqrt(300) against a gap of 0.4).
    noisy = rule + 0.1 + rng.normal(0.0, 0.2, 300)
    _, low, high = bootstrap_gap_closed(noisy, rule, reference)
    assert 0.0 < high - low < 0.2


def test_gap_closed_interval_covers_the_spread_between_seeds():
    from cost_envs.metrics import bootstrap_gap_closed

    rng = np.random.default_rng(1)
    rule = rng.normal(0.5, 0.3, 200)
    reference = rule + 0.5
    same = np.stack([rule + 0.25] * 5)
    spread = rule[None, :] + np.array([0.05, 0.15, 0.25, 0.35, 0.45])[:, None]
    narrow = bootstrap_gap_closed(same, rule, reference)
    wide = bootstrap_gap_closed(spread, rule, reference)
    assert narrow[0] == pytest.approx(0.5) == wide[0]
    assert wide[2] - wide[1] > 0.2 > narrow[2] - narrow[1]
    assert all(math.isnan(v) for v in bootstrap_gap_closed(same, rule, rule)[1:])
    with pytest.raises(ValueError, match="reference must be finite per-task values"):
        bootstrap_gap_closed(same, rule, reference[:-1])


def _two_level_draws(runs, rule, reference, reps, seed=0):
    """The share's numerator and denominator on draws of seeds and tasks, by brute force."""
    rng = np.random.default_rng(seed)
    n_runs, n = runs.shape
    tasks = rng.integers(0, n, (reps, n))
    chosen = rng.integers(0, n_runs, (reps, n_runs))
    value = np.mean([runs[chosen[:, k][:, None], tasks].mean(axis=1) for k in range(n_runs)],
                    axis=0)
    base = rule[tasks].mean(axis=1)
    return value - base, reference[tasks].mean(axis=1) - base


def test_gap_closed_moments_are_the_two_level_bootstraps_variances():
    from cost_envs.metrics.bootstrap import gap_closed_moments

    rng = np.random.default_rng(5)
    rule = rng.normal(0.5, 0.3, 40)
    reference = rule + 0.2 + rng.normal(0, 0.1, 40)
    runs = rule[None] + rng.normal(0.1, 0.2, (5, 40)) + rng.normal(0, 0.05, (5, 1))
    n, d, var_n, var_d, cov = gap_closed_moments(runs, rule, reference)
    drawn_n, drawn_d = _two_level_draws(runs, rule, reference, 200_000)
    assert (n, d) == pytest.approx((drawn_n.mean(), drawn_d.mean()), abs=2e-4)
    assert var_n == pytest.approx(drawn_n.var(), rel=0.02)
    assert var_d == pytest.approx(drawn_d.var(), rel=0.02)
    assert abs(cov - np.cov(drawn_n, drawn_d)[0, 1]) < 0.02 * np.sqrt(var_n * var_d)


def test_gap_closed_interval_is_fiellers_and_has_no_seed():
    from cost_envs.metrics import bootstrap_gap_closed
    from cost_envs.metrics.bootstrap import fieller_interval, gap_closed_moments

    rng = np.random.default_rng(2)
    rule = rng.normal(0.5, 0.3, 400)
    runs = rule[None] + 0.3 + rng.normal(0, 0.3, (5, 400)) + rng.normal(0, 0.05, (5, 1))
    well = rule + 0.6 + rng.normal(0, 0.3, 400)  # a gap of 40 standard errors
    share, low, high = bootstrap_gap_closed(runs, rule, well)
    assert low < share < high and (share, low, high) == bootstrap_gap_closed(runs, rule, well)
    # where the gap is far from 0 the percentile bootstrap agrees with Fieller
    drawn_n, drawn_d = _two_level_draws(runs, rule, well, 20_000)
    assert [low, high] == pytest.approx(np.quantile(drawn_n / drawn_d, [0.025, 0.975]),
                                        abs=0.01)
    # a gap of 2 to 3 standard errors: bounded, wide, skewed, and no seed to move the ends
    barely = rule + 0.03 + rng.normal(0, 0.25, 400)
    _, gap, _, var_gap, _ = gap_closed_moments(rule, rule, barely)
    assert 2 < gap / np.sqrt(var_gap) < 3
    close = rule[None] + 0.02 + rng.normal(0, 0.1, (5, 400))
    share, low, high = bootstrap_gap_closed(close, rule, barely)
    assert np.isfinite([low, high]).all() and high - low > 1
    assert high - share > 2 * (share - low)  # a small gap's draws stretch the top
    # no gap at the level: unbounded, reported as nan (a percentile interval would
    # pretend to an end)
    assert np.isnan(fieller_interval(0.1, 0.1, 0.001, 0.01, 0.0)).all()
    assert fieller_interval(0.5, 1.0, 0.0, 0.0, 0.0) == (0.5, 0.5)
    assert fieller_interval(0.2, 1.0, 0.01, 0.0, 0.0) == pytest.approx(
        (0.2 - 1.959964 * 0.1, 0.2 + 1.959964 * 0.1))
