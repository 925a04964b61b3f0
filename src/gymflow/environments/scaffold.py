"""`gym env init NAME`: a new environment folder that validates as created.

The folder is a working example, not a stub: a manifest, an environment class generating a few
tasks with references and distractors, a tool with per-session state, and a benchmark. Point
GYMFLOW_ENVIRONMENTS_PATH at the parent folder and `gym list environments` shows it."""

from __future__ import annotations

import re
from pathlib import Path

from gymflow.core.errors import UserError
from gymflow.core.written import written
from gymflow.environments.base import EnvironmentManifest

_NAME = re.compile(EnvironmentManifest.model_fields["name"].metadata[0].pattern)


class ScaffoldError(UserError):
    pass


_MANIFEST = """\
name: {name}
description: >-
  {title}: a starter environment made by `gym env init`. Each task asks for the sum of a short
  list of numbers; the `note` tool keeps per-session notes and the `{name}_sum` verifier checks
  the answer line. Replace the tasks, tools and verifier with your own.
domain: custom
tags: [custom, starter]
tools: [note]
verifier: {{name: {name}_sum}}
reward_range: [0.0, 1.0]
pass_threshold: 1.0
reverify_stateless: true
harness: single_turn
prompt_template: |-
  Add these numbers: {{{{ numbers | join(", ") }}}}.

  Give your final answer on its own line as: Answer: <number>
splits:
  test: {{description: all tasks, size: 20}}
default_split: test
id_field: task_id
entrypoint: env:{cls}
"""

_ENV = '''\
"""{title}: tasks generated from a fixed seed, so task `{name}-0003` is the same everywhere.

Everything an environment needs comes from `gymflow` itself (see `gymflow.__all__`)."""

from __future__ import annotations

import random
import re
from typing import Any

from gymflow import (
    Environment,
    ResourcesServer,
    Task,
    ToolError,
    Verdict,
    VerifyInput,
    function_tool,
    verifier,
)

SEED = 1
ANSWER = re.compile(r"^Answer:\\s*(-?\\d+)\\s*$", re.MULTILINE)


def make_task(index: int) -> Task:
    rng = random.Random(f"{{SEED}}:{{index}}")
    numbers = [rng.randint(1, 99) for _ in range(rng.randint(2, 5))]
    answer = sum(numbers)
    return Task(
        task_id=f"{name}-{{index:04d}}",
        inputs={{"numbers": numbers}},
        data={{"answer": answer}},
        reference=f"Answer: {{answer}}",
        distractor=f"Answer: {{answer + 1}}",
    )


@verifier("{name}_sum")  # quick and pure: runs inline (see runs= and timeout_s= for others)
def sum_answer(inp: VerifyInput, params: Any) -> Verdict:
    """Reward 1 when the last answer line holds the sum of the task's numbers."""
    answers = ANSWER.findall(inp.output_text)
    given = int(answers[-1]) if answers else None
    return Verdict(1.0 if given == inp.task.data["answer"] else 0.0, {{"given": given}})


class {cls}Server(ResourcesServer):
    """Each session has its own notes; a tool error is returned to the model as the output."""

    tool_schemas = {{
        "note": function_tool(
            "note",
            "Write a note to this session's notepad; returns every note so far.",
            {{
                "type": "object",
                "properties": {{"text": {{"type": "string"}}}},
                "required": ["text"],
            }},
        )
    }}

    def initial_state(self, task: Task) -> dict[str, Any]:
        return {{"notes": []}}

    def handlers(self):
        return {{"note": self._note}}

    @staticmethod
    def _note(state: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
        text = arguments.get("text")
        if not isinstance(text, str) or not text:
            raise ToolError("note needs a non-empty 'text'")
        state["notes"].append(text)
        return state["notes"]


class {cls}(Environment):
    def generate(self, split: str) -> list[Task]:
        return [make_task(i) for i in range(self.manifest.splits[split].size or 0)]

    def resources_server(self, verifier_params=None):
        return {cls}Server(self, verifier_params)
'''

_BENCHMARK = """\
name: {name}-smoke
description: {title} starter benchmark, ten tasks, two repeats each.
environment: {name}
split: test
limit: 10
repeats: 2
sampling: {{temperature: 0.0, top_p: 1.0, max_output_tokens: 64, seed: 0}}
tags: [custom, starter]
"""

_CONFIG = """\
# Check with `gym env validate {name}/eval.yaml`, run with `gym eval run {name}/eval.yaml`
# (set GYMFLOW_ENVIRONMENTS_PATH to the folder that holds `{name}/`).
benchmark: {name}-smoke
out: runs/{name}-smoke
"""


def class_name(name: str) -> str:
    return "".join(part.capitalize() for part in re.split(r"[-_]", name)) + "Environment"


def scaffold(name: str, parent: Path) -> list[Path]:
    """Create `parent/name/` (the environment) and `parent/benchmarks/NAME-smoke.yaml`."""
    if not _NAME.fullmatch(name):
        raise ScaffoldError(
            f"environment name {name!r}: use lowercase letters, digits, '-' and '_', "
            "starting with a letter"
        )
    folder = parent / name
    benchmark = parent / "benchmarks" / f"{name}-smoke.yaml"
    for path in (folder, benchmark):
        if path.exists():
            raise ScaffoldError(f"{path} already exists; not overwriting it")
    values = {"name": name, "cls": class_name(name), "title": name.replace("-", " ").title()}
    files = {
        folder / "environment.yaml": _MANIFEST,
        folder / "env.py": _ENV,
        folder / "eval.yaml": _CONFIG,
        benchmark: _BENCHMARK,
    }
    with written(*files) as partials:
        for partial, template in zip(partials, files.values(), strict=True):
            partial.write_text(template.format(**values))
    return list(files)
