"""The committed results are what the code produces: one cheap cell of each experiment, rerun.

Issue #36: the committed CORL tables stopped reproducing (on one machine after the
learners' training paths changed, on another with the very code that wrote them: the CPU's
floats) and nothing checked them. Here one cheap unit
of each experiment of ``make reproduce`` is run again at its committed scale and compared
with the committed JSON bit for bit, as that JSON keeps it (per-episode scores to four
decimals, ``experiments.shared.gaps.encode_scores``; a rule search's rows as written): a change
that moves a committed number fails here until the tables are regenerated. Every learner
family's training path is covered: PPO, supervised LoRA and LoRA-guided PPO (lora_ppo),
CORL's shared PPO and per-tier adapters (corl), the SFT warm start and BoPO's MaskablePPO
(bopo); then the rule search (rules) and the routers on RouteLLM's logs (traces).

Each cell runs in a fresh interpreter that imports :mod:`experiments` first, so torch
starts with the fixed paths the committed files were made with (torch's scalar kernels and
MKL's one SSE2 branch, both read once, at torch's import; this test process may have
imported torch already). A file that does not say it was made with them, or a machine that
is not x86, skips with the reason.

Each cell is rerun on the task set its file was scored on (the report's ``tasks`` tag, read
with :func:`experiments.shared.task_sets.scored_on`: the validation set for an untagged
file), so a file regenerated with ``--tasks test`` is checked on the test tasks.

CORL's cell is the one whose floats part between CPU makers (see its test): on a CPU of
another maker than the file's writer it is compared with a *witness*, the same cell as that
maker's CPU made it from the code that wrote the file, recorded beside the tests with the
file's SHA-256 (``python tests/test_committed_cells.py --record-witness``). A change to the
training path then fails on either maker; once the file is regenerated the witness no
longer matches its hash and that maker skips, saying to record it again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
ROUTELLM = REPO.parent / "shared" / "data" / "routellm"
WITNESSES = REPO / "tests" / "data" / "committed_cells"
CORL_FILE = "corl_tiers_ExpertRouting-v1.json"
#: What ``experiments.shared.common.machine()`` says of torch's scalar kernels and MKL's
#: one path.
FIXED_PATHS = "torch kernels DEFAULT, MKL_CBWR COMPATIBLE"

pytestmark = pytest.mark.slow  # each cell trains a model or searches rules at its scale


def _vendor(machine: str) -> str | None:
    """The CPU's maker named in a machine line (``experiments.shared.common.machine``)."""
    return next((maker for maker in ("Intel", "AMD") if maker in machine), None)


def _committed(name: str) -> dict[str, Any]:
    """A committed JSON file, skipping unless its floats can be made again here."""
    report = json.loads((RESULTS / name).read_text(encoding="utf-8"))
    written_on = report.get("machine")
    if written_on is None:
        pytest.skip(f"{name} does not name the machine it was written on: regenerate it "
                    "with make reproduce")
    if FIXED_PATHS not in written_on:
        pytest.skip(f"{name} was written with torch's or MKL's vectorised paths "
                    f"({written_on}), whose floats differ between CPUs: regenerate it with "
                    "make reproduce")
    if platform.machine() not in ("x86_64", "AMD64") or "x86_64" not in written_on:
        pytest.skip(f"{name} was written on {written_on}; this is {platform.machine()}, "
                    "whose floats may differ")
    return report


def _tasks(report: dict[str, Any]) -> str:
    """The task set a committed report was scored on (its tag; untagged: validation)."""
    from experiments.shared.task_sets import scored_on

    return scored_on(report)


def _witness_path(name: str, maker: str) -> Path:
    return WITNESSES / f"{Path(name).stem}.{maker}.json"


def _sha256(name: str) -> str:
    return hashlib.sha256((RESULTS / name).read_bytes()).hexdigest()


