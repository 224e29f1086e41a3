"""The GSM8K routing report: RouteLLM outcomes routed by :mod:`agents.routers`.

:func:`report` runs the RouteLLM experiment: GSM8K (Mixtral-8x7B vs GPT-4) split by prompt
into train and test halves (:meth:`cost_envs.traces.TraceDataset.split_indices`), the
routers fitted on train, and the learned, cascade, random and per-query-oracle routers
scored on test with 95% bootstrap intervals over test queries; also the four MMLU
subjects, and the baselines on the TraceRouting-v0 test split. Then the held-out
evaluations of :mod:`experiments.traces.heldout`: every router of
:data:`agents.routers.ROUTERS` calibrated on training data for a 50% strong-call
share, on GSM8K's test half, on MMLU subjects and on RouterArena domains never seen in
training (intervals resampling whole groups), against random routing at the same share,
with rows whose ``l2`` (kNN: ``k``) is chosen inside each training fold; and the K-model
router (:mod:`experiments.traces.multi`) held out the same way.
Token counts are pinned to the documented approximation
(:data:`cost_envs.traces.APPROX_COUNTER`), so the numbers do not depend on whether
tiktoken happens to be installed. Everything is computed and
rendered (the Markdown, the JSON and the PNG's bytes, by :mod:`experiments.traces.report`)
before anything is written, and the three files are written all or nothing.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import gymnasium as gym
import numpy as np

from agents.files import write_files_atomic
from agents.routers import CascadeRouter, LogisticRouter, PricedRouter, cascade_curve
from agents.routers.base import take
from agents.routers.evaluation import curve_metrics
from agents.routers.policy import RouterPolicy, cascade_observations
from agents.routers.solvers import LogisticRegression
from agents.routers.statistics import (
    ANSWER_STATISTICS,
    STATISTICS,
    answer_statistics,
    weak_answers,
)
from cost_envs.config import integer
from cost_envs.metrics.routing import (
    oracle_point,
    oracle_scores,
    random_routing_curve,
    routing_curve,
)
from cost_envs.prices import default_price_table
from cost_envs.traces import TraceDataset, load_routerarena, load_traces
from experiments.shared.common import machine
from experiments.shared.figures import figure_files
from experiments.traces.heldout import PROTOCOLS, by_cost, evaluate, has_answers
from experiments.traces.multi import evaluate_multi
from experiments.traces.report import figure, json_ready, markdown, portable_sources

if TYPE_CHECKING:
    from cost_envs.envs.trace_routing import TraceRoutingEnv

SCALES = ("smoke", "default")
GSM8K = "gsm8k_responses.csv"
MMLU_DIR = "mmlu"
#: RouterArena's folder, beside the RouteLLM one by default.
ROUTERARENA_DIR = "routerarena"
#: Token counter of the report: the documented approximation, whatever is installed.
TOKEN_COUNTER = "approx"


def _curve_json(curve: Any) -> dict[str, list[float]]:
    return {"strong_share": curve.strong_share.tolist(), "accuracy": curve.accuracy.tolist(),
            "cost_per_query": curve.cost.tolist()}


def _cost_at(curve: Any, share: float) -> float:
    """Mean cost per query where the curve reaches ``share`` (linear between points)."""
    return float(np.interp(share, curve.strong_share, curve.cost))


def _fit(router: LogisticRouter, train: TraceDataset, cv: bool) -> dict[str, float]:
    """Fit on ``train``: settings chosen by cross-validation, or the router's own."""
    if cv:
        return router.cross_validate(train)
    router.fit(train)
    return {"l2": router.l2, "hashed_weight": router.hashed_weight}


