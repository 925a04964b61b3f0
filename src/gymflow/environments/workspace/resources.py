"""The resources server of a workspace benchmark: each session's sandbox, and the verdict of the
task's own test script run in it.

The harness opens the session's sandbox (`open_sandbox`: its kind is the harness's choice) and
runs the agent in it; `verify` then runs tests/test.sh there, as Harbor does: the tests are
uploaded only now (the agent never saw them), /logs/verifier is emptied first (a reward the agent
wrote is not the test's), and the reward is what the script wrote. A script that runs and fails
is the answer failing (its reward, usually 0); a script that outlives task.toml's
`[verifier] timeout_sec` is judged failing too (the workspace it tested is the agent's work), and
one that writes no reward is a verifier failure, never a 0."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from gymflow.core.bounded_files import FileBoundError, FileTooLong, read_bounded
from gymflow.core.records import Verification
from gymflow.core.tasks import Task
from gymflow.environments.resources import ResourcesServer
from gymflow.environments.workspace.harbor_task import (
    MAX_REWARD_BYTES,
    RewardProblem,
    parse_reward,
)
from gymflow.sandboxes.base import Sandbox, SandboxError
from gymflow.sandboxes.choice import sandbox_kind

#: The test script's output kept in a verdict's details.
OUTPUT_KEPT = 4000


class WorkspaceResources(ResourcesServer):
    async def seed_session(self, task: Task) -> str:
        session_id = await super().seed_session(task)
        self._sessions[session_id]["sandbox"] = None
        return session_id

    async def open_sandbox(
        self, session_id: str, kind: str, installs: tuple[Path, ...] = ()
    ) -> Sandbox:
        """The session's sandbox of `kind`, started on the task's workspace, showing the agent's
        `installs`; it lives until the session closes. Raises SandboxError."""
        session = self._sessions[session_id]
        task = self.env.workspace_task(session["task"].task_id)
        spec = task.sandbox_spec(
            task.environment_dir, hidden=self.env.hidden_paths(), installs=installs
        )
        sandbox = sandbox_kind(kind)(spec)
        await sandbox.start()
        session["sandbox"] = sandbox
        return sandbox

    async def close_session(self, session_id: str) -> None:
        session = self._sessions.get(session_id)
        sandbox = session.get("sandbox") if session else None
        if sandbox is not None:
            await sandbox.stop()
        await super().close_session(session_id)

    def final_state(self, session_id: str) -> dict[str, Any] | None:
        return None  # the state is the workspace, judged where it lies

    async def verify(
        self, session_id: str, task: Task, output_text: str, trajectory: list[dict[str, Any]]
    ) -> Verification:
        sandbox = self._sessions[session_id].get("sandbox")
        if sandbox is None:
            return self.unjudged(
                "no_workspace", "no sandbox ran this task (a workspace task runs under harness "
                "`command`)",
            )  # fmt: skip
        workspace_task = self.env.workspace_task(task.task_id)
        verifier = workspace_task.config.verifier
        try:
            await sandbox.reset("/logs/verifier")
            await sandbox.reset("/tests")
            await sandbox.upload(workspace_task.tests_dir, "/tests")
            result = await sandbox.exec(
                "bash /tests/test.sh", timeout_s=verifier.timeout_sec, env=verifier.env
            )
            *files, problem = await _reward_files(sandbox)
        except SandboxError as exc:
            return self.unjudged("sandbox_error", f"running tests/test.sh: {exc}")
        details: dict[str, Any] = {
            "test_exit_code": result.exit_code,
            "test_seconds": result.seconds,
            "test_output": result.output[-OUTPUT_KEPT:],
        }
        if result.limit == "timeout":
            details |= {"reason": "timeout", "limit": "verifier.timeout_sec"}
            return self.judged(0.0, None, details, source="the test script's time limit")
        if result.limit == "memory":
            details |= {"reason": "memory", "limit": "environment.memory_mb"}
            return self.judged(0.0, None, details, source="the test script's memory limit")
        try:
            if problem is not None:
                raise RewardProblem(problem)
            reward, others = parse_reward(*files)
        except RewardProblem as exc:
            return self.unjudged("reward_missing", f"{exc}; {details['test_output'][-500:]}")
        if others:
            details["rewards"] = others
        return self.judged(reward, None, details, source="tests/test.sh")


async def _reward_files(sandbox: Sandbox) -> tuple[bytes | None, bytes | None, str | None]:
    """reward.txt and reward.json as the test script left them, through the sandbox's own
    download (which never takes a link out of it), each read within MAX_REWARD_BYTES; and why
    one is no reward (past the bound), or None."""
    found: list[bytes | None] = []
    problem = None
    with tempfile.TemporaryDirectory(prefix="gymflow-reward-") as folder:
        for name in ("reward.txt", "reward.json"):
            target = Path(folder) / name
            try:
                await sandbox.download(f"/logs/verifier/{name}", target)
                found.append(read_bounded(target, MAX_REWARD_BYTES))
            except FileTooLong:
                found.append(None)
                problem = (
                    f"/logs/verifier/{name} is longer than a reward ({MAX_REWARD_BYTES:,} bytes)"
                )
            except (SandboxError, FileBoundError):  # none, or a folder: no reward file
                found.append(None)
    return found[0], found[1], problem
