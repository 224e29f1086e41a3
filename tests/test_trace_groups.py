"""Per-query groups, lists of files, splits and folds by group (cost_envs.traces)."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from agents.routers import LogisticRouter as TraceRouter
from cost_envs.traces import (
    dataset_from_records,
    file_group,
    load_traces,
    records_from_dataset,
)

ROUTELLM = Path(__file__).resolve().parents[2] / "shared" / "data" / "routellm"
MMLU = ["anatomy", "college_physics", "high_school_mathematics", "world_religions"]


def rows(n_queries: int = 6, models: tuple[str, ...] = ("a", "b"), groups: int = 3
         ) -> list[dict]:
    """Generic rows; query q is in group g{q % groups}; the second model is the better."""
    out = []
    for q in range(n_queries):
        for j, m in enumerate(models):
            out.append({"query_id": f"q{q}", "model": m,
                        "correct": q % 2 == 0 if j == 0 else q % 4 != 1,
                        "input_tokens": 10 + q, "output_tokens": 5 * (j + 1),
                        "prompt": f"question {q}", "group": f"g{q % groups}"})
    return out


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def located(err: pytest.ExceptionInfo, path: Path, line: int | None, column: str | None,
            text: str) -> None:
    message = str(err.value)
    assert str(path) in message, message
    if line is not None:
        assert f"line {line}:" in message, message
    if column is not None:
        assert f"column {column!r}" in message, message
    assert text in message, message


# ------------------------------------------------------------------ generic schema
def test_generic_group_column_is_read_and_kept(tmp_path: Path) -> None:
    data = load_traces(write_jsonl(tmp_path / "t.jsonl", rows()))
    assert data.groups == ("g0", "g1", "g2", "g0", "g1", "g2")
    csv_path = tmp_path / "t.csv"
    records = rows()
    columns = list(records[0])
    csv_path.write_text(",".join(columns) + "\n" + "".join(
        ",".join(str(r[c]) for c in columns) + "\n" for r in records), encoding="utf-8")
    assert load_traces(csv_path).groups == data.groups
    assert dataset_from_records(records_from_dataset(data)).groups == data.groups
    # kept through subset, select_models and split; absent stays absent
    assert data.subset([4, 0]).groups == ("g1", "g0")
    assert data.select_models(["b"]).groups == data.groups
    train, test = data.split(seed=1, test_fraction=0.5)
    assert sorted(train.groups + test.groups) == sorted(data.groups)
    plain = dataset_from_records([{k: v for k, v in r.items() if k != "group"} for r in rows()])
    assert plain.groups is None and plain.subset([0]).groups is None
    assert "group" not in records_from_dataset(plain)[0]
    # groups are part of the data's identity
    regrouped = dataset_from_records([{**r, "group": "x"} for r in rows()])
    assert len({plain.fingerprint, data.fingerprint, regrouped.fingerprint}) == 3


BAD_GROUPS = {
    "rows disagree": (lambda r: r[1].update(group="other"), 2, "a query's rows must share"),
    "one query without": (lambda r: [x.pop("group") for x in r[2:4]], 3,
                          "query 'q1' (first seen here) has no group, but other queries do"),
    "not a string": (lambda r: [x.update(group=7) for x in r[4:6]], 5, "expected a string"),
    "blank": (lambda r: [x.update(group="  ") for x in r[4:6]], 5, "non-empty string"),
}


@pytest.mark.parametrize("case", sorted(BAD_GROUPS))
def test_bad_group_values_name_file_line_and_column(tmp_path: Path, case: str) -> None:
    edit, line, text = BAD_GROUPS[case]
    records = rows()
    edit(records)
    path = write_jsonl(tmp_path / "bad.jsonl", records)
    with pytest.raises(ValueError) as err:
        load_traces(path)
    located(err, path, line, "group", text)


# ------------------------------------------------------------------ RouteLLM CSVs
def test_routellm_subject_column_is_the_group_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "mixed_responses.csv"
    path.write_text("prompt,subject,m1,m2\nq1,law,True,False\nq2,art,False,True\n",
                    encoding="utf-8")
    data = load_traces(path, token_counter="approx")
    assert data.models == ("m1", "m2") and data.groups == ("law", "art")
    assert data.correct.tolist() == [[True, False], [False, True]]
    path.write_text("prompt,m1,group\nq1,True,law\n", encoding="utf-8")
    assert load_traces(path, token_counter="approx").groups == ("law",)
    # without a group column: the file's name, "_responses" dropped
    path.write_text("prompt,m1,m2\nq1,True,False\n", encoding="utf-8")
    assert load_traces(path, token_counter="approx").groups == ("mixed",)
    assert file_group("x/mmlu_anatomy.csv") == "mmlu_anatomy"


@pytest.mark.parametrize(("text", "line", "column", "message"), [
    ("prompt,group,subject,m1\nq,a,b,True\n", 1, "subject", "a second group column"),
    ("prompt,dataset,m1\nq,gsm8k,True\n", 2, "dataset", "got 'gsm8k' (read as a model"),
    ("prompt,subject,m1\nq,,True\n", 2, "subject", "missing value"),
])
def test_routellm_other_columns_are_clear_errors(tmp_path: Path, text: str, line: int,
                                                 column: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as err:
        load_traces(path, token_counter="approx")
    located(err, path, line, column, message)


# ------------------------------------------------------------------ lists of files
def test_a_list_of_files_is_one_dataset_with_a_group_per_file(tmp_path: Path) -> None:
    a = tmp_path / "mmlu_law.csv"
    a.write_text("prompt,m1,m2\nq1,True,False\nq2,False,False\n", encoding="utf-8")
    b = tmp_path / "mmlu_art.csv"  # the models in the other order: columns follow the first
    b.write_text("prompt,m2,m1\nq3,True,False\n", encoding="utf-8")
    generic = write_jsonl(tmp_path / "mine.jsonl", [
        {k: v for k, v in r.items() if k != "group"} for r in rows(1, ("m1", "m2"))])
    data = load_traces([a, b, generic], token_counter="approx")
    assert data.models == ("m1", "m2")
    assert data.query_ids == ("mmlu_law:1", "mmlu_law:2", "mmlu_art:1", "mine:q0")
    assert data.groups == ("mmlu_law", "mmlu_law", "mmlu_art", "mine")
    assert data.correct.tolist() == [[True, False], [False, False], [False, True],
                                     [True, True]]
    assert data.prompts[2] == "q3" and data.n_queries == 4
    c = tmp_path / "other.csv"
    c.write_text("prompt,m1,m3\nq,True,False\n", encoding="utf-8")
    with pytest.raises(ValueError, match="must log the same models") as err:
        load_traces([a, c], token_counter="approx")
    assert str(err.value).startswith(str(c))
    with pytest.raises(ValueError, match="non-empty list"):
        load_traces([])
    with pytest.raises(ValueError, match="distinct names"):
        load_traces([a, a], token_counter="approx")


def test_real_mmlu_subjects_combine_into_four_groups() -> None:
    paths = [ROUTELLM / "mmlu" / f"mmlu_{s}.csv" for s in MMLU]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"{ROUTELLM / 'mmlu'} not found: the RouteLLM data lives outside the "
                    "repository")
    data = load_traces(paths, token_counter="approx")
    assert data.n_queries == 135 + 102 + 270 + 171
    assert sorted(set(data.groups)) == [f"mmlu_{s}" for s in MMLU]
    train, test = data.split_indices(seed=0, test_fraction=0.5, split_by="group")
    assert {data.groups[i] for i in train}.isdisjoint({data.groups[i] for i in test})


# ------------------------------------------------------------------ splits and folds
def grouped(n_groups: int = 12, per_group: int = 5,
            models: tuple[str, ...] = ("a", "b")) -> object:
    return dataset_from_records(rows(n_groups * per_group, models, groups=n_groups))


def test_split_by_group_holds_out_whole_groups_and_is_seeded() -> None:
    data = grouped()
    sizes = []
    for seed in range(10):
        train, test = data.split_indices(seed=seed, test_fraction=0.3, split_by="group")
        assert sorted([*train, *test]) == list(range(data.n_queries))
        assert {data.groups[i] for i in train}.isdisjoint({data.groups[i] for i in test})
        again = data.split_indices(seed=seed, test_fraction=0.3, split_by="group")
        assert np.array_equal(test, again[1])
        sizes.append(len(test))
    assert set(sizes) == {20}  # whole groups of 5: 4 groups come closest to 18
    tests = {tuple(data.split_indices(s, 0.3, "group")[1]) for s in range(10)}
    assert len(tests) > 1  # the seed picks the groups
    # the split by query ignores groups: some group is on both sides
    train, test = data.split_indices(seed=0, test_fraction=0.3)
    assert {data.groups[i] for i in train} & {data.groups[i] for i in test}


def test_split_by_group_errors() -> None:
    plain = dataset_from_records([{k: v for k, v in r.items() if k != "group"}
                                  for r in rows()])
    with pytest.raises(ValueError, match="split_by='group' needs per-query groups"):
        plain.split(split_by="group")
    with pytest.raises(ValueError, match="share one group"):
        dataset_from_records(rows(groups=1)).split(split_by="group")
    with pytest.raises(ValueError, match="split_by"):
        plain.split(split_by="subject")


def test_folds_by_group_keep_each_group_in_one_fold() -> None:
    data = grouped()
    fold = data.fold_ids(folds=4, seed=2, split_by="group")
    for g in set(data.groups):
        assert len({int(fold[i]) for i, x in enumerate(data.groups) if x == g}) == 1
    assert sorted(np.bincount(fold).tolist()) == [15, 15, 15, 15]  # 3 groups of 5 each
    by_query = data.fold_ids(folds=4, seed=2)
    assert len({int(by_query[i]) for i, x in enumerate(data.groups) if x == "g0"}) > 1
    with pytest.raises(ValueError, match="only 3 clusters"):
        dataset_from_records(rows(groups=3)).fold_ids(folds=5, split_by="group")


def test_cross_validation_folds_by_group() -> None:
    data = grouped(n_groups=3, per_group=20, models=("gpt-4.1-nano", "gpt-4.1"))
    router = TraceRouter("gpt-4.1-nano", "gpt-4.1", n_features=16)
    capped = router.cross_validate(data, folds=5, split_by="group")  # 3 folds: one a group
    assert len(capped["cv_aiq"]) == 9 and router.l2 == capped["l2"]
    chosen = router.cross_validate(data, l2_grid=(1.0,), weight_grid=(0.0,), folds=3,
                                   split_by="group")
    assert chosen["l2"] == 1.0 and set(chosen["cv_aiq"]) == {"l2=1,w=0"}


def test_trace_routing_env_splits_by_group() -> None:
    data = grouped(models=("gpt-4.1-nano", "gpt-4.1"))
    envs = {s: gym.make("cost_envs/TraceRouting-v0", data=data, split=s, split_by="group")
            for s in ("train", "test")}
    train, test = (envs[s].unwrapped.dataset for s in ("train", "test"))
    assert set(train.groups).isdisjoint(test.groups)
    assert train.n_queries + test.n_queries == data.n_queries
    for env in envs.values():
        env.close()
    with pytest.raises(ValueError, match="split_by"):
        gym.make("cost_envs/TraceRouting-v0", data=data, split_by="domain")
