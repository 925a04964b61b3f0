"""Hostile and broken NeMo Gym files are refused with file, line and field (nothing stored), a
refusal and a failures sidecar become failed rollouts (never reward 0), an import killed mid-write
leaves nothing that blocks the next, and `--out` mistakes are one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gymflow.cli.app import print_json
from gymflow.interop.nemo_gym import import_rollouts
from gymflow.interop.nemo_read import InteropError
from tests.conftest import gym_in_process as gym  # imports and exports: no process needed
from tests.interop.test_real_files import DATA, _query

REAL = DATA / "blackjack" / "example_rollouts.jsonl"


def _real_lines() -> list[str]:
    return REAL.read_text().splitlines()


def _with_line(tmp_path: Path, text: str, at: int = 1) -> Path:
    lines = _real_lines()
    lines[at] = text
    path = tmp_path / "hostile.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _edited(edit) -> str:
    row = json.loads(_real_lines()[1])
    edit(row)
    return json.dumps(row)


@pytest.mark.parametrize(
    ("name", "raw_reward", "expected"),
    [
        ("nan", "NaN", "hostile.jsonl:2: reward: NaN is not a finite number"),
        ("infinity", "Infinity", "hostile.jsonl:2: reward: Infinity is not a finite number"),
        ("-infinity", "-Infinity", "hostile.jsonl:2: reward: -Infinity is not a finite number"),
        ("overflow", "1e400", "hostile.jsonl:2: reward: 1e400 is not a finite number"),
        ("huge", "1e308", "hostile.jsonl:2: reward: 1e+308 is past the limit"),
        ("string", '"1.0"', 'hostile.jsonl:2: reward: expected a number, got "1.0"'),
    ],
)
def test_bad_rewards_are_refused(tmp_path: Path, name: str, raw_reward: str, expected: str) -> None:
    row = json.loads(_real_lines()[1])
    row["reward"] = "__REWARD__"
    path = _with_line(tmp_path, json.dumps(row).replace('"__REWARD__"', raw_reward))
    out = gym("import", "nemo-gym", str(path), "--out", "run", cwd=tmp_path)
    assert out.returncode == 1
    assert expected in " ".join(out.stderr.split()), out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda r: r.update(_ng_rollout_index=1_000_000_000),
            "_ng_rollout_index: 1000000000 is past the limit of 9999",
        ),
        (
            lambda r: r.update(_ng_task_index=10**20),
            "_ng_task_index: 100000000000000000000 is past the limit",
        ),
        (lambda r: r.update(_ng_task_index=1e20), "_ng_task_index: expected a non-negative"),
        (lambda r: r.update(_ng_rollout_index=-1), "_ng_rollout_index: expected a non-negative"),
        (
            lambda r: r["responses_create_params"]["input"][0].update(content=5),
            "responses_create_params.input[0].content: expected text or a list of content parts",
        ),
        (
            lambda r: r["response"]["output"].append(["not", "an", "item"]),
            "response.output[",
        ),
        (
            lambda r: r["response"]["output"].append(
                {"type": "message", "content": [{"type": "output_text", "text": 42}]}
            ),
            "].content[0].text: expected text, got 42",
        ),
        (
            lambda r: r["response"].update(usage={"input_tokens": "many", "output_tokens": 3}),
            "response.usage.input_tokens: expected a token count",
        ),
    ],
    ids=["billion-repeats", "index-1e20-int", "index-1e20-float", "negative", "content-5",
         "item-list", "text-42", "usage-text"],
)  # fmt: skip
def test_bad_fields_are_refused_with_file_line_and_field(tmp_path: Path, edit, expected) -> None:
    path = _with_line(tmp_path, _edited(edit))
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    assert f"{path}:2: " in str(caught.value)
    assert expected in str(caught.value), caught.value
    assert not (tmp_path / "run").exists()


def test_a_refusal_is_a_failed_rollout_not_a_zero(tmp_path: Path) -> None:
    def refuse(row: dict) -> None:
        row["response"]["output"] = [
            {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "refusal", "refusal": "I can't help with that."}],
            }
        ]
        row["reward"] = 0.0

    path = _with_line(tmp_path, _edited(refuse))
    result = import_rollouts(path, tmp_path / "run")
    assert result["failed"] == 1
    row = _query(
        tmp_path / "run",
        "SELECT r.status, r.failure_kind, r.error, v.reward FROM rollouts r "
        "LEFT JOIN verifications v USING (rollout_id) WHERE r.repeat_index = 1",
    )[0]
    assert row[:2] == ("failed", "refused")
    assert "I can't help with that." in row[2]
    assert row[3] is None  # not scored


def test_the_failures_sidecar_adds_failed_rollouts(tmp_path: Path) -> None:
    # NeMo Gym's layout: successes in the main file, failed attempts in <stem>_failures.jsonl
    lines = _real_lines()
    main, failed = lines[:3], [json.loads(line) for line in lines[3:]]
    for row in failed:
        row["_ng_failure_class"] = "timeout_exceeded"
        row["error_message"] = "task timed out after 600 s"
    (tmp_path / "r.jsonl").write_text("\n".join(main) + "\n")
    (tmp_path / "r_failures.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in [failed[0], *failed])  # a retried attempt
    )
    result = import_rollouts(tmp_path / "r.jsonl", tmp_path / "run")
    assert (result["rollouts"], result["failed"], result["repeats"]) == (5, 2, 5)
    stored = _query(
        tmp_path / "run",
        "SELECT r.repeat_index, r.failure_kind, count(c.attempt) FROM rollouts r "
        "JOIN model_calls c USING (rollout_id) WHERE r.status = 'failed' "
        "GROUP BY ALL ORDER BY 1",
    )
    assert stored == [(3, "timeout", 2), (4, "timeout", 1)]
    scored = _query(tmp_path / "run", "SELECT count(*) FROM verifications")[0][0]
    assert scored == 3


_KILL_AFTER_FIRST_TABLE = """
import os, signal, sys
from pathlib import Path
import gymflow.interop.nemo_gym as nemo
real = nemo.insert_rows
def insert_then_die(con, table, rows):
    real(con, table, rows)
    os.kill(os.getpid(), signal.SIGKILL)
