"""Agents x shipped workspace tasks: `gym eval run` of each agent recipe on workspace-basics, with
seconds per rollout, the outcome, and the model calls the agent's own log counts beside the
calls the recording proxy recorded.

    python bench/agent_table.py --model scripted                # gym serve model --workspace-tasks
    python bench/agent_table.py --model URL --name MODEL        # e.g. llama.cpp's server (SmolLM2)
    python bench/agent_table.py --agents oracle,nothing --limit 5

The bound printed beside each agent is the oracle's seconds per rollout measured in the same run
(the sandbox and the test script alone), when `oracle` is among the agents."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import duckdb
import tiny

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "src" / "gymflow" / "builtin" / "workspace"
GYM = str(Path(sys.executable).parent / "gym")


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _scripted_model(folder: Path) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    log = (folder / "scripted.log").open("w")
    command = [GYM, "serve", "model", "--workspace-tasks", str(SHIPPED), "--port", str(port)]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.1)
    server.terminate()
    raise SystemExit("the scripted model did not start")


def _run(agent: str, args: argparse.Namespace, base_url: str, folder: Path) -> Path:
    model = {"kind": args.kind, "base_url": base_url, "name": args.name, "max_retries": 0,
             "timeout_s": 600}  # fmt: skip
    if args.tool_choice:
        model["tool_choice"] = args.tool_choice
    config = {
        "benchmark": "workspace-basics",
        "repeats": 1,
        "harness": {"name": "command", "agent": agent, "max_turns": args.max_turns},
        "model": model,
        "sampling": {"temperature": 0.0, "top_p": 1.0, "max_output_tokens": args.max_tokens},
        "out": f"runs/{agent}",
        "concurrency": 1,
    }
    if args.limit:
        config["limit"] = args.limit
    (folder / f"{agent}.yaml").write_text(json.dumps(config))
    subprocess.run([GYM, "eval", "run", f"{agent}.yaml"], cwd=folder, capture_output=True,
                   env={**os.environ, "GYMFLOW_LOCAL_PREFECT": "off"}, timeout=7200)  # fmt: skip
    return folder / "runs" / agent / "gymflow.duckdb"


_ROWS = """
SELECT r.task_id, r.status, coalesce(r.failure_kind, ''), v.reward,
       epoch(r.finished_at - r.started_at),
       (SELECT count(DISTINCT call_index) FROM model_calls m WHERE m.rollout_id = r.rollout_id),
       TRY_CAST(json_extract(r.counters_json, '$.agent_logged_calls') AS INTEGER)
FROM rollouts r LEFT JOIN verifications v USING (rollout_id) ORDER BY r.task_id
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="scripted", help="'scripted' or a base URL (…/v1)")
    parser.add_argument("--name", default="scripted")
    parser.add_argument("--kind", default="responses", choices=["responses", "chat_completions"])
    parser.add_argument("--tool-choice", default=None)
    parser.add_argument("--agents", default="oracle,nothing,mini-swe-agent,codex")
    parser.add_argument("--limit", type=int, default=0)
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = tiny.parse(parser, agents="oracle,nothing", limit=1)
    folder = Path(tempfile.mkdtemp(prefix="gymflow-agent-table-"))
    server = None
    base_url = args.model
    if args.model == "scripted":
        server, base_url = _scripted_model(folder)
    try:
        for agent in args.agents.split(","):
            started = time.monotonic()
            store = _run(agent, args, base_url, folder)
            wall = time.monotonic() - started
            if not store.exists():
                print(f"{agent}: no store (see {folder})")
                continue
            with duckdb.connect(str(store), read_only=True) as con:
                rows = con.execute(_ROWS).fetchall()
            passed = sum(1 for row in rows if row[3] == 1.0)
            per_rollout = sum(row[4] for row in rows) / max(len(rows), 1)
            print(f"\n## {agent} on {args.name}: {passed}/{len(rows)} pass, "
                  f"{per_rollout:.1f} s per rollout, {wall:.0f} s wall")  # fmt: skip
            print("| task | status | failure kind | reward | s | calls recorded | in its log |")
            print("|---|---|---|---|---|---|---|")
            for task, status, kind, reward, secs, recorded, logged in rows:
                print(f"| {task} | {status} | {kind} | {reward} | {secs:.1f} | {recorded} | "
                      f"{'' if logged is None else logged} |")  # fmt: skip
            unequal = [r[0] for r in rows if r[6] is not None and r[5] != r[6]]
            print(f"calls: recorded {sum(r[5] for r in rows)}, in the agent's own log "
                  f"{sum(r[6] or 0 for r in rows)}; unequal on: {unequal or 'none'}")  # fmt: skip
            sys.stdout.flush()
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
    print(f"\nruns kept in {folder}")


if __name__ == "__main__":
    main()
