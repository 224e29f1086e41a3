"""The GSM8K routing report's rendering: the Markdown page, the frontier figure, JSON values.

Pure functions of the numbers :mod:`experiments.traces.runner` computes: :func:`markdown` (the
page ``trace_routing.md``), :func:`figure` (the PNG's and SVG's bytes) and :func:`json_ready`
(values for ``trace_routing.json``: keys starting with ``_`` dropped, non-finite floats
as ``null``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agents.evaluation import value_interval
from agents.routers.statistics import ANSWER_STATISTICS, STATISTICS
from cost_envs.prices import default_price_table
from experiments.shared.figures import Rendered, pyplot, render
from experiments.traces.heldout import markdown as heldout_markdown
from experiments.traces.multi import markdown as multi_markdown


def _fmt(entry: Mapping[str, Any], digits: int = 3) -> str:
    low, high = entry["ci"]
    return value_interval(entry["value"], low, high, fmt=f".{digits}f")


def figure(result: Mapping[str, Any]) -> Rendered:
    """:func:`draw_frontier`'s figure as PNG and SVG bytes."""
    return render(draw_frontier(result), dpi=110)


def draw_frontier(result: Mapping[str, Any]) -> Any:
    """The GSM8K frontier (accuracy vs strong-call share and vs cost), a Figure."""
    plt = pyplot()
    curves = result["_curves"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"learned": ("C0", "-", "learned router"),
              "length": ("C1", "-.", "longest prompts first"),
              "priced": ("C3", "-", "priced router (accuracy gained per dollar)"),
              "cascade": ("C4", "-", "cascade router (weak answer read first)"),
              "no_final": ("C5", "-.", "cascade: escalate answers without '#### n'"),
              "random": ("C7", "--", "random routing"),
              "oracle": ("C2", ":", "oracle scores, threshold sweep")}
    for name, curve in curves.items():
        color, line, label = styles[name]
        axes[0].plot(curve.strong_share, curve.accuracy, line, color=color, label=label)
        axes[1].plot(curve.cost * 1000, curve.accuracy, line, color=color, label=label)
    share, acc = result["oracle_point"]["strong_share"], result["oracle_point"]["accuracy"]
    axes[0].plot([share], [acc], "o", color="C2", label="per-query oracle")
    target = curves["learned"].weak_accuracy + 0.8 * (
        curves["learned"].strong_accuracy - curves["learned"].weak_accuracy)
    axes[0].axhline(target, color="C3", lw=0.8, alpha=0.6, label="PGR 80%")
    cpt = result["metrics"]["learned"]["cpt_80"]
    axes[0].axvspan(cpt["ci"][0], cpt["ci"][1], color="C0", alpha=0.12,
                    label="learned CPT(80%) 95% CI")
    if "cascade" in result["metrics"]:
        cpt = result["metrics"]["cascade"]["cpt_80"]
        axes[0].axvspan(cpt["ci"][0], cpt["ci"][1], color="C4", alpha=0.12,
                        label="cascade CPT(80%) 95% CI")
    axes[0].set_xlabel(f"share of queries sent to {result['strong']}")
    axes[1].set_xlabel("mean cost per 1,000 queries (USD; cascades include the weak call)")
    for ax in axes:
        ax.set_ylabel("accuracy (GSM8K test split)")
        ax.grid(alpha=0.3)
    # below both panels: inside either one it covered the curves (issue #25)
    handles, labels = axes[0].get_legend_handles_labels()
    rows = -(-len(labels) // 3)
    legend_height = 0.1 + 0.18 * rows  # inches
    fig.set_figheight(fig.get_figheight() + legend_height)
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3, frameon=False)
    fig.suptitle(f"Routing {result['weak']} vs {result['strong']} on GSM8K "
                 f"({result['test']} test queries)")
    fig.tight_layout(rect=(0, legend_height / fig.get_figheight(), 1, 1))
    return fig