def _expected_corl_cell(report: dict[str, Any]) -> dict[tuple[str, str, str], str]:
    """Seed 0's encoded scores per (profile, tier, method) that this CPU must make.

    The committed file's, on a CPU of its writer's maker; otherwise the witness of this
    maker, if it was recorded for this very file (else skip: nothing here to compare with).
    """
    from experiments.corl import runner as corl
    from experiments.corl.report import task_name
    from experiments.shared.common import cpu_model

    maker = _vendor(cpu_model())
    if maker == _vendor(report["machine"]):
        tasks = report["gap_closed"]["tasks"]
        expected = {}
        for profile in corl.PROFILES_EVALUATED:
            for tier in corl.TIERS:
                entry = tasks[task_name("cost_envs/ExpertRouting-v1", profile, tier)]["methods"]
                expected.update({(profile, tier, method): entry[key]["seed_scores"][0]
                                 for method, key in corl.LEARNED_KEYS.items()
                                 if key in entry})  # v1 has no tuned rows
        return expected
    record = ("record one on this CPU: python tests/test_committed_cells.py "
              "--record-witness")
    if maker is None:
        pytest.skip(f"{CORL_FILE} was written on {report['machine']}; this CPU "
                    f"({cpu_model()}) is of no maker with a witness")
    witness_path = _witness_path(CORL_FILE, maker)
    if not witness_path.is_file():
        pytest.skip(f"{CORL_FILE} was written on another maker's CPU and has no {maker} "
                    f"witness; {record}")
    witness = json.loads(witness_path.read_text(encoding="utf-8"))
    if witness["committed_sha256"] != _sha256(CORL_FILE):
        pytest.skip(f"{witness_path.name} was recorded for an earlier {CORL_FILE}; {record}")
    return {(profile, tier, method): encoded
            for profile, tier, method, encoded in witness["scores"]}


def _corl_cell(report: dict[str, Any]) -> list[list[str]]:
    """Seed 0 of CORL on ExpertRouting-v1, rerun: ``[profile, tier, method, encoded]`` rows."""
    rows: list[list[str]] = _rerun(f"""
        from agents.learners.corl import within_budget
        from experiments.corl import runner as corl
        from experiments.shared.gaps import encode_scores
        report = json.load(open({str(RESULTS / CORL_FILE)!r}))
        learned = corl.learned_runs(report["scale"], 0, "cost_envs/ExpertRouting-v1",
                                    {_tasks(report)!r})
        print(json.dumps([[profile, tier, method, encode_scores(
            within_budget(run, report["budgets"][tier]))]
            for (profile, tier, method), run in learned["runs"].items()]))
    """)
    return rows


