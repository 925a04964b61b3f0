"""The decision benchmark: does gymflow recommend the right next action when the cause is known?

Each scenario breaks exactly one factor of a run on purpose (the prompt asks for another answer
form than the verifier reads, a verifier parameter rejects right answers, an output-token limit
cuts answers, a server ignores the offered tools, nothing broken but an uncapable model, a system
prompt withheld), so the right action is known. The script runs each, reads the store with
`gymflow.analysis.run.analyse` (what `gym eval diagnose` and the report show) and prints the
expected and the recommended action side by side. It exits 1 when any scenario is wrong.

Scenarios are data, of two kinds:
- simulated: entries of bench/decide_scenarios.yaml (or `--scenarios FILE`): a benchmark written to
  a temporary folder, the eval config fields that break the factor (mostly the simulated policy's
  `model.simulate` behaviours), run in this process against the local policy server;
- recorded: any folder under `--recorded` (default tests/fixtures/real_model/) holding a
  `scenario.yaml` (`name`, `broken`, `expected`, and `store`, relative to the folder, default
  `.`: the run directory, its `gymflow.duckdb`, or that file gzipped). Its store is read as
  recorded: a real model's run kept as a fixture.

    python bench/decide.py [--tiny] [--json] [--only NAME ...] [--scenarios FILE]
                           [--recorded DIR ...] [--keep DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
SCENARIOS = BENCH_DIR / "decide_scenarios.yaml"
RECORDED = ROOT / "tests" / "fixtures" / "real_model"


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    broken: str
    expected: str
    source: str  # "simulated" or "recorded"
    #: simulated: the benchmark definition, dataset files and config fields
    benchmark: dict[str, Any] | None = None
    files: dict[str, list[dict[str, Any]]] | None = None
    config: dict[str, Any] | None = None
    #: recorded: the run directory holding the store
    store: Path | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    source: str
    broken: str
    expected: str
    recommended: str | None
    runner_up: str | None
    right: bool
    why: str
    seconds: float


def simulated(path: Path, *, tiny: bool) -> list[Scenario]:
    entries = yaml.safe_load(path.read_text()) or []
    scenarios = []
    for entry in entries:
        benchmark = {**entry["benchmark"], **(entry.get("tiny") or {} if tiny else {})}
        scenarios.append(
            Scenario(
                name=entry["name"],
                broken=entry["broken"],
                expected=entry["expected"],
                source="simulated",
                benchmark=benchmark,
                files=entry.get("files"),
                config=entry.get("config") or {},
            )
        )
    return scenarios


def recorded(root: Path) -> list[Scenario]:
    scenarios = []
    for spec_file in sorted(root.glob("**/scenario.yaml")):
        spec = yaml.safe_load(spec_file.read_text())
        scenarios.append(
            Scenario(
                name=spec["name"],
                broken=spec["broken"],
                expected=spec["expected"],
                source="recorded",
                store=(spec_file.parent / spec.get("store", ".")).resolve(),
            )
        )
    return scenarios


def _merged(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged


def write_benchmarks(scenarios: list[Scenario], envs: Path) -> None:
    """Each simulated scenario's benchmark (named after it) and dataset files under `envs`."""
    folder = envs / "benchmarks"
    folder.mkdir(parents=True, exist_ok=True)
    for scenario in scenarios:
        if scenario.source != "simulated":
            continue
        definition = {
            "name": f"decide-{scenario.name}",
            "description": f"bench/decide.py: {scenario.broken}",
            **scenario.benchmark,
        }
        (folder / f"decide-{scenario.name}.yaml").write_text(yaml.safe_dump(definition))
        for file_name, rows in (scenario.files or {}).items():
            (folder / file_name).write_text("".join(json.dumps(row) + "\n" for row in rows))


def run_simulated(scenario: Scenario, out: Path):
    """Collect the scenario's rollouts on the local policy server, in this process, as a
    `gym eval run` batch does; returns the run directory."""
    from gymflow.core.config import EvalConfig
    from gymflow.rollouts.collect import run_collect
    from gymflow.rollouts.plan import resolve
    from gymflow.rollouts.registration import register_run
    from gymflow.simulated.endpoint import local_policy_server
    from gymflow.store.db import connect

    fields = _merged(
        {"benchmark": f"decide-{scenario.name}", "out": str(out), "concurrency": 16},
        scenario.config or {},
    )
    plan = resolve(EvalConfig.model_validate(fields))
    con = connect(plan.run_dir, create=True)
    try:
        register_run(con, plan, resume=False)
        with local_policy_server(plan) as server:
            run_collect(plan, plan.keys(), con, base_url=server.base_url)
    finally:
        con.close()
    return plan.run_dir