def _verdict(diff: Mapping[str, Any], other: str) -> str:
    """How a CPT difference (router minus ``other``, paired) reads, with its interval."""
    low, high = diff["ci"]
    if high < 0:
        word = f"beats {other}"
    elif low > 0:
        word = f"needs more strong calls than {other}"
    else:
        word = f"does not clearly beat {other}"
    return f"{word} (paired difference {_fmt(diff)})"


def _cascade_lines(gsm: Mapping[str, Any]) -> list[str]:
    """The Markdown paragraphs on the cascade router."""
    m, c, cost = gsm["metrics"], gsm["cascade"], gsm["cost_at_cpt_80"]
    cpt = m["cascade"]["cpt_80"]
    learned = m["learned"]["cpt_80"]
    router = c["router"]
    diff_r, diff_l = m["cascade"]["minus_random"], c["minus_learned"]
    return [
        "",
        f"Cascade (TraceRouting-v0's `cascade=True`): `{gsm['weak']}` answers every query "
        "first, and the router reads that answer before escalating to "
        f"`{gsm['strong']}`. Its logistic regression (l2={router['l2']:g}, hashed weight="
        f"{router['hashed_weight']:g}"
        f"{', chosen by 5-fold CV AIQ on train' if 'cv_aiq' in router else ''}) reads "
        f"the prompt's {len(STATISTICS)} statistics, {len(ANSWER_STATISTICS)} statistics of "
        f"the weak answer ({', '.join(f'`{n}`' for n in ANSWER_STATISTICS)}) and "
        f"{c['n_features']} + {c['n_features']} hashed n-grams of the answer and of the "
        "prompt; never the strong model's answer or a correctness label. The no-training "
        "cascade escalates exactly the answers without a `#### n` final answer (ties "
        "between the rest are split at random). Both cascade rows' costs include the weak "
        f"call paid on every query (${1000 * c['weak_cost_per_query']:.4f} per 1k queries "
        "on the test split). Cascade minus random, paired: APGR "
        f"{_fmt(diff_r['apgr'])}, CPT(50%) {_fmt(diff_r['cpt_50'])}, CPT(80%) "
        f"{_fmt(diff_r['cpt_80'])}; cascade minus learned, paired: APGR "
        f"{_fmt(diff_l['apgr'])}, CPT(50%) {_fmt(diff_l['cpt_50'])}, CPT(80%) "
        f"{_fmt(diff_l['cpt_80'])}.",
        "",
        f"**Cascade CPT(80%)**: the cascade router escalates {cpt['value']:.1%} of queries "
        f"(95% CI {cpt['ci'][0]:.1%}-{cpt['ci'][1]:.1%}) to reach 80% of the gap, where the "
        f"non-cascade learned router needs {learned['value']:.1%} "
        f"({learned['ci'][0]:.1%}-{learned['ci'][1]:.1%}) and random routing 80.0%: it "
        f"{_verdict(diff_l['cpt_80'], 'the learned router')} and "
        f"{_verdict(diff_r['cpt_80'], 'random routing')}. At that point it costs "
        f"${1000 * cost['cascade']:.2f} per 1k queries, the always-paid weak calls "
        f"included, against ${1000 * cost['learned']:.2f} for the learned router, "
        f"${1000 * cost['random']:.2f} for random routing and "
        f"${1000 * cost['oracle']:.2f} for the per-query oracle at theirs.",
    ]