def _experiment(data: TraceDataset, n_resamples: int, seed: int, cv: bool,
                keep_curves: bool) -> dict[str, Any]:
    """Split, fit on train, score on test: the numbers of one dataset.

    The cascade routers are added when the data has the weak model's answer texts.
    """
    table = default_price_table()
    costs = data.call_costs(table)
    weak, strong = by_cost(data, costs)
    train, test = data.split(seed=0, test_fraction=0.5)
    iw, is_ = data.model_index(weak), data.model_index(strong)
    w, s = test.correct[:, iw], test.correct[:, is_]
    test_costs = test.call_costs(table)
    wc, sc = test_costs[:, iw], test_costs[:, is_]
    router = LogisticRouter(weak, strong)
    chosen = _fit(router, train, cv)
    learned = router.scores(test)
    out: dict[str, Any] = {
        "source": data.source, "n_resamples": n_resamples, "queries": data.n_queries,
        "distinct_prompts": len(set(data.prompts)),
        "train": train.n_queries, "test": test.n_queries, "weak": weak, "strong": strong,
        "token_counter": data.token_counter,
        "accuracy_all": dict(zip(data.models, data.accuracy.tolist(), strict=True)),
        "accuracy_test": dict(zip(data.models, test.accuracy.tolist(), strict=True)),
        "cost_per_query_test": dict(zip(data.models, test_costs.mean(axis=0).tolist(),
                                        strict=True)),
        "router": chosen,
        "pgr_defined": bool(s.mean() > w.mean()),
    }
    share, acc = oracle_point(w, s)
    out["oracle_point"] = {"strong_share": share, "accuracy": acc}
    if not out["pgr_defined"]:
        return out
    length = np.array([len(p) for p in test.prompts], dtype=np.float64)
    # cost-aware: its curve runs from the best accuracy gained per dollar down (defaults)
    priced = cast(PricedRouter, PricedRouter(weak, strong).fit(train)).scores(test)
    routers: dict[str, np.ndarray | None] = {
        "learned": learned, "length": length, "priced": priced, "random": None,
        "oracle": oracle_scores(w, s)}
    curves = {
        "learned": routing_curve(learned, w, s, wc, sc),
        "length": routing_curve(length, w, s, wc, sc),
        "priced": routing_curve(priced, w, s, wc, sc),
        "random": random_routing_curve(w, s, wc, sc),
        "oracle": routing_curve(routers["oracle"], w, s, wc, sc),
    }
    if has_answers(data, weak):
        cascade = CascadeRouter(weak, strong)
        cascade_chosen = _fit(cascade, train, cv)
        routers["cascade"] = cascade.scores(test)
        # the no-training cascade: escalate exactly the answers without a "#### n"
        routers["no_final"] = 1.0 - answer_statistics(
            weak_answers(test, weak), test.prompts)[:, ANSWER_STATISTICS.index("has_final")]
        for name in ("cascade", "no_final"):
            curves[name] = cascade_curve(routers[name], w, s, wc, sc)
        out["cascade"] = {
            "router": cascade_chosen, "n_features": cascade.n_features,
            "statistics": [*STATISTICS, *ANSWER_STATISTICS],
            "weak_cost_per_query": float(wc.mean()),
        }
    cascade_run = "cascade" in routers
    # a cascade's escalation pays both calls (its AIQ's cost axis); random pays plain calls
    escalated = test_costs.copy()
    escalated[:, is_] += test_costs[:, iw]
    metrics = curve_metrics(test, routers, weak, strong, test_costs, n_resamples=n_resamples,
                            seed=seed,
                            reference=("random", "learned") if cascade_run else "random",
                            router_costs={k: escalated for k in ("cascade", "no_final")
                                          if k in routers})
    if cascade_run:  # of the differences against learned, only cascade's is reported
        for name, entry in metrics.items():
            paired = entry.pop("minus_learned", None)
            if name == "cascade":
                out["cascade"]["minus_learned"] = paired
    out["metrics"] = metrics
    out["cost_at_cpt_80"] = {
        name: _cost_at(curve, out["metrics"][name]["cpt_80"]["value"])
        for name, curve in curves.items()}
    out["_scores"] = {k: v for k, v in routers.items() if v is not None}
    if keep_curves:
        out["curves"] = {name: _curve_json(c) for name, c in curves.items()}
        out["_curves"] = curves
    return out


