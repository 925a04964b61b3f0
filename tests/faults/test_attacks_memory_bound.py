"""A store's text taking a read command's memory (issue 42, attack pass 7, s06): 30 values of
60 MB, each under the 64 MiB a value may hold, took `gym eval health` to 6.9 GB. DuckDB reads
2,048 rows at once, so a bound per value is no bound on what a read holds, and an analysis
DuckDB could not finish within its memory cap ran again without it. Now one bound,
`GYMFLOW_ANALYSIS_MEMORY`, covers a read: DuckDB's limit, never lifted, and the text a vector of
a table may hold (a quarter of it on 2 cores), read from DuckDB's statistics when the store
opens. A store past it is refused in one line naming the store and what passed the bound,
exit 1, nothing read or written, with the memory of reading an honest store.

Scaled down: a bound of 64 MB (16 MB of text a vector) against six values of 8 MB."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pytest

from gymflow.core.config import MAX_TEXT_BYTES
from gymflow.core.records import Rollout, Verification, rollout_id
from gymflow.store.db import connect
from gymflow.store.memory_bound import text_at_once_bound
from gymflow.store.writer import write_rollouts
from tests.conftest import GYM, gym_in_process
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    one_error_line,
    query,
    tree_digest,
)
from tests.faults.test_attacks_store_values import COMMANDS as READS

BOUND = "64MB"
VALUE = 8_000_000
#: Commands that read the whole store; each opens it first.
COMMANDS = {**READS, "export": ("export", "{run}", "--out", "{out}")}


@pytest.fixture(scope="module")
def honest(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("bound") / "run")


def _hostile(honest: Path, to: Path) -> Path:
    """A copy whose six rollouts' answers are VALUE bytes each: every one within the bound per
    value, 48 MB together in one row group, three times the text a vector may hold."""
    run = shutil.copytree(honest, to)
    edit_store(
        run,
        f"UPDATE rollouts SET output_text = repeat(chr(65 + task_index), {VALUE}) FROM tasks "
        "WHERE rollouts.task_id = tasks.task_id AND repeat_index = 0",
    )
    return run


def _peak_kib(*args: str, cwd: Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in KiB) of `gym ARGS` in a process of its own."""
    child = subprocess.Popen(
        [GYM, *args],
        cwd=cwd,
        env={**os.environ, "GYMFLOW_ANALYSIS_MEMORY": BOUND},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stderr is not None
    said = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    return os.waitstatus_to_exitcode(status), said, usage.ru_maxrss


def test_text_past_the_bound_is_refused_at_the_open_with_bounded_memory(
    honest: Path, tmp_path: Path
) -> None:
    assert VALUE < MAX_TEXT_BYTES  # each value one gymflow could have written
    run = _hostile(honest, tmp_path / "run")
    digest = tree_digest(run)
    plain_code, _, plain_peak = _peak_kib("eval", "health", str(honest), cwd=tmp_path)
    assert plain_code == 0
    code, said, peak = _peak_kib("eval", "health", str(run), cwd=tmp_path)
    line = one_error_line(said)
    assert code == 1 and "Traceback" not in said, said
    store = str(run / "gymflow.duckdb")
    assert store in line and "table rollouts holds 48,0" in line and BOUND in line, line
    assert "GYMFLOW_ANALYSIS_MEMORY" in line
    # what an honest store's health takes, give or take the noise of one process: not the
    # 48 MB of text read out, copied into the seal's messages, Arrow and Python (main: +170 MB)
    assert peak < plain_peak + 32 * 1024, (peak, plain_peak)
    assert tree_digest(run) == digest


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_read_command_refuses_it_in_one_line(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("GYMFLOW_ANALYSIS_MEMORY", BOUND)
    run = _hostile(honest, tmp_path / "run")
    digest = tree_digest(run)
    out = str(tmp_path / "out.jsonl")
    words = [str(run) if w == "{run}" else out if w == "{out}" else w for w in COMMANDS[command]]
    done = gym_in_process(*words, cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 1 and "gymflow bug" not in said, (command, said)
    line = one_error_line(done.stderr)
    assert str(run / "gymflow.duckdb") in line and "bytes of text" in line, (command, line)
    assert tree_digest(run) == digest and not (tmp_path / "out.jsonl").exists()


def test_an_honest_store_reads_within_a_bound_of_its_size(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same values raise no refusal once the bound holds them: the bound, not the values,
    decides (and the honest store reads under the small bound above)."""
    monkeypatch.setenv("GYMFLOW_ANALYSIS_MEMORY", "8GB")
    run = _hostile(honest, tmp_path / "run")
    done = gym_in_process("eval", "diagnose", str(run), cwd=tmp_path)
    # read whole: diagnosed, with the red line of the outputs edited in place (exit 2), not refused
    assert done.returncode == 2 and "bucket" in done.stdout, done.stdout + done.stderr
    assert "memory bound" not in done.stdout + done.stderr


#: Rows between two long trajectories of the honest store below: two in each vector.
SPREAD = 1024


def _share() -> int:
    """The text a vector may hold under BOUND on this machine (a quarter of it on 2 cores)."""
    con = duckdb.connect()
    try:
        return text_at_once_bound(con)
    finally:
        con.close()


def _with_long_trajectories(honest: Path, to: Path, *, every: int) -> Path:
    """A copy of the honest run with ten agent rollouts more per long trajectory, written as
    the collector writes them (`write_rollouts`), one trajectory of an eighth of the share in
    `every` of them, the rest short: ten long ones, 1.25 shares of text in the table's row
    group. `every=SPREAD`: two in a vector, what an honest agent run stores; `every=1`: all ten
    in one vector, crafted."""
    run = copied_run(honest, to)
    store = run / "gymflow.duckdb"
    ((run_id, version),) = query(store, "SELECT run_id, verifier_version FROM runs")
    tasks = [task for (task,) in query(store, "SELECT task_id FROM tasks")]
    long_step = "x" * (_share() // 8)
    started = datetime.now(UTC)
    rollouts = []
    for n in range(10 * SPREAD):
        task_id, repeat_index = tasks[n % len(tasks)], 2 + n // len(tasks)
        step = long_step if n % every == 0 and n < 10 * every else f"step {n}: ran the tests"
        rollouts.append(
            Rollout(
                rollout_id=rollout_id(run_id, task_id, repeat_index),
                run_id=run_id,
                task_id=task_id,
                repeat_index=repeat_index,
                seed=n,
                status="completed",
                started_at=started,
                finished_at=started + timedelta(seconds=1),
                trajectory=[{"type": "message", "role": "assistant", "content": step}],
                calls=[],
                output_text="Answer: 42",
                num_turns=1,
                verification=Verification(version, "ok", 0.0, False),
            )
        )
    con = connect(run)
    try:
        write_rollouts(con, rollouts)
    finally:
        con.close()
    return run


def test_an_agent_run_with_a_few_long_trajectories_opens(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent run whose row group holds more text than a vector may (1.25 shares), in a few
    long trajectories spread over it, two in each vector: a read holds a quarter of the share
    at once. Measured per vector from the segments' statistics, it opens; measured per row
    group, as before, every read refused it."""
    monkeypatch.setenv("GYMFLOW_ANALYSIS_MEMORY", BOUND)
    run = _with_long_trajectories(honest, tmp_path / "run", every=SPREAD)
    connect(run, read_only=True).close()
    done = gym_in_process("eval", "profile", str(run), cwd=tmp_path)
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "memory bound" not in said, said


def test_the_same_trajectories_in_one_vector_are_refused(
    honest: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same ten long trajectories in ten rows in a row: one vector holds 1.25 shares, and
    every read refuses the store at its open."""
    monkeypatch.setenv("GYMFLOW_ANALYSIS_MEMORY", BOUND)
    run = _with_long_trajectories(honest, tmp_path / "run", every=1)
    digest = tree_digest(run)
    done = gym_in_process("eval", "profile", str(run), cwd=tmp_path)
    line = one_error_line(done.stderr)
    assert done.returncode == 1 and "table rollouts holds" in line, done.stdout + done.stderr
    assert "which DuckDB reads at once" in line and BOUND in line, line
    assert tree_digest(run) == digest