def markdown(gsm: Mapping[str, Any], mmlu: Sequence[Mapping[str, Any]],
             robustness: Sequence[Mapping[str, float]], env_rows: Mapping[str, Any] | None,
             scale: str, n_resamples: int, seconds: float,
             env_cascade: Mapping[str, Any] | None = None,
             heldout: Mapping[str, Any] | None = None, load: float | None = None) -> str:
    """The report page: GSM8K's routers, the cascade, other splits, MMLU, the env, caveats.

    The held-out section (``heldout``) is :func:`experiments.traces.heldout.markdown`'s;
    ``load`` (the machine's 1-minute load average at the end) qualifies ``seconds``.
    """
    table = default_price_table()
    m = gsm["metrics"]
    lines = [
        "# TraceRouting: learned routing on real RouteLLM outcomes",
        "",
        f"Generated by `experiments.traces.runner.report(scale={scale!r})` in {seconds:.1f} s"
        + ("" if load is None else f" (load average {load:.1f} on {os.cpu_count()} cores)")
        + ". Data: "
        "RouteLLM's evaluation CSVs (lm-sys/RouteLLM, Apache-2.0), read from outside the "
        "repository. Weak model "
        f"`{gsm['weak']}`, strong model `{gsm['strong']}`.",
        "",
        f"GSM8K: {gsm['queries']} questions split by prompt (seed 0; every GSM8K prompt is "
        f"distinct, so this is the split by query) into {gsm['train']} "
        f"train and {gsm['test']} test. The router (logistic regression on text statistics "
        "and hashed n-grams, "
        f"l2={gsm['router']['l2']:g}, hashed weight={gsm['router']['hashed_weight']:g}"
        f"{', chosen by 5-fold CV AIQ on train' if 'cv_aiq' in gsm['router'] else ''}) "
        "predicts that the weak model fails; it never sees test outcomes. Intervals are 95% "
        f"percentile bootstraps over the test queries ({n_resamples} resamples), all "
        "routers on the same resamples.",
        "",
        "| Router | APGR | CPT(50%) | CPT(80%) | cost / 1k queries at CPT(80%) | AIQ | "
        "AIQ - random (paired) |",
        "|---|---|---|---|---|---|---|",
    ]
    labels = (("learned", "learned"), ("length", "longest prompts first (no training)"),
              ("priced", "priced: predicted accuracy gained per expected extra dollar"),
              ("cascade", "cascade: weak model first, learned on its answer"),
              ("no_final", "cascade: escalate answers without `#### n` (no training)"),
              ("random", "random (expected)"), ("oracle", "per-query oracle"))
    for name, label in labels:
        if name not in m:
            continue
        minus = m[name].get("minus_random", {}).get("aiq")
        lines.append(f"| {label} | {_fmt(m[name]['apgr'])} | {_fmt(m[name]['cpt_50'])} | "
                     f"{_fmt(m[name]['cpt_80'])} | "
                     f"${1000 * gsm['cost_at_cpt_80'][name]:.4f} | {_fmt(m[name]['aiq'])} | "
                     f"{'' if minus is None else _fmt(minus)} |")
    diff = m["learned"]["minus_random"]
    lines += [
        "",
        "Random routing's values are exact expectations (its expected PGR is its "
        "strong-call share on any resample), so its APGR and CPT intervals are points and "
        "those paired differences reduce to the router's own interval shifted: random "
        "routing at the same share. AIQ reads the same curves on the cost axis (accuracy "
        "against cost per query, the area under the non-decreasing hull over the two "
        "models' cost range, normalised): random routing at the same cost is the straight "
        "line between the two models, whose AIQ is resampled with the router's; the "
        "cascade rows pay the weak call on every query. Learned minus "
        f"random, paired: APGR {_fmt(diff['apgr'])}, CPT(50%) {_fmt(diff['cpt_50'])}, "
        f"CPT(80%) {_fmt(diff['cpt_80'])}, AIQ {_fmt(diff['aiq'])}.",
        "",
        f"**CPT(80%)**: the learned router needs {m['learned']['cpt_80']['value']:.1%} strong "
        f"calls (95% CI {m['learned']['cpt_80']['ci'][0]:.1%}-"
        f"{m['learned']['cpt_80']['ci'][1]:.1%}) where random routing needs 80.0%; the "
        f"oracle needs {m['oracle']['cpt_80']['value']:.1%}.",
        *(_cascade_lines(gsm) if "cascade" in gsm else []),
        "",
        "| Model | accuracy (all) | accuracy (test) | mean cost per query (test) |",
        "|---|---|---|---|",
    ]
    for model in (gsm["weak"], gsm["strong"]):
        lines.append(f"| `{model}` | {gsm['accuracy_all'][model]:.3f} | "
                     f"{gsm['accuracy_test'][model]:.3f} | "
                     f"${gsm['cost_per_query_test'][model]:.6f} |")
    op = gsm["oracle_point"]
    lines += [
        "",
        f"Per-query oracle: {op['strong_share']:.1%} strong calls, accuracy "
        f"{op['accuracy']:.3f}.",
        "",
        f"Tokens: {gsm['token_counter']} (input = the prompt, output = the logged "
        "response; both models counted with the same counter). The report pins this "
        "documented approximation (`token_counter=\"approx\"`) whether or not tiktoken "
        "is installed, so its costs do not depend on the environment. Prices: " + "; ".join(
            f"`{name}` ${table[name].input:g}/${table[name].output:g} per M tokens "
            f"({table[name].source}, {table[name].date})" for name in (gsm["weak"],
                                                                       gsm["strong"])) + ".",
    ]
    if robustness:
        cascade = "cascade_cpt_80" in robustness[0]
        lines += ["", "Other splits (test halves of split seeds), point values of the "
                  "learned" + (" and cascade routers" if cascade else " router") + " (each "
                  "with its default hyperparameters, fitted on that split's train half):", "",
                  "| split seed | learned APGR | learned CPT(50%) | learned CPT(80%) |"
                  + (" cascade APGR | cascade CPT(50%) | cascade CPT(80%) |" if cascade else ""),
                  "|---|---|---|---|" + ("---|---|---|" if cascade else "")]
        for row in robustness:
            line = (f"| {row['split_seed']} | {row['apgr']:.3f} | {row['cpt_50']:.3f} | "
                    f"{row['cpt_80']:.3f} |")
            if cascade:
                line += (f" {row['cascade_apgr']:.3f} | {row['cascade_cpt_50']:.3f} | "
                         f"{row['cascade_cpt_80']:.3f} |")
            lines.append(line)
    if mmlu:
        lines += ["", "## MMLU subjects (no responses: 1 output token per answer)", "",
                  "| Subject | test queries | acc weak / strong (test) | learned APGR | "
                  "learned CPT(80%) | oracle CPT(80%) | resamples without a gap |",
                  "|---|---|---|---|---|---|---|"]
        for r in mmlu:
            acc = f"{r['accuracy_test'][r['weak']]:.3f} / {r['accuracy_test'][r['strong']]:.3f}"
            name = Path(r["source"]).stem.removeprefix("mmlu_")
            if not r["pgr_defined"]:
                lines.append(f"| {name} | {r['test']} | {acc} | n/a | n/a | n/a | - |")
                continue
            mm = r["metrics"]
            lines.append(f"| {name} | {r['test']} | {acc} | {_fmt(mm['learned']['apgr'])} | "
                         f"{_fmt(mm['learned']['cpt_80'])} | {_fmt(mm['oracle']['cpt_80'])} | "
                         f"{mm['learned']['undefined_resamples']} / {r['n_resamples']} |")
        sizes = [r["test"] for r in mmlu]
        repeats = [f"{Path(r['source']).stem.removeprefix('mmlu_')} has "
                   f"{r['queries']} rows but {r['distinct_prompts']} distinct questions"
                   for r in mmlu if r["distinct_prompts"] < r["queries"]]
        lines += ["", "n/a: on that subject's test split the strong model is not more "
                  "accurate than the weak one (in RouteLLM's data GPT-4 scores 3% on high "
                  "school mathematics), so PGR is undefined. The subjects have "
                  f"{min(sizes)}-{max(sizes)} test "
                  "queries: their intervals are wide, and PGR explodes on resamples where "
                  "the gap between the models is small (resamples with no gap are left "
                  "out of the intervals). Each subject is split by prompt (seed 0), so a "
                  "question the file repeats is never in both halves"
                  + (f" ({'; '.join(repeats)})" if repeats else "") + "."]
    if env_rows:
        lines += ["", "## TraceRouting-v0 on the GSM8K test split", "",
                  "Every test query once (seed 0), baselines of `agents.baselines` and the "
                  "learned router acting on the env's own observations (64 hashed features "
                  "and the prompt length; threshold: the training split's median score). "
                  "`random` is the env-generic baseline (each model called with probability "
                  "1/2, independently: a quarter of the queries call nobody); "
                  "`random-router` is the routing literature's random router (exactly one "
                  "model per query, uniformly).", "",
                  "| Method | success | mean cost per query | CPS |", "|---|---|---|---|"]
        for name, row in env_rows.items():
            lines.append(f"| {name} | "
                         f"{value_interval(row['success_rate'], *row['success_rate_ci'])} | "
                         f"${row['avg_cost']:.6f} | ${row['cps']:.6f} |")
    if env_cascade and "cascade" in m:
        env_cpt = env_cascade["cpt_80"]
        gap = (env_cpt - m["cascade"]["cpt_80"]["value"]) / max(
            m["learned"]["cpt_80"]["value"] - m["cascade"]["cpt_80"]["value"], 1e-9)
        closer = ("closer to the prompt-only router than to the cascade router, so acting "
                  "in the env would need it to expose richer answer features" if gap > 0.5
                  else "close to the cascade router's")
        lines += [
            "",
            "The cascade router is not run as a policy in `TraceRouting-v0(cascade=True)`: "
            "the env's second-step observation reveals only 16 hashed n-grams of the first "
            "answer, its length and whether it has a final-answer marker, not the answer "
            "statistics the router reads (a non-integer final number, arithmetic slips in "
            "its annotations, hedges, ...). A logistic regression on what the env does "
            f"reveal ({', '.join(f'`{k}`' for k in env_cascade['columns'])}; "
            f"{env_cascade['inputs']} inputs), fitted on the train split's second-step "
            f"observations, reaches APGR {env_cascade['apgr']:.3f} and CPT(80%) "
            f"{env_cpt:.3f} on the test split (point values; the cascade router: "
            f"{m['cascade']['apgr']['value']:.3f} and {m['cascade']['cpt_80']['value']:.3f}, "
            f"the prompt-only learned router: {m['learned']['apgr']['value']:.3f} and "
            f"{m['learned']['cpt_80']['value']:.3f}): {closer}.",
        ]
    if heldout:
        lines += _heldout_lines(heldout)
    lines += [
        "",
        "## Caveats",
        "",
        "- One dataset, one pair of models, ~660 test queries: the intervals, not the points, "
        "are the result.",
        "- Token counts are approximate (ceil(characters / 4), pinned), and both models "
        "are counted with one counter; costs scale with them, strong-call shares do not.",
        "- GSM8K difficulty is only weakly visible in the question text: sending the "
        "longest prompts to the strong model, with no training at all, does about as well "
        "as the learned router, whose words add little to its length statistics.",
        "- The cascade's answer statistics are partly GSM8K-specific (the `#### n` format, "
        "whole-number answers, `<<a*b=c>>` annotations) and would need redesigning for "
        "another task. An answer's correctness is a property of its text, so the weak "
        "answer is bound to say more about it than the prompt does: that is what a "
        "cascade buys with its always-paid weak call.",
        "- The cascade's cost counts tokens only: an escalated query also waits for two "
        "calls (latency is not modelled), and the strong model is billed for the prompt "
        "alone, as in the non-cascade routers.",
        "",
        "![frontier](trace_routing.png)",
        "",
    ]
    return "\n".join(lines)


