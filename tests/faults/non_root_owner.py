"""Run as a non-root owner by test_attacks_sandbox_host.py: the owner's sandboxes (a workspace
task's tests/test.sh, a code candidate) try to read a 0600 file of the owner's in a folder the
sandbox shows, the owner's seal key, and to kill a process of the owner's. Prints what each saw,
as JSON. argv: the owner's work folder (its own), and the secret the 0600 file holds."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import gymflow.verifiers.sandbox as code_sandbox
from gymflow.core.user_folders import user_config
from gymflow.sandboxes import SandboxSpec
from gymflow.sandboxes.bubblewrap import BubblewrapSandbox
from gymflow.verifiers import sandbox_host
from gymflow.verifiers.sandbox import CandidateRaised, Sandbox

TEST_SH = """echo "uid $(id -u)"
echo "token $(cat {token} 2>&1)"
echo "key $(cat {key} 2>&1)"
kill -9 {victim} 2>&1; echo "kill $?"
mkdir -p /logs/verifier; echo private > /logs/verifier/private.txt
chmod 600 /logs/verifier/private.txt
mkdir -p /app/closed/deeper; echo inside > /app/closed/deeper/f; chmod 000 /app/closed
"""

CANDIDATE = """import os


def probe(token, victim):
    try:
        seen = open(token).read()
    except OSError as exc:
        seen = f"errno {exc.errno}"
    try:
        os.kill(victim, 9)
        killed = "killed"
    except OSError as exc:
        killed = f"errno {exc.errno}"
    return [os.getuid(), seen, killed]
"""


async def workspace(work: Path, token: Path, key: Path, victim: int) -> dict[str, object]:
    (work / "ws").mkdir()
    tests = work / "tests"
    tests.mkdir()
    (tests / "test.sh").write_text(TEST_SH.format(token=token, key=key, victim=victim))
    spec = SandboxSpec(workspace=work / "ws", installs=(token.parent,))
    box = BubblewrapSandbox(spec)
    async with box:
        await box.reset("/tests")
        await box.upload(tests, "/tests")
        result = await box.exec("bash /tests/test.sh", timeout_s=60)
        seen: dict[str, object] = {"output": result.output}
        # what the command left, whatever its modes, is the owner's to copy out and remove
        try:
            await box.download("/logs/verifier/private.txt", work / "out")
            seen["copied"] = (work / "out").read_text()
            await box.reset("/app")
            seen["reset"] = "done"
        except Exception as exc:
            seen["reset"] = f"{type(exc).__name__}: {exc}"
        scratch = box._scratch
    seen["scratch_left"] = scratch is not None and scratch.exists()
    return seen


def code(token: Path, victim: int) -> list[object]:
    # the interpreter's prefix is what the code sandbox shows; the owner's folder stands for an
    # interpreter the owner installed (a pyenv prefix of its own)
    executable, binds, hidden = code_sandbox._interpreter()
    code_sandbox._interpreter = lambda: (executable, [*binds, token.parent], hidden)  # type: ignore[assignment]
    with Sandbox(CANDIDATE) as box:
        box.load()
        try:
            return box.call("probe", str(token), victim)
        except CandidateRaised as exc:
            return [f"raised {exc}"]


def orphan(work: Path) -> bool | None:
    """Whether sweep_orphans removes a scratch folder whose owner was killed while a command had
    it: a folder of a subordinate id's, mode 700 (None without subordinate ids)."""
    namespace = sandbox_host._subordinate_namespace()
    if isinstance(namespace, str):
        return None
    gone = subprocess.Popen(["true"])
    gone.wait()
    root = work / "scratch"
    folder = root / f"{sandbox_host.SCRATCH_PREFIX}{gone.pid}-x" / "app"
    folder.mkdir(parents=True)
    lent = 'touch "$0/f" && chown -R 5:5 "$0" && chmod 700 "$0"'
    subprocess.run([*namespace, "/bin/sh", "-c", lent, str(folder)], check=True)
    sandbox_host.sweep_orphans(str(root))
    return not folder.parent.exists()


def main() -> None:
    work, secret = Path(sys.argv[1]), sys.argv[2]
    token = work / "agent" / "token"
    token.parent.mkdir()
    token.write_text(secret)
    token.chmod(0o600)
    key = user_config("seal.key")
    key.parent.mkdir(parents=True, exist_ok=True)
    key.write_text(secret + "-key")
    key.chmod(0o600)
    victim = subprocess.Popen(["sleep", "300"])
    try:
        seen = {
            "owner_uid": os.getuid(),
            "workspace": asyncio.run(workspace(work, token, key, victim.pid)),
            "code": code(token, victim.pid),
            "victim_alive": victim.poll() is None,
            "orphan_removed": orphan(work),
        }
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