def _rerun(code: str) -> Any:
    """Run ``code`` in a fresh interpreter (experiments imported first); its last line, JSON."""
    environ = {**os.environ, "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE",
               "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    script = "import experiments, json\n" + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=environ,
                          capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_lora_ppo_cell_is_the_committed_one() -> None:
    """Seed 0 of FlightPlanner-v0's PPO, supervised LoRA and LoRA-guided PPO rows."""
    from experiments.shared.task_sets import task_seed

    report = _committed("table_FlightPlanner-v0.json")
    assert report["eval_seed"] == task_seed(_tasks(report))  # the set its tag names
    scores = _rerun(f"""
        from experiments.lora_ppo import runner as lora_ppo
        from experiments.shared.gaps import encode_scores
        from experiments.shared.task_sets import task_seed
        scale = lora_ppo.SCALES[{report["scale"]["name"]!r}]
        assert scale.timesteps == {report["scale"]["timesteps"]}  # the committed scale
        print(json.dumps({{key: encode_scores(lora_ppo.run_job(lora_ppo.Job(
            "cost_envs/FlightPlanner-v0", key, 0, scale, task_seed({_tasks(report)!r}))).returns)
            for key in ("ppo", "lora", "lora-ppo")}}))
    """)
    committed = report["gap_closed"]["tasks"]["FlightPlanner-v0"]["methods"]
    for key, encoded in scores.items():
        assert encoded == committed[key]["seed_scores"][0], key


def test_a_corl_seed_is_the_committed_one() -> None:
    """Seed 0 of CORL on ExpertRouting-v1: shared PPO, then one adapter per tier.

    Its floats part between CPU makers: made on an Intel Xeon, the cell came out 0 to 49
    of 400 episodes apart per (profile, tier, method) on an AMD EPYC with the same fixed
    paths. The shared PPO's training curve is the committed one to the last digit for 47
    rollouts (23,552 steps) and then parts: a rare last-bit difference that PPO's sampling
    amplifies, not another code path. The AMD run moved with ``MKL_CBWR`` (AVX2 against
    COMPATIBLE) and with ``ATEN_CPU_CAPABILITY``, not with numpy's BLAS kernel
    (``OPENBLAS_CORETYPE``), numpy's vector extensions or oneDNN's ISA. The other
    experiments' cells come out bit for bit on both. So on another maker's CPU the cell is
    compared with that maker's witness (module docstring).
    """
    report = _committed(CORL_FILE)
    assert report["seeds"][0] == 0
    expected = _expected_corl_cell(report)
    rows = _corl_cell(report)
    for profile, tier, method, encoded in rows:
        assert encoded == expected[(profile, tier, method)], (profile, tier, method)
    assert len(rows) == len(expected)  # every cell


def test_a_bopo_seed_is_the_committed_one() -> None:
    """Seed 0 of BoPO on SciWorld: the SFT warm start, then BoPO at the paper's lambda."""
    report = _committed("bopo.json")
    assert report["seeds"][0] == 0  # the report's base seed
    scores = _rerun(f"""
        from experiments.bopo import runner as bopo
        from experiments.bopo.jobs import profile_budget, run_learning_job, scale_of, warm_start
        from experiments.shared.gaps import encode_scores
        scale = scale_of({report["scale"]["name"]!r})
        budget = profile_budget("sciworld", scale, 0)
        warm = warm_start("sciworld", scale, 0, budget, tasks={_tasks(report)!r})
        [job] = [job for job in bopo.learn_jobs(warm, scale, budget, 0, {_tasks(report)!r})
                 if job.key == "bopo/0.5"]
        print(json.dumps({{"sft": encode_scores(warm.returns),
                          "bopo/0.5": encode_scores(run_learning_job(job).returns)}}))
    """)
    committed = report["gap_closed"]["tasks"]["sciworld"]["methods"]
    for key, encoded in scores.items():
        assert encoded == committed[key]["seed_scores"][0], key


def test_a_rule_search_is_the_committed_one() -> None:
    """The best fixed rule's search on AgenticRouting-v0 (the cheapest env), and its scores."""
    report = _committed("rule_search.json")
    [committed] = [env for env in report["envs"]
                   if env["env_id"] == "cost_envs/AgenticRouting-v0"]
    searched = _rerun(f"""
        from experiments.rules import runner as rules
        scale = rules.SCALES[{report["scale"]["name"]!r}]
        result = rules.search_env("cost_envs/AgenticRouting-v0", scale, {_tasks(report)!r})
        print(json.dumps({{key: value for key, value in result.items() if key != "seconds"}}))
    """)
    assert searched == {key: value for key, value in committed.items() if key != "seconds"}


def test_a_trace_routing_cell_is_the_committed_one() -> None:
    """The routers on RouteLLM's first MMLU subject, at the committed resamples."""
    if not (ROUTELLM / "mmlu").is_dir():
        pytest.skip(f"RouteLLM's data is not at {ROUTELLM} (it lives outside the repository)")
    report = _committed("trace_routing.json")
    [first, *_] = report["mmlu"]
    rerun = _rerun(f"""
        from pathlib import Path
        from experiments.traces import runner as traces
        from experiments.traces.report import json_ready, portable_sources
        path = sorted(Path({str(ROUTELLM / "mmlu")!r}).glob("mmlu_*.csv"))[0]
        data = traces.load_traces(path, token_counter=traces.TOKEN_COUNTER)
        print(json.dumps(portable_sources(json_ready(traces._experiment(
            data, {first["n_resamples"]}, seed=0, cv=False, keep_curves=False)),
            Path({str(ROUTELLM.parent)!r}))))
    """)
    assert rerun == first


def record_witness() -> Path:
    """Rerun CORL's cell on this CPU and save it as this maker's witness of the committed file.

    Only from the code that wrote the committed file (it is checked against it on the
    writer's maker): the witness stands in for the file on this maker's CPUs.
    """
    from experiments.shared.common import cpu_model, machine

    maker = _vendor(cpu_model())
    if maker is None:
        raise SystemExit(f"record_witness: this CPU ({cpu_model()}) is of no known maker "
                         "(expected Intel or AMD)")
    report = json.loads((RESULTS / CORL_FILE).read_text(encoding="utf-8"))
    if maker == _vendor(report["machine"]):
        raise SystemExit(f"record_witness: {CORL_FILE} was written on this maker's CPU "
                         f"({report['machine']}); the cell is checked against it directly")
    witness = {"committed": CORL_FILE, "committed_sha256": _sha256(CORL_FILE),
               "machine": machine(), "scores": _corl_cell(report)}
    path = _witness_path(CORL_FILE, maker)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps(witness, indent=1) + "\n", encoding="utf-8")
    temporary.replace(path)
    return path


if __name__ == "__main__":
    if sys.argv[1:] != ["--record-witness"]:
        raise SystemExit("usage: python tests/test_committed_cells.py --record-witness")
    sys.path.insert(0, str(REPO))
    print(f"wrote {record_witness()}")
