"""Out-of-memory fixture: a verifier that runs in a worker and, as one running the answer's code
does, declares that the answer's failures are its own (`outlived_bound_fails`). On the task
`hoard` it builds `hoard_mb` MiB on the trusted side (as decoding a large value the answer
returned would); on the task `crash`, with `crash` set, the worker kills itself by SIGKILL (a
verifier's own death, no memory involved). Both parameters are off when the run is collected."""

from __future__ import annotations

import os
import signal

from pydantic import BaseModel

from gymflow.core.tasks import Task
from gymflow.environments.base import Environment
from gymflow.verifiers.base import Verdict, verifier


class MemParams(BaseModel):
    hoard_mb: int = 0
    crash: bool = False


@verifier(
    "memlab_answer", params=MemParams, runs="worker", timeout_s=120.0, outlived_bound_fails=True
)
def memlab_answer(inp, params):
    word = inp.task.data["word"]
    if word == "hoard" and params.hoard_mb:
        held = [b"x" * (1 << 20) for _ in range(params.hoard_mb)]  # pages written: resident
        return Verdict(float(len(held) < 0))
    if word == "crash" and params.crash:
        os.kill(os.getpid(), signal.SIGKILL)
    return Verdict(1.0 if word in inp.output_text else 0.0)


class MemLab(Environment):
    def generate(self, split):
        return [
            Task(
                task_id=f"mem-{word}",
                inputs={"word": word},
                data={"word": word},
                reference=word,
                distractor="nothing",
            )
            for word in ("fine", "hoard", "crash")
        ]
