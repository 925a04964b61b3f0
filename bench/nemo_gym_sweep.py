"""Every NeMo Gym environment `gym list environments` shows, run as a user runs it: `gym eval run
--environment ng-NAME --limit 3 --repeats 1` with the simulated policy, under `timeout 180`, a
few at a time. Each is classed as

- ran: rollouts stored with rewards that mean something (every verdict `ok`, a server's own
  reward; a judge server's from the judge configured, never a mock);
- refused: exit 1 before any rollout, with the reason gymflow gave;
- failed: it ran but a verdict is an error, or it crashed;
- hung: killed by the timeout;

with its wall time and the time to its first rollout (from the command's start to the first
rollout's end, as stored). Prints a table and the counts; `--json FILE` keeps every row.

    GYMFLOW_NEMO_GYM_VENV=/tmp/nemo-gym-venv \\
    GYMFLOW_NEMO_GYM_PATH=/tmp/nemo-gym-venv/lib/python3.12/site-packages \\
    python bench/nemo_gym_sweep.py [--parallel 2] [--only ng-mcqa ...] [--judge-url URL]

With `--judge-url` (a Responses API server, e.g. `gym serve model`, or with `--judge-kind
chat_completions` a chat completions one, e.g. llama.cpp's), judge
servers run with `verifier_params.judge` set to it; without, they are refused as gymflow refuses
them."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import tiny
from nemo_gym_contract import default_nemo_gym_path

TIMEOUT_S = 180


def _environments() -> list[str]:
    listed = subprocess.run(
        [sys.executable, "-m", "gymflow.cli", "list", "environments", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return sorted(e["name"] for e in json.loads(listed.stdout) if e["name"].startswith("ng-"))


def _store_figures(run: Path, started: float) -> dict:
    import duckdb

    store = run / "gymflow.duckdb"
    if not store.exists():
        return {}
    con = duckdb.connect(str(store), read_only=True)
    try:
        rollouts, first, ok, errors, low, high = con.execute(
            """
            SELECT count(DISTINCT r.rollout_id), epoch(min(r.finished_at)),
                   count(*) FILTER (WHERE v.status = 'ok'),
                   count(*) FILTER (WHERE v.status <> 'ok' OR r.status = 'failed'),
                   min(v.reward), max(v.reward)
            FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
            """
        ).fetchone()
        kinds = con.execute(
            """
            SELECT DISTINCT coalesce(v.failure_kind, r.failure_kind) FROM rollouts r
            LEFT JOIN verifications v USING (rollout_id)
            WHERE v.status <> 'ok' OR r.status = 'failed'
            """
        ).fetchall()
        why = con.execute(
            """
            SELECT coalesce(json_extract_string(v.details_json, '$.error'), r.error)
            FROM rollouts r LEFT JOIN verifications v USING (rollout_id)
            WHERE v.status <> 'ok' OR r.status = 'failed' LIMIT 1
            """
        ).fetchone()
    except duckdb.Error:
        return {}
    finally:
        con.close()
    return {
        "rollouts": rollouts,
        "ok": ok,
        "errors": errors,
        "rewards": [low, high],
        "first_rollout_s": round(first - started, 1) if first else None,
        "error_kinds": sorted(k for (k,) in kinds if k),
        "error": (why[0] or "")[:300] if why else "",
    }


def _run(name: str, work: Path, judge: str | None, judge_kind: str) -> dict:
    out = work / name
    config = out.with_suffix(".yaml")
    lines = [f"environment: {name}", "limit: 3", "repeats: 1", f"out: {out}"]
    if judge:
        settings = f"base_url: '{judge}', model: judge, kind: {judge_kind}, max_output_tokens: 256"
        lines.append(f"verifier_params: {{judge: {{{settings}}}}}")
    config.write_text("\n".join(lines) + "\n")
    started = time.time()
    done = subprocess.run(
        ["timeout", str(TIMEOUT_S), sys.executable, "-m", "gymflow.cli", "eval", "run",
         str(config)],
        capture_output=True, text=True, cwd=work,
    )  # fmt: skip
    wall = round(time.time() - started, 1)
    figures = _store_figures(out, started)
    lines = done.stderr.strip().splitlines() or [""]
    message = next((line for line in lines if line.startswith("error:")), lines[-1])[:400]
    if done.returncode == 124:
        outcome = "hung"
    elif done.returncode == 1 and not figures.get("rollouts"):
        outcome = "refused"
    elif figures.get("rollouts") and not figures["errors"] and figures["ok"]:
        outcome = "ran"
    else:
        outcome = "failed"
        message = figures.get("error") or message
    return {"environment": name, "outcome": outcome, "exit": done.returncode, "wall_s": wall,
            **figures, "message": message}  # fmt: skip


@contextlib.contextmanager
def prefect_server(home: Path):
    """One Prefect server for every run (PREFECT_API_URL), unless one is given: an ephemeral
    server per `gym eval run` costs 10 s, far more on a busy machine, and is no part of what a
    NeMo Gym server costs."""
    if os.environ.get("PREFECT_API_URL"):
        yield
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    prefect = str(Path(sys.executable).parent / "prefect")
    process = subprocess.Popen(
        [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port),
         "--no-services", "--no-ui", "--analytics-off"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/api"
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        os.environ["PREFECT_API_URL"] = url
        yield
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parallel", type=int, default=2)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--judge-url")
    parser.add_argument(
        "--judge-kind", default="responses", help="chat_completions for llama.cpp's server"
    )
    parser.add_argument("--json", type=Path)
    args = tiny.parse(parser, only=["ng-mcqa"], parallel=1)
    default_nemo_gym_path()
    names = args.only or _environments()
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    with (
        tempfile.TemporaryDirectory() as tmp,
        prefect_server(Path(tmp)),
        ThreadPoolExecutor(args.parallel) as pool,
    ):
        rows = []
        for row in pool.map(lambda n: _run(n, Path(tmp), args.judge_url, args.judge_kind), names):
            rows.append(row)
            first = row.get("first_rollout_s")
            print(
                f"{row['environment']:<48} {row['outcome']:<8} {row['wall_s']:>6.1f} s  "
                f"first rollout {first if first is not None else '-':>6}  "
                f"{row['message'][:160]}",
                flush=True,
            )
    counts = {k: sum(r["outcome"] == k for r in rows) for k in ("ran", "refused", "failed", "hung")}
    firsts = sorted(r["first_rollout_s"] for r in rows if r.get("first_rollout_s") is not None)
    median = firsts[len(firsts) // 2] if firsts else None
    print(json.dumps({"environments": len(rows), **counts, "median_first_rollout_s": median}))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