def _split_robustness(data: TraceDataset, seeds: Sequence[int]) -> list[dict[str, float]]:
    """APGR and CPTs of the learned and cascade routers on the test halves of other splits.

    Fixed hyperparameters (each router's defaults), fitted on each split's train half.
    """
    costs = data.call_costs(default_price_table())
    weak, strong = by_cost(data, costs)
    routers: dict[str, LogisticRouter] = {"": LogisticRouter(weak, strong)}
    if has_answers(data, weak):
        routers["cascade_"] = CascadeRouter(weak, strong)
    # a router's raw inputs are per query: computed once, indexed per split (cross_validate)
    raw = {prefix: router.inputs(data) for prefix, router in routers.items()}
    weak_correct = data.correct[:, data.model_index(weak)]
    strong_correct = data.correct[:, data.model_index(strong)]
    rows = []
    for seed in seeds:
        train, test = data.split_indices(seed=seed, test_fraction=0.5)
        row: dict[str, float] = {"split_seed": seed}
        for prefix, router in routers.items():
            fitted = cast(LogisticRouter, router.fit_inputs(take(raw[prefix], train),
                                                            ~weak_correct[train]))
            scores = fitted.scores_inputs(take(raw[prefix], test))
            curve = routing_curve(scores, weak_correct[test], strong_correct[test])
            row.update({f"{prefix}apgr": curve.apgr, f"{prefix}cpt_50": curve.cpt(0.5),
                        f"{prefix}cpt_80": curve.cpt(0.8)})
        rows.append(row)
    return rows


def _env_table(data: TraceDataset) -> dict[str, dict[str, Any]]:
    """Baselines and the learned policy on the TraceRouting-v0 test split, one epoch."""
    from agents.baselines import BASELINES
    from agents.evaluation import compare
    from agents.routers.random_router import RandomRouter
    from agents.rules import BestFixedRule

    train_env = gym.make("cost_envs/TraceRouting-v0", data=data, split="train")
    test_env = gym.make("cost_envs/TraceRouting-v0", data=data, split="test")
    policy = RouterPolicy(test_env).fit(train_env)
    # threshold: the training split's median score, so about half the queries go strong
    train_base = cast("TraceRoutingEnv", train_env.unwrapped)
    policy.threshold = float(np.median(policy.scores(train_base.initial_observations())))
    # one block: every test query once
    episodes = cast("TraceRoutingEnv", test_env.unwrapped).dataset.n_queries
    methods: dict[str, Any] = {name: BASELINES[name] for name in
                               ("oracle", "capability", "rule", "random", "all")}
    # the literature's random router: exactly one model per query, uniformly
    methods[RandomRouter.name] = RandomRouter

    def learned(env: gym.Env) -> RouterPolicy:
        clone = RouterPolicy(env, threshold=policy.threshold)
        clone.model = policy.model
        return clone

    methods["learned (median threshold)"] = learned
    # Issue #10's best fixed rule, searched on the training split only, then frozen.
    methods["best fixed rule (train split)"] = BestFixedRule(train_env)
    return compare(methods, "cost_envs/TraceRouting-v0", episodes=episodes, seed=0,
                   env_kwargs={"data": data, "split": "test"}, n_resamples=500)


#: What TraceRouting-v0(cascade=True) shows of the first answer, besides the prompt.
ENV_CASCADE_COLUMNS = ("query_features", "prompt_length", "answer_features", "answer_length",
                       "answer_marker")


