"""Untrusted-output fixture: HumanEval/0 answered by seven hostile programs, played by the local
policy as both its right and its wrong answer, so every rollout runs one through the sandbox.

The write-outside target and the socket's port come from the test (GYMFLOW_FAULTS_VICTIM,
GYMFLOW_FAULTS_PORT); the process to kill is the one that generates the tasks: `gym` itself."""

from __future__ import annotations

import os

from gymflow.builtin.humaneval.env import fenced, load_problems
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment


def attacks() -> dict[str, str]:
    victim, port, gym = (
        os.environ["GYMFLOW_FAULTS_VICTIM"],
        os.environ["GYMFLOW_FAULTS_PORT"],
        os.getpid(),
    )
    return {
        "loop": "while True:\n    pass",
        "allocate-8gb": "hoard = bytearray(8 * 1024 ** 3)\nreturn hoard[0] == 0",
        "fork-1000": "import os, time\nfor _ in range(1000):\n    if os.fork() == 0:\n"
        "        time.sleep(60)\n        os._exit(0)\nreturn False",
        "write-outside": f"open({victim!r}, 'w').write('pwned')\nreturn False",
        "socket": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "return False",
        "kill-parent": f"import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
        f"os.kill({gym}, signal.SIGKILL)\nreturn False",
        # The forgery: look through the runner's frames for its secret, print what a
        # passing report looks like, and end the process before any test can fail.
        "fake-report": "import os, sys\nframe = sys._getframe()\nwhile frame.f_back:\n"
        "    frame = frame.f_back\nprint(frame.f_locals, 'passed')\nos._exit(0)",
    }


class Attacks(Environment):
    def generate(self, split):
        problem = load_problems()[0]
        tasks = []
        for name, body in attacks().items():
            indented = "\n".join(f"    {line}" for line in body.splitlines())
            answer = fenced(problem["prompt"] + indented + "\n")
            tasks.append(
                Task(
                    task_id=f"attack-{name}",
                    inputs={"attack": name, "prompt": problem["prompt"]},
                    data={k: problem[k] for k in ("prompt", "test", "entry_point")},
                    reference=answer,
                    distractor=answer,
                )
            )
        return tasks
