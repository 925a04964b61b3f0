"""`gym export --format atif`: a folder with one ATIF trajectory file per stored rollout
(`<rollout_id>.json`), each with its reward under one verifier version (`interop.atif`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gymflow.core.atif import rollout_to_atif
from gymflow.core.json_text import parse
from gymflow.core.written import WriteError, write_text
from gymflow.store.queries.exports import atif_calls, atif_rollout_rows
from gymflow.store.runs import run_info
from gymflow.store.stored_values import stored_json

_CALL_COLUMNS = ("call_index", "attempt", "status", "input_tokens", "cached_tokens",
                 "output_tokens")  # fmt: skip


def _agent(config_json: str | None, harness: str | None, gymflow_version: str | None):
    """(name, version) of the policy's agent: under the `command` harness the recipe (or own
    command) and the package and version the run recorded (`harness.agent_version`), else
    gymflow's harness at gymflow's version."""
    try:
        config = parse(config_json or "{}")
    except ValueError:
        config = {}
    recorded = (config.get("harness") or {}) if isinstance(config, dict) else {}
    if harness == "command" and recorded.get("agent_version"):
        name = recorded.get("agent") or "command"
        return str(name), str(recorded["agent_version"])
    return f"gymflow/{harness or 'unknown'}", gymflow_version or "unknown"


def write_atif(con, verifier_version: str, folder: Path) -> int:
    """Write every stored rollout of the store on `con` into `folder`; returns how many."""
    run = run_info(con)
    name, version = _agent(run.config_json, run.harness, run.gymflow_version)
    calls: dict[str, list[dict[str, Any]]] = {}
    for row in atif_calls(con):
        calls.setdefault(row[0], []).append(dict(zip(_CALL_COLUMNS, row[1:], strict=True)))
    if folder.is_symlink():  # its files would land wherever the link points
        raise WriteError(f"{folder}: a symlink; name a folder of its own for the ATIF files")
    folder.mkdir(parents=True, exist_ok=True)
    written = 0
    for row in atif_rollout_rows(con, verifier_version):
        (rollout_id, run_id, task_id, repeat, status, kind, trajectory_json,
         input_tokens, output_tokens, reward, passed) = row  # fmt: skip
        rollout = {
            "rollout_id": rollout_id, "run_id": run_id, "task_id": task_id,
            "repeat_index": repeat, "status": status, "failure_kind": kind,
            "trajectory": stored_json(
                con, trajectory_json, "rollouts", rollout_id, "trajectory_json", "[]"
            ),
            "input_tokens": input_tokens, "output_tokens": output_tokens,
        }  # fmt: skip
        document = rollout_to_atif(
            rollout,
            calls.get(rollout_id, []),
            agent=name,
            agent_version=version,
            model=run.model,
            reward=reward,
            passed=passed,
        )
        file_name = f"{rollout_id}.json"
        if Path(file_name).name != file_name or file_name.startswith("."):  # `../x`: elsewhere
            raise WriteError(f"{folder}: rollout id {rollout_id!r} is not a plain file name")
        write_text(folder / file_name, json.dumps(document, indent=1) + "\n")
        written += 1
    return written