def _env_cascade_check(data: TraceDataset) -> dict[str, Any]:
    """A logistic regression on the env's cascade observation, fitted on train, on test.

    Tells whether TraceRouting-v0(cascade=True) reveals enough of the first answer for
    the cascade router to act in it (point values on the test split).
    """
    envs = {split: gym.make("cost_envs/TraceRouting-v0", data=data, split=split, cascade=True)
            for split in ("train", "test")}
    try:
        bases = {k: cast("TraceRoutingEnv", env.unwrapped) for k, env in envs.items()}
        layout = bases["train"].observation_layout
        columns = np.r_[tuple(layout[k] for k in ENV_CASCADE_COLUMNS)]
        x = {k: cascade_observations(env)[:, columns] for k, env in envs.items()}
        weak = bases["train"].cheapest
        strong = bases["train"].strongest
        model = LogisticRegression(10.0).fit(
            x["train"], ~bases["train"].dataset.correct[:, weak])
        correct = bases["test"].dataset.correct
        curve = routing_curve(model.predict_proba(x["test"]), correct[:, weak],
                              correct[:, strong])
    finally:
        for env in envs.values():
            env.close()
    return {"columns": list(ENV_CASCADE_COLUMNS), "inputs": len(columns),
            "apgr": curve.apgr, "cpt_50": curve.cpt(0.5), "cpt_80": curve.cpt(0.8)}


def _loaders(data_dir: Path, arena_dir: Path) -> dict[str, tuple[Path, Any]]:
    """Each held-out dataset's path and loader."""
    return {
        "gsm8k": (data_dir / GSM8K, lambda: load_traces(data_dir / GSM8K,
                                                        token_counter=TOKEN_COUNTER)),
        "mmlu": (data_dir / MMLU_DIR, lambda: load_traces(
            sorted((data_dir / MMLU_DIR).glob("mmlu_*.csv")), token_counter=TOKEN_COUNTER)),
        "routerarena": (arena_dir, lambda: load_routerarena(arena_dir)),
    }


def _heldout_unit(name: str, kind: str, data_dir: Path, arena_dir: Path, n_resamples: int,
                  embeddings: bool) -> dict[str, Any]:
    """One dataset's held-out evaluation (``kind`` ``"routers"``) or its K-model router's."""
    data = _loaders(data_dir, arena_dir)[name][1]()
    if kind == "routers":
        return evaluate(data, PROTOCOLS[name], n_resamples, embeddings=embeddings)
    return evaluate_multi(data, PROTOCOLS[name], n_resamples)


def heldout(data_dir: Path, arena_dir: Path, n_resamples: int, embeddings: bool = False,
            k_model: bool = True, jobs: int = 1) -> dict[str, Any]:
    """The held-out evaluations (:mod:`experiments.traces.heldout`) of every dataset found.

    A dataset whose files are absent is ``{"skipped": reason}``. ``embeddings`` adds the
    MiniLM routers (the ``embeddings`` extra; ``benchmarks/routing_embeddings.py``);
    ``k_model`` adds each dataset's ``"k_model"`` entry, the K-model router held out the
    same way (:func:`experiments.traces.multi.evaluate_multi`). ``jobs`` > 1 spreads the
    evaluations over that many worker processes (each is a function of its data and fixed
    seeds alone, so the result is the same to the bit; RouterArena's routers, the largest,
    about 24 s on one core, bound it).
    """
    present = {name: path.exists() for name, (path, _) in _loaders(data_dir, arena_dir).items()}
    units = [(name, kind) for name in present if present[name]
             for kind in ("routers", "k_model")[:2 if k_model else 1]]
    arguments = (data_dir, arena_dir, n_resamples, embeddings)
    if jobs > 1:
        with ProcessPoolExecutor(min(jobs, len(units)) or 1,
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_heldout_unit, name, kind, *arguments)
                       for name, kind in units]
            results = dict(zip(units, (future.result() for future in futures), strict=True))
    else:
        results = {(name, kind): _heldout_unit(name, kind, *arguments)
                   for name, kind in units}
    out: dict[str, Any] = {}
    for name, (path, _) in _loaders(data_dir, arena_dir).items():
        if not present[name]:
            out[name] = {"skipped": f"{path} not found"}
            continue
        out[name] = results[(name, "routers")]
        if k_model:
            out[name]["k_model"] = results[(name, "k_model")]
    return out


