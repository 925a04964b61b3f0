"""Bad input gets a clear error naming the file and the row or field, and changes nothing stored:
every test hashes the stores it aims at before and after the refused command."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.conftest import gym, gym_in_process
from tests.faults.stores import collect_run, copied_run, gym_env, tree_digest

ENVS = Path(__file__).parent / "envs"  # dupes/ and benchmarks/missing-split.yaml


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run every bad command below is pointed at."""
    return collect_run(tmp_path_factory.mktemp("bad-input") / "run")


def refused(
    *args: str, cwd: Path, guarded: list[Path], env: dict | None = None, runner=gym_in_process
) -> str:
    """Run `gym *args` (in this process unless `runner` says otherwise: each is refused before
    anything runs), expect a refusal; return its message with Rich's wrapping undone."""
    before = {path: tree_digest(path) for path in guarded}
    result = runner(*args, cwd=cwd, env=env)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert {path: tree_digest(path) for path in guarded} == before, "a refusal changed a store"
    return " ".join(result.stderr.split())


def test_malformed_yaml_names_file_and_line(stored: Path, tmp_path: Path) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text(f"benchmark: arithmetic-smoke\nout: {stored}\nrepeats: [2\nlimit: 6\n")
    message = refused("eval", "run", str(config), "--resume", cwd=tmp_path, guarded=[stored])
    assert f"{config}: line 4" in message and "malformed YAML" in message


def test_wrong_type_names_file_and_field(stored: Path, tmp_path: Path) -> None:
    config = tmp_path / "typed.yaml"
    config.write_text(f"benchmark: arithmetic-smoke\nout: {stored}\nrepeats: many\n")
    message = refused("eval", "run", str(config), "--resume", cwd=tmp_path, guarded=[stored])
    assert str(config) in message and "repeats:" in message


def test_a_run_into_a_store_holding_its_rollouts_needs_resume(stored: Path, tmp_path: Path):
    """Re-running a config whose store holds rollouts (a killed run, say) without `--resume` is
    refused before anything starts, naming `--resume`; what was stored stays as it was."""
    config = tmp_path / "again.yaml"
    config.write_text(f"benchmark: arithmetic-smoke\nlimit: 6\nrepeats: 2\nout: {stored}\n")
    message = refused("eval", "run", str(config), cwd=tmp_path, guarded=[stored])
    assert f"{stored}: already holds rollouts of this run; continue it (--resume)" in message


def test_jsonl_rows_with_wrong_types_name_file_line_and_field(stored: Path, tmp_path: Path):
    rows = tmp_path / "rollouts.jsonl"
    good = {
        "responses_create_params": {"input": "Compute 1 + 1."},
        "response": {"output": [], "usage": {"input_tokens": 3, "output_tokens": 1}},
        "reward": 1.0,
        "_ng_task_index": 0,
        "_ng_rollout_index": 0,
    }
    bad = {**good, "reward": "high", "_ng_rollout_index": "1"}
    rows.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    fresh = tmp_path / "imported"
    message = refused("import", "nemo-gym", str(rows), "--out", str(fresh), cwd=tmp_path,
                      guarded=[stored])  # fmt: skip
    assert f"{rows}:2: reward: expected a number" in message
    assert f"{rows}:2: _ng_rollout_index: expected a non-negative integer" in message
    assert not (fresh / "gymflow.duckdb").exists()
    refused("import", "nemo-gym", str(rows), "--out", str(stored), cwd=tmp_path, guarded=[stored])