#: Titles of the held-out sections, in the page's order.
HELDOUT_TITLES = {"gsm8k": "GSM8K, held-out queries",
                  "mmlu": "MMLU, held-out subjects (only 4 subjects: 4 groups)",
                  "routerarena": "RouterArena, held-out domains"}

#: Row titles of the K-model block.
K_MODEL_TITLES = {"gsm8k": "GSM8K queries", "mmlu": "MMLU subjects",
                  "routerarena": "RouterArena domains"}


def _heldout_lines(heldout: Mapping[str, Any]) -> list[str]:
    """The held-out section: one table per dataset, or why it was skipped."""
    lines = ["", "## Calibrated routers on held-out queries and groups", "",
             "Every router fitted on training data only, its threshold calibrated on the "
             "training scores for a 50% strong-call share, scored on queries (or whole "
             "groups) it never saw. With group splits every held-out query is pooled out of "
             "fold, and the intervals resample whole groups: with MMLU's 4 subjects that "
             "is only 4 units, so those intervals are crude and wide.", "",
             "Every router is compared with random routing twice, both references exact "
             "expectations (no draws) matched to the router **within each bootstrap "
             "resample**: *at the same share*, random routing sends the router's own "
             "strong-call share of that resample to the strong model (the share difference "
             "is 0 on every resample; a reference fixed at the whole test set's share left "
             "a share difference of about +-0.04 on GSM8K, +-0.12 on RouterArena's domains "
             "and -0.50 to +0.41 on MMLU's 4 subjects); *at "
             "the same cost*, random routing on the single models' frontier spends the "
             "router's own cost per query of that resample: between the two models at the "
             "cost-matched share, or the cheaper model alone on resamples where the dearer "
             "one is not more accurate (it then costs less than the router, and is still "
             "the best a router that knows nothing can do). A cascade's cost includes the "
             "weak call it always pays; its references pay plain calls. The K-model block "
             "below uses the same two reference points. AIQ - random: the threshold "
             "curve's AIQ minus that of the straight line between the two models, on the "
             "same cost range, paired; for a threshold router paying plain calls it is never "
             "below 0 (its hull never falls below that line), so it cannot show a router "
             "losing on cost. The "
             "tables lead instead with accuracy minus random at the same cost, which can, "
             "then accuracy minus the best training-free rule at the same cost; AIQ - best "
             "rule (paired) stands beside AIQ - random."]
    for name, title in HELDOUT_TITLES.items():
        result = heldout.get(name)
        if result is None:
            continue
        if "skipped" in result:
            lines += ["", f"### {title}", "", f"Skipped: {result['skipped']}."]
        else:
            lines += heldout_markdown(title, result)
    k_model = {title: heldout[name].get("k_model", heldout[name])
               for name, title in K_MODEL_TITLES.items() if name in heldout
               and ("k_model" in heldout[name] or "skipped" in heldout[name])}
    if any("skipped" not in r for r in k_model.values()):
        lines += multi_markdown(k_model)
    return lines


def portable_sources(value: Any, data_root: Path) -> Any:
    """``value`` with every ``source`` path written relative to ``data_root``.

    The data lives outside the repository, at a different absolute path on every machine
    (CI clones elsewhere), so a committed JSON names its files as ``routellm/...``.
    """
    if isinstance(value, Mapping):
        return {k: (_relative(v, data_root) if k == "source" and isinstance(v, str)
                    else portable_sources(v, data_root)) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_sources(v, data_root) for v in value]
    return value


def _relative(source: str, data_root: Path) -> str:
    """``source`` (one path, or several joined by ``" + "``) with ``data_root/`` dropped."""
    for root in {str(data_root), str(data_root.resolve())}:
        source = source.replace(f"{root}{os.sep}", "")
    return source


def json_ready(value: Any) -> Any:
    """``value`` as JSON values: private (``_``) keys dropped, NaN and infinities as None."""
    if isinstance(value, Mapping):
        return {k: json_ready(v) for k, v in value.items() if not str(k).startswith("_")}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, np.generic):
        return json_ready(value.item())
    return value