nemo.insert_rows = insert_then_die
nemo.import_rollouts(Path(sys.argv[1]), Path(sys.argv[2]))
"""


def test_a_killed_import_leaves_nothing_that_blocks_the_next(tmp_path: Path) -> None:
    killed = subprocess.run(
        [sys.executable, "-c", _KILL_AFTER_FIRST_TABLE, str(REAL), str(tmp_path / "run")],
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9
    assert not (tmp_path / "run" / "gymflow.duckdb").exists()
    assert len(list(tmp_path.glob(".run.importing-*"))) == 1  # what the killed import left
    out = gym("import", "nemo-gym", str(REAL), "--out", "run", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert list(tmp_path.glob(".run.importing-*")) == []
    assert _query(tmp_path / "run", "SELECT count(*) FROM rollouts")[0][0] == 5


def test_out_mistakes_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file")
    out = gym("import", "nemo-gym", str(REAL), "--out", "taken", cwd=tmp_path)
    assert out.returncode == 1
    assert "taken: exists and is not a folder" in out.stderr
    assert "Traceback" not in out.stderr
    gym("import", "nemo-gym", str(REAL), "--out", "run", cwd=tmp_path, check=True)
    again = gym("import", "nemo-gym", str(REAL), "--out", "run", cwd=tmp_path)
    assert again.returncode == 1 and "already holds a store" in again.stderr
    into_file = gym("export", "run", "--format", "jsonl", "--out", "taken/x.jsonl", cwd=tmp_path)
    assert into_file.returncode == 1
    assert "taken: not a folder" in into_file.stderr and "Traceback" not in into_file.stderr
    onto_folder = gym("export", "run", "--format", "nemo-gym", "--out", "run", cwd=tmp_path)
    assert onto_folder.returncode == 1 and "run: is a folder" in onto_folder.stderr


def test_a_read_only_run_folder_is_named_not_called_corrupt(tmp_path: Path) -> None:
    """The run folder bind-mounted read-only in a private mount namespace (root writes anywhere
    else); `gym export` then writes its default file into that folder."""
    gym("import", "nemo-gym", str(REAL), "--out", "run", cwd=tmp_path, check=True)
    run = tmp_path / "run"
    export = f"{sys.executable} -m gymflow.cli export {run} --format nemo-gym"
    script = f"mount --bind {run} {run} && mount -o remount,ro,bind {run} && exec {export}"
    result = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    if "mount:" in result.stderr or "unshare:" in result.stderr:
        pytest.skip(f"no private read-only mount here: {result.stderr.strip()}")
    assert result.returncode == 1, result.stdout
    assert f"{run}: not writable (read-only folder?)" in " ".join(result.stderr.split())
    assert "corrupt" not in result.stderr and "Traceback" not in result.stderr


def test_json_output_never_holds_nan(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"pass@1": float("nan"), "ci": [float("inf"), -float("inf"), 0.5], "n": 3})

    def refuse(token: str) -> None:
        raise AssertionError(f"{token} is not JSON")

    parsed = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert parsed == {"pass@1": None, "ci": [None, None, 0.5], "n": 3}


def test_an_endless_line_is_refused_unread_and_the_others_still_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gymflow.interop.nemo_read as nemo_read

    monkeypatch.setattr(nemo_read, "MAX_LINE_BYTES", 2**20)  # 1 MB, so the test writes little
    lines = _real_lines()
    path = tmp_path / "long.jsonl"
    with path.open("wb") as handle:
        handle.write(lines[0].encode() + b"\n")
        handle.write(b'{"pad": "' + b"x" * (3 * 2**20) + b'"}\n')
        handle.write(b"\xff\xfe not text\n")
        handle.write(lines[1].encode() + b"\n")
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    message = str(caught.value)
    assert f"{path}:2: (line): longer than 1 MB" in message
    assert f"{path}:3: not UTF-8 text at byte 0" in message
    assert "2 problem(s)" in message  # lines 1 and 4 were read and are fine


def test_indices_on_some_lines_only_are_refused(tmp_path: Path) -> None:
    row = json.loads(_real_lines()[1])
    del row["_ng_task_index"], row["_ng_rollout_index"]
    path = _with_line(tmp_path, json.dumps(row))
    with pytest.raises(InteropError) as caught:
        import_rollouts(path, tmp_path / "run")
    assert f"{path}:2: _ng_task_index: present on some lines and not on others" in str(caught.value)


def test_a_sidecar_line_without_indices_is_refused(tmp_path: Path) -> None:
    shutil.copy(REAL, tmp_path / "r.jsonl")
    row = json.loads(_real_lines()[0])
    del row["_ng_task_index"], row["_ng_rollout_index"]
    (tmp_path / "r_materialized_inputs.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(InteropError) as caught:
        import_rollouts(tmp_path / "r.jsonl", tmp_path / "run")
    assert "r_materialized_inputs.jsonl:1: _ng_task_index: missing" in str(caught.value)
