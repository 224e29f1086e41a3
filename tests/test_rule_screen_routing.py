"""The screening of routers against the training-free rule (experiments/traces/rule_screen.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cost_envs.traces import TraceDataset
from experiments.traces import conformal, rule_screen
from experiments.traces.rule_screen import Screen, best_of, hull_at

WEAK, STRONG = "weak", "strong"


def dataset(signal: str, n: int = 240, n_groups: int = 8, seed: int = 0,
            same_cost: bool = False) -> TraceDataset:
    """Grouped queries; the weak model fails on "hard" ones, said by the words or the length.

    ``signal="words"``: hard prompts name an integral, every prompt about as long;
    ``signal="length"``: hard prompts are the long ones, the words say nothing;
    ``signal="none"``: nothing says which are hard. A call
    costs its prompt's characters times the model's price (the strong one 10x, unless
    ``same_cost``).
    """
    rng = np.random.default_rng(seed)
    hard = rng.random(n) < 0.5
    noise = ["".join(rng.choice(list("abcdefghij"), 5)) for _ in range(n)]
    if signal == "words":
        topic = np.where(hard, "integral of the series", "capital of the country")
        pad = rng.integers(0, 30, n)
    elif signal == "none":
        topic = np.array(["thing of the kind"] * n)
        pad = rng.integers(0, 30, n)
    else:
        topic = np.array(["thing of the kind"] * n)
        pad = np.where(hard, rng.integers(40, 80, n), rng.integers(0, 30, n))
    prompts = tuple(f"what is the {t} {x}? {'z ' * p}" for t, x, p in
                    zip(topic, noise, pad, strict=True))
    weak = np.where(hard, rng.random(n) < 0.2, rng.random(n) < 0.9)
    strong = rng.random(n) < 0.9
    correct = np.column_stack([weak, strong])
    chars = np.array([len(p) for p in prompts], dtype=np.float64)
    cost = np.column_stack([chars * 1e-6, chars * (1e-6 if same_cost else 1e-5)])
    return TraceDataset((WEAK, STRONG), tuple(f"q{i}" for i in range(n)), prompts,
                        correct.astype(float), correct, np.ones((n, 2)), np.ones((n, 2)),
                        cost=cost, groups=tuple(f"g{i % n_groups}" for i in range(n)))


def halves(data: TraceDataset) -> tuple[np.ndarray, np.ndarray]:
    return data.split_indices(seed=0, test_fraction=0.5, split_by="group")


def test_hull_is_the_non_decreasing_upper_hull() -> None:
    cost = np.array([0.0, 0.5, 1.0, 2.0, 3.0])
    acc = np.array([0.0, 0.1, 0.5, 0.6, 0.4])
    assert hull_at(cost, acc, 0.5) == pytest.approx(0.25)  # (0.5, 0.1) lies below
    assert hull_at(cost, acc, 1.5) == pytest.approx(0.55)
    assert hull_at(cost, acc, 3.0) == pytest.approx(0.6)  # never decreasing
    assert best_of((0.0, 1.0, 2.0), {0.0: 0.5, 1.0: 0.5, 2.0: float("nan")}) == 0.0


def test_plus_learns_a_correction_that_transfers_across_groups() -> None:
    data = dataset("words")
    box = Screen(data, "group")
    train, test = halves(data)
    _, on_test, fact = box.plus(["logistic"], train, test)
    assert fact["w"] > 0  # the words say which queries need the strong model
    assert box.plus(["logistic"], train, test, "gap")[2]["w"] > 0  # the tables' criterion
    assert box.aiq(test, on_test) > box.aiq(test, box.rule_base(train, test)) + 0.05
    entry = box.evaluate([(train, test)], "plus:logistic", n_resamples=200)
    low = entry["minus_rule_at_cost"][1]
    assert low > 0  # resolved above the rule's held-out hull at its cost


def test_plus_keeps_the_rule_where_the_folds_cannot_tell() -> None:
    data = dataset("words", same_cost=True)  # no curve, no AIQ to compare
    box = Screen(data, "group")
    train, test = halves(data)
    on_train, on_test, fact = box.plus(["logistic"], train, test)
    assert fact["w"] == 0.0  # ties go to the first weight: the rule itself
    np.testing.assert_array_equal(on_test, box.rule_base(train, test))
    np.testing.assert_array_equal(on_train, box.rule_base(train, train))


def test_share_is_chosen_among_the_shares_on_training_groups() -> None:
    data = dataset("length")
    box = Screen(data, "group")
    train, test = halves(data)
    _, _, fact = box.share([], train, test)
    assert fact["share"] in rule_screen.SHARES
    with pytest.raises(ValueError, match="unknown learner"):
        box.make("plus:nope")


def test_a_threshold_of_the_rule_lies_on_or_below_its_own_hull() -> None:
    data = dataset("none")
    box = Screen(data, "group")
    train, test = halves(data)
    on_train, on_test = box.rule_base(train, train), box.rule_base(train, test)
    curve = box.curve(test, on_test)
    gaps = [box.gap(test, on_train, on_test, s, curve) for s in rule_screen.SHARES]
    assert max(gaps) <= 1e-12 and min(gaps) < -1e-3  # below it where the curve is not concave


def test_the_command_screens_a_folder_of_subjects(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    folder = tmp_path / "routellm" / "mmlu"
    folder.mkdir(parents=True)
    for subject in ("algebra", "botany", "chemistry", "drama"):
        rows = ["prompt,mistralai/Mixtral-8x7B-Instruct-v0.1,gpt-4-1106-preview"]
        for i in range(30):
            rows.append(f"{subject} question {i} {'x ' * int(rng.integers(1, 40))},"
                        f"{rng.random() < 0.5},{rng.random() < 0.8}")
        (folder / f"mmlu_{subject}.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "screen.json"
    assert rule_screen.main(["--data-dir", str(tmp_path / "routellm"), "--datasets", "mmlu",
                             "--candidates", "alone:rule", "plus:logistic", "conf:rule",
                             "--resamples", "50", "--out", str(out)]) == 0
    result = json.loads(out.read_text())["mmlu"]
    assert sorted(result) == ["alone:rule", "conf:rule", "plus:logistic"]
    assert result["conf:rule"]["tables"]["guarantee"]["units"] == 4  # each subject once
    assert sorted(result["alone:rule"]) == [*(f"seed {s}" for s in rule_screen.SEEDS),
                                            "tables"]
    printed = capsys.readouterr().out
    assert "| alone:rule | " in printed and "**mmlu**, the conformal guarantee" in printed
    assert rule_screen.main(["--data-dir", str(tmp_path / "none"), "--datasets", "mmlu",
                             "--out", str(out)]) == 2


@pytest.mark.parametrize(("arguments", "named"), [
    (["--candidates", "plus:prcied"], "unknown learner 'prcied'"),
    (["--candidates", "sometimes:priced"], "expected alone:NAME"),
    (["--candidates", "conf:priced+mf"], "conf|crc:NAME|rule+NAME"),
    (["--resamples", "0"], "--resamples: expected a positive integer, got 0"),
    (["--resam", "10"], "unrecognized arguments: --resam"),
])
def test_a_bad_value_is_refused_in_one_line_before_any_data_is_read(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str],
        named: str) -> None:
    # --data-dir does not exist: a refusal that read it would name it instead
    with pytest.raises(SystemExit) as refused:
        rule_screen.main(["--data-dir", str(tmp_path / "none"), "--out",
                          str(tmp_path / "screen.json"), *arguments])
    assert refused.value.code == 2
    assert named in capsys.readouterr().err


def test_an_unwritable_out_is_refused_before_the_half_hour_of_work(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a_file").write_text("")
    with pytest.raises(SystemExit):
        rule_screen.main(["--data-dir", str(tmp_path / "none"),
                          "--out", str(tmp_path / "a_file" / "screen.json")])
    assert "--out:" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_the_conformal_threshold_reads_the_ceil_n_plus_1_order_statistic() -> None:
    assert [conformal.order_statistic(n, a) for n, a in
            ((9, 0.1), (10, 0.1), (10, 0.2), (19, 0.1), (5, 0.1))] == [9, 10, 9, 18, 6]
    scores = np.random.default_rng(0).permutation(10).astype(float)  # one query per unit
    units = np.arange(10)
    # k = ceil(11 * 0.8) = 9: above the 9th smallest score (8), so only the unit at 9 calls
    t = conformal.conformal_threshold(scores, units, 0.5, 0.2)
    assert 8.0 < t <= 9.0
    assert conformal.conformal_threshold(scores, units, 0.5, 0.1) > 9.0  # k = 10: none
    assert conformal.conformal_threshold(scores[:5], units[:5], 0.5, 0.1) == np.inf  # k > n
    # within a unit the calls go from the highest score down, tied scores together
    np.testing.assert_array_equal(
        conformal.unit_limits(np.array([4.0, 3, 2, 1, 4, 3, 3, 1]),
                              np.array([0, 0, 0, 0, 1, 1, 1, 1]), 0.5), [2.0, 3.0])
    # risk control: (calls + 1) / (n + 1) <= 0.5 with n = 4 allows one call, not two
    assert conformal.risk_control_threshold(np.arange(4.0), np.arange(4), 0.5) == 3.0
    assert conformal.risk_control_threshold(np.arange(1.0), np.arange(1), 0.4) == np.inf
    # n = 1, target 0.5: (0 + 1) / 2 meets it, (1 + 1) / 2 does not: just above the score
    assert conformal.risk_control_threshold(np.ones(1), np.arange(1), 0.5) == \
        np.nextafter(1.0, np.inf)


def test_a_new_exchangeable_group_stays_within_the_target_at_the_promised_rate() -> None:
    # groups differ (each its own mean score); 10 calibration groups and one new one
    rng = np.random.default_rng(1)
    trials, n, size, alpha = 3000, 10, 20, 0.2
    units = np.repeat(np.arange(n), size)
    within, mean_share = [], []
    for _ in range(trials):
        s = rng.normal(rng.normal(0, 1, n + 1)[:, None], 1.0, (n + 1, size))
        t = conformal.conformal_threshold(s[:n].ravel(), units, 0.5, alpha)
        within.append(np.mean(s[n] >= t) <= 0.5)
        mean_share.append(np.mean(s[n] >= conformal.risk_control_threshold(
            s[:n].ravel(), units, 0.5)))
    rate, se = float(np.mean(within)), float(np.sqrt(0.2 * 0.8 / trials))
    # promised >= 1 - alpha = 0.8; exactly k / (n + 1) = 9/11 here (no ties); the plain
    # quantile (k = ceil(n (1 - alpha)) = 8) would give 8/11 = 0.73
    assert rate >= 1 - alpha - 3 * se
    assert abs(rate - 9 / 11) < 4 * se
    assert 0.3 < np.mean(mean_share) <= 0.5 + 3 * np.std(mean_share) / np.sqrt(trials)


def test_the_conformal_threshold_reads_only_training_groups() -> None:
    data = dataset("length", n=1200, n_groups=60)
    box = Screen(data, "group")
    train, test = halves(data)
    fit, cal = box.calibration(train)
    assert np.all(np.isin(cal, train)) and np.all(np.isin(fit, train))
    assert not set(box.units(cal)) & set(box.units(fit))  # whole groups on each side
    for mode in ("conf", "crc"):
        on_fit, on_test, fact = box.conformal(mode, ["rule"], train, test)
        assert np.isfinite(fact["threshold"]) and fact["calibration_units"] >= 10
        # the threshold is the calibration groups' alone, whatever is held out
        assert box.conformal(mode, ["rule"], train, test[::3])[2]["threshold"] == \
            fact["threshold"]
        on_cal = box.alone("rule", fit, cal)[1]
        expected = (conformal.conformal_threshold(on_cal, box.units(cal), 0.5, 0.1)
                    if mode == "conf" else
                    conformal.risk_control_threshold(on_cal, box.units(cal), 0.5))
        assert fact["threshold"] == expected
        # fitted on the proper-training groups only, not refitted on the calibration ones
        np.testing.assert_array_equal(on_fit, box.alone("rule", fit, test)[0])
        np.testing.assert_array_equal(on_test, box.alone("rule", fit, test)[1])
    entry = box.evaluate([(train, test)], "crc:rule+logistic", n_resamples=50)
    promise = entry["guarantee"]
    assert promise["alpha"] is None and promise["units"] == len(set(box.units(test)))
    assert 0 < promise["mean_share"] == pytest.approx(entry["test_share"], abs=0.1)
    assert rule_screen.parse_candidate("conf:rule+priced") == ("conf", ["rule", "priced"])
    assert rule_screen.parse_candidate("crc:rule") == ("crc", ["rule"])
    assert rule_screen.parse_candidate("conf:priced") == ("conf", ["priced"])