def report(out_dir: Path, scale: str, data_dir: Path, arena_dir: Path | None = None,
           jobs: int = 1) -> str:
    """Run the GSM8K routing experiment and write ``trace_routing.{md,json,png,svg}``.

    Args:
        out_dir: Where to write the three files (created if needed).
        scale: ``"smoke"`` (GSM8K's table with 200 resamples and fixed hyperparameters,
            the held-out evaluations with 200) or ``"default"`` (2,000 resamples,
            hyperparameters by CV on train, five other splits, the MMLU subjects, the env
            baselines and the check of the env's cascade observation, the held-out
            evaluations with 1,000: under a minute on one core). Both include the cascade
            routers when the data logs the weak model's answers (GSM8K does), and the
            held-out evaluations of :mod:`experiments.traces.heldout` (GSM8K by query,
            the MMLU subjects and RouterArena's domains by group).
        data_dir: The RouteLLM folder (``gsm8k_responses.csv`` and ``mmlu/``).
        arena_dir: RouterArena's folder (default ``data_dir.parent / "routerarena"``);
            its held-out section is skipped when it is absent.
        jobs: Worker processes for the held-out evaluations (:func:`heldout`), which then
            run while this process fits the rest; the files are the same for any value.

    Returns:
        The Markdown text.

    Raises:
        ValueError: For an unknown scale.
        FileNotFoundError: When the data is missing.
    """
    if scale not in SCALES:
        raise ValueError(f"scale: expected one of {list(SCALES)}, got {scale!r}")
    out_dir, data_dir = Path(out_dir), Path(data_dir)
    arena_dir = data_dir.parent / ROUTERARENA_DIR if arena_dir is None else Path(arena_dir)
    gsm_path = data_dir / GSM8K
    if not gsm_path.is_file():
        raise FileNotFoundError(f"{gsm_path} not found: the RouteLLM data lives outside the "
                                "repository (../shared/data/routellm)")
    integer(jobs, "jobs", minimum=1, where="traces")
    start = time.perf_counter()
    smoke = scale == "smoke"
    n_resamples = 200 if smoke else 2000
    # The held-out evaluations are about four fifths of the work: with workers they run
    # meanwhile (a thread waits on their processes), else after the rest, as before.
    with ThreadPoolExecutor(1) as waiter:
        pending = (waiter.submit(heldout, data_dir, arena_dir, 200 if smoke else 1000,
                                 jobs=jobs) if jobs > 1 else None)
        data = load_traces(gsm_path, token_counter=TOKEN_COUNTER)
        gsm = _experiment(data, n_resamples, seed=0, cv=not smoke, keep_curves=True)
        robustness = [] if smoke else _split_robustness(data, seeds=range(1, 6))
        mmlu = [] if smoke else [
            _experiment(load_traces(path, token_counter=TOKEN_COUNTER), 1000, seed=0,
                        cv=False, keep_curves=False)
            for path in sorted((data_dir / MMLU_DIR).glob("mmlu_*.csv"))]
        env_rows = None if smoke else _env_table(data)
        env_cascade = None if smoke else _env_cascade_check(data)
        held_out = (pending.result() if pending is not None
                    else heldout(data_dir, arena_dir, 200 if smoke else 1000))
    seconds = time.perf_counter() - start
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    text = markdown(gsm, mmlu, robustness, env_rows, scale, n_resamples, seconds, env_cascade,
                    held_out, load)
    payload = portable_sources(json_ready({
        "machine": machine(), "scale": scale, "n_resamples": n_resamples, "seconds": seconds,
        "heldout": held_out, "gsm8k": gsm, "gsm8k_other_splits": robustness, "mmlu": mmlu,
        "trace_routing_env": env_rows, "trace_routing_env_cascade_check": env_cascade}),
        data_dir.parent)
    # render everything first, so a rendering error leaves the old files untouched
    files: dict[str, str | bytes] = {
        **figure_files("trace_routing", figure(gsm)),
        "trace_routing.json": json.dumps(payload, indent=1) + "\n",
        "trace_routing.md": text,
    }
    write_files_atomic(out_dir, files)
    return text
