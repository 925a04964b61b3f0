"""Peer: Inspect AI on the same workload as gymflow, samples/s, and gymflow ÷ Inspect.

The workload is bench/e2e_rollouts.py's: gymflow's `arithmetic` tasks (prompt and integer answer),
repeated, at zero model latency. Inspect runs them as a Task with `generate()` and `match()`
scoring against its `mockllm/model`, answering each prompt with the same text gymflow's simulated
policy gives for a correct answer; epochs play gymflow's repeats, 64 samples in flight. Inspect
runs in its own virtual environment: GYMFLOW_INSPECT_VENV's (.ci/run makes it beside the other
venvs), else one this script creates on first use (python -m venv; pip install inspect-ai) under
~/.cache/gymflow-bench; the script re-invokes itself there with
--runner, so this file imports gymflow only in the parent. Offline, mockllm's tiktoken download
fails, so the runner gives mockllm a len/4 token estimate: the one change made to Inspect.

    python bench/inspect_peer.py [--rollouts 20000] [--skip-gymflow]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import tiny

VENV = Path(
    os.environ.get("GYMFLOW_INSPECT_VENV")
    or Path.home() / ".cache" / "gymflow-bench" / "inspect-venv"
)
CONCURRENCY = 64


def venv_python() -> Path:
    """The Inspect venv's interpreter, creating the venv and installing inspect-ai if needed."""
    python = VENV / "bin" / "python"
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    # looked up, not imported: importing inspect_ai costs 2 CPU seconds, which the runner pays
    probe = subprocess.run(
        [
            python,
            "-c",
            "import importlib.util, sys; sys.exit(not importlib.util.find_spec('inspect_ai'))",
        ],
        capture_output=True,
    )
    if probe.returncode != 0:
        subprocess.run([python, "-m", "pip", "install", "-q", "inspect-ai"], check=True)
    return python


def write_workload(path: Path, rollouts: int) -> tuple[int, int]:
    """gymflow's arithmetic prompts, answers and reference texts as JSONL; (tasks, repeats)."""
    from gymflow.core.prompts import render_prompt
    from gymflow.environments.registry import load_environment

    env = load_environment("arithmetic")
    tasks = env.tasks("full")[: min(rollouts, 2000)]
    repeats = max(1, round(rollouts / len(tasks)))
    with path.open("w") as out:
        for task in tasks:
            row = {
                "id": task.task_id,
                "input": render_prompt(env.manifest.prompt_template, task.inputs),
                "target": str(task.data["answer"]),
                "answer": task.reference,
            }
            out.write(json.dumps(row) + "\n")
    return len(tasks), repeats


def run_inspect(python: Path, workload: Path, repeats: int, log_dir: Path) -> dict:
    command = [python, __file__, "--runner", str(workload), str(repeats), str(log_dir)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"inspect runner failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def runner(workload: Path, repeats: int, log_dir: Path) -> None:
    """Inside the Inspect venv: run the eval, print one JSON line of figures."""
    from inspect_ai import Task, __version__, eval
    from inspect_ai.dataset import MemoryDataset, Sample
    from inspect_ai.model import ModelOutput, get_model
    from inspect_ai.model._providers.mockllm import MockLLM
    from inspect_ai.scorer import match
    from inspect_ai.solver import generate

    async def estimate(self, text: str) -> int:
        return max(1, len(text) // 4)

    # mockllm counts tokens with tiktoken's o200k_base, which it downloads on first use; offline
    # that fails every sample. The one change made to Inspect: gymflow's own estimate (len / 4).
    MockLLM.count_text_tokens = estimate

    rows = [json.loads(line) for line in workload.read_text().splitlines()]
    answers = {row["input"]: row["answer"] for row in rows}

    def answer(messages, tools, tool_choice, config) -> ModelOutput:
        return ModelOutput.from_content("mockllm/model", answers[messages[-1].text])

    dataset = MemoryDataset(
        [Sample(input=row["input"], target=row["target"], id=row["id"]) for row in rows]
    )
    task = Task(dataset=dataset, solver=generate(), scorer=match(numeric=True), epochs=repeats)
    model = get_model("mockllm/model", custom_outputs=answer)
    started = time.perf_counter()
    [log] = eval(
        task,
        model=model,
        log_dir=str(log_dir),
        max_connections=CONCURRENCY,
        max_samples=CONCURRENCY,
        display="none",
    )
    seconds = time.perf_counter() - started
    log_bytes = sum(p.stat().st_size for p in log_dir.rglob("*") if p.is_file())
    accuracy = log.results.scores[0].metrics["accuracy"].value if log.results else None
    print(
        json.dumps(
            {
                "status": log.status,
                "samples": len(rows) * repeats,
                "seconds": seconds,
                "log_bytes": log_bytes,
                "accuracy": accuracy,
                "error": log.error.message if log.error else None,
                "version": __version__,
            }
        )
    )


def measure(rollouts: int) -> tuple[dict, int, int, str]:
    """Inspect's figures on the workload; also (tasks, repeats, inspect version)."""
    python = venv_python()
    with tempfile.TemporaryDirectory(prefix="gymflow-inspect-") as tmp:
        workload = Path(tmp) / "workload.jsonl"
        tasks, repeats = write_workload(workload, rollouts)
        figures = run_inspect(python, workload, repeats, Path(tmp) / "logs")
    return figures, tasks, repeats, figures["version"]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--runner":
        runner(Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--skip-gymflow", action="store_true", help="Inspect's figure only")
    args = tiny.parse(parser, rollouts=100)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ceiling
    import e2e_rollouts

    inspect, tasks, repeats, version = measure(args.rollouts)
    if inspect["status"] != "success":
        raise SystemExit(f"inspect eval ended {inspect['status']}: {inspect['error']}")
    rows = [
        ["Inspect AI " + version + " (mockllm, match)", f"{inspect['samples']:,}",
         f"{inspect['seconds']:.2f}", f"{inspect['samples'] / inspect['seconds']:,.0f}", "1.00"]
    ]  # fmt: skip
    if not args.skip_gymflow:
        with tempfile.TemporaryDirectory(prefix="gymflow-bench-") as tmp:
            os.environ["GYMFLOW_ENVIRONMENTS_PATH"] = str(Path(tmp) / "envs")
            e2e_rollouts.write_benchmark(Path(tmp) / "envs", "arithmetic", "full", args.rollouts)
            ours = e2e_rollouts.run_collector(Path(tmp) / "run", CONCURRENCY, None)
        ratio = ours.rollouts_per_s / (inspect["samples"] / inspect["seconds"])
        rows.append(
            ["gymflow collector (same workload)", f"{ours.rollouts:,}", f"{ours.seconds:.2f}",
             f"{ours.rollouts_per_s:,.0f}", f"{ratio:.2f}"]
        )  # fmt: skip
    print(
        f"peer: arithmetic, {tasks} tasks x {repeats} repeats, {CONCURRENCY} in flight, zero "
        f"model latency, {os.cpu_count()} cores (shared machine: noisy); Inspect accuracy "
        f"{inspect['accuracy']}"
    )
    ceiling.print_table(["system", "samples", "seconds", "samples/s", "÷ Inspect"], rows)


if __name__ == "__main__":
    main()
