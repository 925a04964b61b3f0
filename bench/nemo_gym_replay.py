"""NeMo Gym's own expectations applied to gymflow: every server that ships recorded example
rollouts (`data/<split>_rollouts.jsonl`) has each of them replayed through gymflow's NeMo Gym
resources (the server started as `gym eval run` starts it, the row's session seeded, each
recorded tool call replayed on it, then `/verify` with the recorded response) and the reward
compared with the one NeMo Gym recorded. Prints, per server, the rollouts replayed, equal and
different, and every difference or refusal with its cause; then N servers / N equal.

    GYMFLOW_NEMO_GYM_VENV=/tmp/nemo-gym-venv \\
    GYMFLOW_NEMO_GYM_PATH=/tmp/nemo-gym-venv/lib/python3.12/site-packages \\
    python bench/nemo_gym_replay.py [--only mcqa arc_agi] [--per-server 20] [--json]

A judge server runs with `--judge-url URL --judge-model NAME` (a Responses API server); without
one it is refused, as `gym eval run` refuses it. A server's own requirements are installed first
when they are not yet (`gym env prepare`, cached), as `gym eval run` does."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import tiny
from nemo_gym_contract import default_nemo_gym_path

#: Rewards NeMo Gym recorded and gymflow's replay agree within this (float sums in verifiers).
TOLERANCE = 1e-6


#: A line of a log or an error that names an exception: `FileNotFoundError: ... 'apptainer'`.
_RAISED = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception|Exit)\b.*")


def _why(text: str) -> str:
    """An error's first line, and the last exception the server's log named after it when the
    first line does not say it (NeMo Gym's 500 answers `repr(e)`, often without its cause)."""
    lines = text.splitlines()
    raised = [line for line in lines[1:] if _RAISED.match(line)]
    first = lines[0][:300] if lines else ""
    return f"{first} [{raised[-1][:200]}]" if raised and raised[-1] not in first else first


#: A recorded line's keys that are the rollout, not its row.
_ROLLOUT_KEYS = ("response", "reward", "_ng_task_index", "_ng_rollout_index", "agent_ref")


def _own_row(env, row: dict[str, Any], index: int):
    """The task of a recorded line whose request no dataset row asks (NeMo Gym recorded it
    from rows prepared another way, e.g. with a prompt template applied): the line's own row,
    mapped as the environment maps its rows."""
    from gymflow.environments.dataset.mapping import map_rows
    from gymflow.environments.dataset.readers import RawRow

    fields = {k: v for k, v in row.items() if k not in _ROLLOUT_KEYS}
    mapped = map_rows([RawRow(f"line {index + 1}", fields)], env.rules())
    return mapped.tasks[0] if mapped.tasks else None


def _recorded(path: Path) -> list[dict[str, Any]]:
    rows = []
    for line in path.read_bytes().splitlines():
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance((row.get("response") or {}).get("output"), list):
            rows.append(row)
    return rows


async def _replay(resources, task, row: dict[str, Any]) -> tuple[float | str, list[str]]:
    """One recorded rollout through gymflow's resources: its reward, or why it has none, and
    the tool calls that failed here. NeMo Gym's simple agent hands any answer of a tool route
    (a 4xx, a 500) back to the model and goes on; so does the replay, and the recorded
    response is what `/verify` judges (a failed call is named beside a reward that differs)."""
    from gymflow.core.errors import RuntimeFailure
    from gymflow.core.protocols import ToolError, ToolServerError

    output = row["response"]["output"]
    failed: list[str] = []
    session = await resources.seed_session(task)
    try:
        for item in output:
            if item.get("type") != "function_call":
                continue
            try:
                arguments = json.loads(item.get("arguments") or "{}")
            except ValueError:
                continue  # NeMo Gym's agent answers the model itself and calls nothing
            name = str(item.get("name"))
            try:
                await resources.call_tool(session, name, arguments)
            except ToolServerError as exc:  # a 500: the model reads it and goes on, kept
                failed.append(f"{name}: {str(exc).splitlines()[0][:200]}")
            except ToolError:
                continue  # a 4xx goes back to the model, as NeMo Gym's agent passes it on
            except RuntimeFailure as exc:  # an MCP call that got no result
                failed.append(f"{name}: {str(exc).splitlines()[0][:200]}")
        trajectory = [*task.input_items, *output]
        verdict = await resources.verify(session, task, "", trajectory)
    finally:
        await resources.close_session(session)
    if verdict.status != "ok":
        error = str(verdict.details.get("error") or verdict.details)
        return f"{verdict.failure_kind}: {_why(error)}", failed
    return float(verdict.reward), failed


async def _server(server, split: str, per_server: int, judge: dict | None) -> dict[str, Any]:
    from gymflow.environments.nemo_gym.environment import NemoGymEnvironment, _request_key

    env = NemoGymEnvironment(server)
    rows = _recorded(server.splits[split].with_name(f"{server.splits[split].stem}_rollouts.jsonl"))
    result: dict[str, Any] = {"server": server.env_name, "recorded": len(rows)}
    started, built = time.monotonic(), None
    try:
        tasks = {_request_key(t.data): t for t in env.tasks(split)}
        resources = env.resources_server({"judge": judge} if judge else None)
        built = _built(server)
        resources.open(None)
    except Exception as exc:  # a refusal: its reason is the figure
        result["refused"] = f"{type(exc).__name__}: {_why(str(exc))}"
        result["seconds"] = round(time.monotonic() - started, 1)
        return result
    finally:
        result["prepare"] = _prepared(server, built)
    result["start_s"] = round(time.monotonic() - started, 1)
    equal, differences = 0, []
    try:
        for index, row in enumerate(rows[:per_server]):
            task = tasks.get(_request_key(row)) or _own_row(env, row, index)
            if task is None:
                differences.append({"line": index + 1, "cause": "no row, and its own is unread"})
                continue
            failed: list[str] = []
            try:
                got, failed = await asyncio.wait_for(_replay(resources, task, row), 600)
            except Exception as exc:
                got = f"{type(exc).__name__}: {_why(str(exc))}"
            want = row.get("reward")
            if isinstance(got, float) and isinstance(want, int | float):
                if math.isclose(got, float(want), abs_tol=TOLERANCE):
                    equal += 1
                    continue
                cause = f"reward differs ({want} recorded, {got} here)"
            else:
                cause = got if isinstance(got, str) else "no recorded reward"
            if failed:
                cause += f"; tool calls that failed here: {'; '.join(failed[:3])}"
            differences.append(
                {"line": index + 1, "recorded": want, "gymflow": got, "cause": cause}
            )
    finally:
        await resources.aclose()
    result.update(replayed=min(len(rows), per_server), equal=equal, differences=differences)
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _built(server) -> bool | None:
    """Whether the server's requirement venv was built before this run (None: it needs none,
    or names a requirement no registry has)."""
    from gymflow.environments.nemo_gym.prepare import MARKER, PrepareError, requirements, venv_dir

    try:
        wanted = requirements(server)
    except PrepareError:
        return None
    return (venv_dir(server, wanted) / MARKER).is_file() if wanted else None


def _prepared(server, built_before: bool | None) -> dict[str, Any] | None:
    """What `gym env prepare` installed for the server and how long it took, from its venv's
    record; None when the server needs nothing beyond NeMo Gym (or its venv is unbuilt)."""
    from gymflow.environments.nemo_gym.prepare import MARKER, PrepareError, requirements, venv_dir

    try:
        wanted = requirements(server)
    except PrepareError:
        return None
    marker = venv_dir(server, wanted) / MARKER if wanted else None
    if marker is None or not marker.is_file():
        return None
    done = json.loads(marker.read_text())
    return {"installed": done["installed"], "seconds": done["seconds"], "now": not built_before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="server folders (default: every one)")
    parser.add_argument("--per-server", type=int, default=50, help="recorded rollouts replayed")
    parser.add_argument("--judge-url", help="a Responses API server for judge servers")
    parser.add_argument("--judge-model", default="judge")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--parallel", type=int, default=1, help="servers replayed at once")
    args = tiny.parse(parser, only=["mcqa"], per_server=3)
    default_nemo_gym_path()
    from gymflow.environments.nemo_gym.folder import nemo_servers

    judge = {"base_url": args.judge_url, "model": args.judge_model} if args.judge_url else None
    chosen: dict[str, tuple[Any, str]] = {}
    for server in nemo_servers().values():
        if (args.only and server.name not in args.only) or server.name in chosen:
            continue
        split = next(
            (
                s
                for s, p in server.splits.items()
                if p.with_name(f"{p.stem}_rollouts.jsonl").is_file()
            ),
            None,
        )
        if split:
            chosen[server.name] = (server, split)

    def replayed(item: tuple[str, tuple[Any, str]]) -> dict[str, Any]:
        name, (server, split) = item
        result = asyncio.run(_server(server, split, args.per_server, judge))
        shown = result.get("refused") or (
            f"{result['equal']}/{result['replayed']} equal"
            + "".join(f"\n    line {d['line']}: {d['cause']}" for d in result["differences"][:5])
        )
        prepared = result.get("prepare")
        if prepared:
            how = "installed now" if prepared["now"] else "cached; installed"
            shown += f"\n    {how} in {prepared['seconds']} s: {' '.join(prepared['installed'])}"
        print(
            f"{name} ({result.get('seconds', 0)} s): {shown}",
            file=sys.stderr if args.json else sys.stdout,
            flush=True,
        )
        return result

    with ThreadPoolExecutor(args.parallel) as pool:  # each server in a thread, its own loop
        results = list(pool.map(replayed, sorted(chosen.items())))
    ran = [r for r in results if "refused" not in r]
    summary = {
        "servers_with_recorded_rollouts": len(results),
        "servers_run": len(ran),
        "servers_all_equal": sum(1 for r in ran if r["replayed"] and not r["differences"]),
        "rollouts_replayed": sum(r["replayed"] for r in ran),
        "rollouts_equal": sum(r["equal"] for r in ran),
        "refused": {r["server"]: r["refused"][:300] for r in results if "refused" in r},
    }
    if args.json:
        print(json.dumps({"summary": summary, "servers": results}, indent=2))
    else:
        print(json.dumps(summary, indent=2))
    sys.exit(0)


if __name__ == "__main__":
    main()
