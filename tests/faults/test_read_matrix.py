"""Every read command on every kind of run (issue 42): `gym eval profile` on any imported NeMo Gym
run ended in `TypeError: expected string or bytes-like object, got 'NoneType'` in
present/__init__.py `safe_text` (the import names no benchmark), exit 3, and no test read an
import with profile's text output. So each read command runs, as typed, on each kind of run a
user has: simulated, imported from NeMo Gym (a real file of nemo-gym 0.4.0), merged from shards,
reverified (a what-if version beside the run's) and made current. A command may refuse (one
error line) or fail a gate (exit 2), never end in a traceback or a "gymflow bug". The runs are
made by the collector and by the commands a user types; those commands and the reads run in
process, whose output and exit code are the command's (`gym_in_process`), with no process start
per cell."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import gym_in_process
from tests.faults.stores import collect_run, one_error_line

NEMO_FILE = Path(__file__).resolve().parents[1] / "interop" / "data" / "gymnasium"

#: Each read command, with whether it takes --json (both forms are run).
COMMANDS: dict[str, tuple[tuple[str, ...], bool]] = {
    "health": (("eval", "health"), True),
    "profile": (("eval", "profile"), True),
    "diagnose": (("eval", "diagnose"), True),
    "report": (("report",), False),
    "runs list": (("runs", "list"), True),
    "reverify --check": (("eval", "reverify", "{run}", "--check"), True),
    "export": (("export", "{run}", "--format", "nemo-gym", "--out", "{out}"), False),
    "data select": (("data", "select", "{run}", "--dry-run"), True),
    "data profile": (("data", "profile"), True),
}
KINDS = ("simulated", "imported", "merged", "reverified", "made current")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("kinds")
    made = {"simulated": collect_run(root / "simulated" / "run")}
    source = next(NEMO_FILE.glob("*.jsonl"))
    imported = root / "imported" / "run"
    gym_in_process("import", "nemo-gym", str(source), "--out", str(imported), cwd=root, check=True)
    made["imported"] = imported
    shards = [collect_run(root / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]
    merged = root / "merged" / "run"
    gym_in_process(
        "eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=root, check=True
    )
    made["merged"] = merged
    for kind, extra in (("reverified", ()), ("made current", ("--make-current",))):
        run = root / kind.replace(" ", "-") / "run"
        shutil.copytree(made["simulated"], run)
        gym_in_process(
            "eval", "reverify", str(run), "--set", "abs_tol=0.5", *extra, cwd=root, check=True
        )
        made[kind] = run
    return made


def _args(command: str, run: Path, out: Path) -> list[str]:
    words, _ = COMMANDS[command]
    if command == "runs list":
        return [*words, str(run.parent)]
    if "{run}" in words:
        places = {"{run}": str(run), "{out}": str(out / "export.jsonl")}
        return [places.get(word, word) for word in words]
    return [*words, str(run)]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_read_command_reads_every_kind_of_run(
    runs: dict[str, Path], tmp_path: Path, command: str, kind: str
) -> None:
    run = runs[kind]
    forms = [[]] + ([["--json"]] if COMMANDS[command][1] else [])
    for extra in forms:
        done = gym_in_process(*_args(command, run, tmp_path), *extra, cwd=tmp_path)
        said = done.stdout + done.stderr
        assert "Traceback" not in said and "gymflow bug" not in said, said
        assert done.returncode in (0, 1, 2), said
        if done.returncode == 1:  # a refusal: one line saying why
            one_error_line(done.stderr)
            assert command == "reverify --check" and kind == "imported", said
        elif extra:
            json.loads(done.stdout)
        elif command == "export" and done.returncode == 0:  # (the import's rows all failed)
            assert said.startswith("wrote ") and (tmp_path / "export.jsonl").exists(), said