def judge(scenario: Scenario, run_dir: Path, seconds: float) -> Outcome:
    from gymflow.analysis.run import analyse
    from gymflow.store.db import connect

    con = connect(run_dir, read_only=True)
    try:
        decision = analyse(con).decision
    finally:
        con.close()
    runner_up = decision.runner_up.action if decision.runner_up else None
    return Outcome(
        name=scenario.name,
        source=scenario.source,
        broken=scenario.broken,
        expected=scenario.expected,
        recommended=decision.action,
        runner_up=runner_up,
        right=decision.action == scenario.expected,
        why=decision.why,
        seconds=seconds,
    )


def unpacked(store: Path, run_dir: Path) -> Path:
    """A copy of a recorded store as a run directory (reading may migrate an older store; the
    fixture stays as recorded): `store` is a run directory, its `.duckdb` file, or that file
    gzipped (`gymflow.duckdb.gz`, as recorded fixtures are kept)."""
    if store.is_dir():
        shutil.copytree(store, run_dir)
        return run_dir
    run_dir.mkdir(parents=True)
    target = run_dir / "gymflow.duckdb"
    if store.suffix == ".gz":
        with gzip.open(store, "rb") as packed, target.open("wb") as out:
            shutil.copyfileobj(packed, out)
    else:
        shutil.copyfile(store, target)
    return run_dir


def run(scenarios: list[Scenario], work: Path) -> list[Outcome]:
    outcomes = []
    for scenario in scenarios:
        started = time.perf_counter()
        if scenario.source == "simulated":
            run_dir = run_simulated(scenario, work / scenario.name)
        else:
            run_dir = unpacked(scenario.store, work / scenario.name)
        outcomes.append(judge(scenario, run_dir, time.perf_counter() - started))
    return outcomes


def table(outcomes: list[Outcome]) -> str:
    headers = ("scenario", "source", "expected", "recommended", "runner-up", "right")
    rows = [
        (o.name, o.source, o.expected, o.recommended or "-", o.runner_up or "-",
         "right" if o.right else "WRONG")
        for o in outcomes
    ]  # fmt: skip
    widths = [max(len(str(r[i])) for r in (headers, *rows)) for i in range(len(headers))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    right = sum(o.right for o in outcomes)
    lines.append(f"{right} of {len(outcomes)} scenarios right")
    for outcome in outcomes:
        if not outcome.right:
            lines.append(f"- {outcome.name} ({outcome.broken}): {outcome.why}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="fewer tasks and repeats (the test)")
    parser.add_argument("--json", action="store_true", help="one JSON object per scenario")
    parser.add_argument("--only", nargs="*", help="run only these scenarios")
    parser.add_argument("--scenarios", type=Path, default=SCENARIOS)
    parser.add_argument("--recorded", type=Path, nargs="*", default=[RECORDED])
    parser.add_argument("--keep", type=Path, help="keep the scenarios' run directories here")
    args = parser.parse_args(argv)

    scenarios = simulated(args.scenarios, tiny=args.tiny)
    for folder in args.recorded:
        if folder.is_dir():
            scenarios += recorded(folder)
    if args.only:
        scenarios = [s for s in scenarios if s.name in args.only]
    with tempfile.TemporaryDirectory(prefix="gymflow-decide-") as tmp:
        work = Path(tmp)
        write_benchmarks(scenarios, work / "envs")
        # before gymflow's registry first looks, and ahead of folders the caller named
        extra = os.environ.get("GYMFLOW_ENVIRONMENTS_PATH")
        os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = os.pathsep.join(
            [str(work / "envs"), *([extra] if extra else [])]
        )
        outcomes = run(scenarios, work / "runs")
        if args.keep:
            shutil.copytree(work / "runs", args.keep, dirs_exist_ok=True)
    if args.json:
        for outcome in outcomes:
            print(json.dumps(asdict(outcome)))
    else:
        print(table(outcomes))
    return 0 if all(o.right for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