def test_duplicate_task_ids_name_the_rows(stored: Path, tmp_path: Path) -> None:
    env = {"GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)}
    message = refused("eval", "run", "--environment", "dupes", "--out", str(stored), "--resume",
                      cwd=tmp_path, guarded=[stored], env=env)  # fmt: skip
    assert "environment 'dupes' split 'test': row 3 repeats task_id 'd-1' of row 1" in message


def test_benchmark_naming_a_missing_split_names_the_file(stored: Path, tmp_path: Path) -> None:
    env = {"GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)}
    message = refused("eval", "run", "--benchmark", "missing-split", "--out", str(stored),
                      "--resume", cwd=tmp_path, guarded=[stored], env=env)  # fmt: skip
    bench_file = ENVS / "benchmarks" / "missing-split.yaml"
    assert f"{bench_file}: split:" in message and "no split 'holdout'" in message


def test_shard_store_from_another_config_is_refused(stored: Path, tmp_path: Path) -> None:
    ours = collect_run(tmp_path / "shard0", shard={"index": 0, "count": 2})
    theirs = collect_run(tmp_path / "shard1", repeats=3, shard={"index": 1, "count": 2})
    merged = copied_run(stored, tmp_path / "merged")  # a run store the merge must not touch
    message = refused("eval", "aggregate", str(ours), str(theirs), "--out", str(merged),
                      cwd=tmp_path, guarded=[ours, theirs, merged])  # fmt: skip
    assert f"{theirs}: refused" in message


def test_truncated_store_is_named_and_left_alone(stored: Path, tmp_path: Path, prefect_api: str):
    broken = tmp_path / "truncated"
    shutil.copytree(stored, broken)
    store = broken / "gymflow.duckdb"
    store.write_bytes(store.read_bytes()[: store.stat().st_size // 2])
    for args in (("eval", "profile", str(broken)), ("eval", "health", str(broken))):
        message = refused(*args, cwd=tmp_path, guarded=[broken])
        assert "store unreadable (truncated or corrupt?)" in message and str(store) in message
    # Through the flow the refusal comes from a Prefect task, which logs its own traceback first;
    # the command still ends on the one-line reason and leaves the file as it was.
    config = tmp_path / "resume.yaml"
    config.write_text(f"benchmark: arithmetic-smoke\nlimit: 6\nrepeats: 2\nout: {broken}\n")
    before = tree_digest(broken)
    result = gym("eval", "run", str(config), "--resume", cwd=tmp_path, env=gym_env(prefect_api))
    assert result.returncode == 1
    last_words = " ".join(result.stderr[result.stderr.rindex("error: ") :].split())
    assert "truncated or corrupt?" in last_words and str(store) in last_words
    assert tree_digest(broken) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # each was a traceback (exit 3), a pydantic report, or NaN silently keeping every task
        (["data", "profile", "{run}", "--groups", "-1"], "Invalid value for '--groups'"),
        (["eval", "profile", "{run}", "--seed", "-1"], "Invalid value for '--seed'"),
        (["data", "select", "{run}", "--max-input-tokens", "nan", "--dry-run"],
         "error: --max-input-tokens nan: expected a finite number"),
        (["data", "select", "{run}", "--max-output-tokens", "inf", "--dry-run"],
         "error: --max-output-tokens inf: expected a finite number"),
        (["eval", "run", "--benchmark", "arithmetic-smoke", "--shard", "3/2", "--out", "{run}"],
         "error: --shard '3/2': shard index 3 is not below shard count 2"),
        (["eval", "run", "--benchmark", "arithmetic-smoke", "--shards", "0", "--out", "{run}"],
         "error: command line: invalid config (1 problem(s)) - shards: Input should be greater"),
    ],
)  # fmt: skip
def test_a_bad_flag_is_one_clear_line(
    stored: Path, tmp_path: Path, args: list[str], expected: str
) -> None:
    argv = [arg.format(run=stored) for arg in args]
    message = refused(*argv, cwd=tmp_path, guarded=[stored])
    assert expected in message and "pydantic" not in message


def test_a_config_that_is_not_text_or_never_ends_is_refused(stored: Path, tmp_path: Path) -> None:
    """A binary named by mistake was a UnicodeDecodeError traceback ("a gymflow bug"), and
    /dev/zero was read until the kernel killed gym."""
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))
    message = refused("eval", "run", str(binary), "--out", str(stored), cwd=tmp_path,
                      guarded=[stored])  # fmt: skip
    assert f"error: {binary}: cannot read config: not UTF-8 text (byte" in message
    # a gym process: /dev/zero read to the end would take pytest's memory, not its own
    validated = gym("env", "validate", "/dev/zero", cwd=tmp_path)
    assert validated.returncode == 1 and "Traceback" not in validated.stderr
    assert "/dev/zero: cannot read config: longer than 67108864 bytes" in validated.stdout


def test_a_port_out_of_range_is_refused_not_served_nowhere(tmp_path: Path) -> None:
    """`--port 99999` printed "serving … on :99999" and then waited forever, serving nothing."""
    # a gym process: were it not refused, it would serve on
    message = refused("serve", "environment", "arithmetic", "--port", "99999", cwd=tmp_path,
                      guarded=[], runner=gym)  # fmt: skip
    assert "Invalid value for '--port'" in message
