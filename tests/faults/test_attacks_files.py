"""Files gymflow writes, against the places they are written to. `gym export --out /dev/stdout`
as root replaced /dev/stdout with a regular file (and a symlink given as `--out` was replaced
the same way); `gym data select` on a full disk cut its previous selection's JSONL mid-line
beside the old YAML; a killed `gym eval aggregate` left a 12 KB file that made every later
aggregate into that folder refuse ("not a gymflow store"); `gym report` on a read-only run
folder and `gym env init --dir` into an unwritable one ended in tracebacks.

Every file is now written aside and renamed into place (gymflow.core.written): a special file is
refused, a symlink is replaced and never followed (what it points to is left alone), a failed or
killed command leaves what was there whole, and an unwritable place is one line naming it."""

from __future__ import annotations

import os
import resource
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import GYM, gym, gym_in_process, require_tool
from tests.faults.stores import collect_run, copied_run, one_error_line, rollout_rows, tree_digest


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return collect_run(tmp_path_factory.mktemp("files") / "run")


def _special_files(folder: Path) -> dict[str, Path]:
    special = {"fifo": folder / "fifo.jsonl"}
    os.mkfifo(special["fifo"])
    if os.geteuid() == 0:
        special["device"] = folder / "null.jsonl"
        os.mknod(special["device"], stat.S_IFCHR | 0o666, os.makedev(1, 3))
    special["link_to_stdout"] = folder / "stdout.jsonl"
    special["link_to_stdout"].symlink_to("/dev/stdout")
    return special


def test_out_refuses_a_special_file_and_replaces_a_symlink(run: Path, tmp_path: Path) -> None:
    before = tree_digest(run)
    for name, path in _special_files(tmp_path).items():
        kind = os.stat(path).st_mode
        # a process for a FIFO (written to, it would block until the timeout) and /dev/stdout
        # (what it is is the process's: a pipe for `gym`, pytest's capture file in this one)
        runner = gym_in_process if name == "device" else gym
        refused = runner("export", str(run), "--out", str(path), cwd=tmp_path)
        assert refused.returncode == 1, (name, refused.stdout, refused.stderr)
        assert "not a regular file" in one_error_line(refused.stderr), name
        assert os.stat(path).st_mode == kind, name  # still the device, FIFO or link
    assert os.path.islink("/dev/stdout")

    real = tmp_path / "exports" / "rollouts.jsonl"
    real.parent.mkdir()
    real.write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to(real)
    gym_in_process("export", str(run), "--out", str(link), cwd=tmp_path, check=True)
    assert not link.is_symlink() and link.read_text().count("\n") == 12
    assert real.read_text() == "old\n"  # an explicit --out that is a link: replaced, not followed
    assert sorted(p.name for p in real.parent.iterdir()) == ["rollouts.jsonl"]
    assert sorted(p.name for p in tmp_path.glob(".*partial*")) == []
    assert tree_digest(run) == before


def _full_disk() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_a_selection_cut_by_a_full_disk_leaves_the_previous_one_whole(tmp_path: Path) -> None:
    run = collect_run(tmp_path / "run", limit=30)
    out = tmp_path / "data"
    gym_in_process("data", "select", str(run), "--out", str(out), "--pass-rate", "[0,1]",
                   cwd=tmp_path, check=True)  # fmt: skip
    previous = tree_digest(out)
    full = subprocess.run(
        [GYM, "data", "select", str(run), "--out", str(out), "--pass-rate", "[0,1]"],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "200"},
        preexec_fn=_full_disk,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert full.returncode == 1, full.stdout + full.stderr
    assert "File too large" in one_error_line(full.stderr)
    assert tree_digest(out) == previous
    assert not [p for p in (out / "benchmarks").iterdir() if p.name.startswith(".")]


def test_a_killed_aggregate_never_blocks_the_next(tmp_path: Path) -> None:
    shards = [collect_run(tmp_path / f"shard{i}", shard={"index": i, "count": 2}) for i in (0, 1)]
    reference = tmp_path / "reference"
    gym_in_process("eval", "aggregate", *map(str, shards), "--out", str(reference),
                   cwd=tmp_path, check=True)  # fmt: skip
    merged = tmp_path / "merged"
    for delay in (0.5, 1.0, 1.5, 2.0, 3.0):  # killed wherever it is: importing, creating, merging
        process = subprocess.Popen(
            [GYM, "eval", "aggregate", *map(str, shards), "--out", str(merged)],
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(delay)
        process.send_signal(signal.SIGKILL)
        process.wait()
        if (merged / "gymflow.duckdb").exists():
            break
    done = gym_in_process("eval", "aggregate", *map(str, shards), "--out", str(merged),
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert rollout_rows(merged / "gymflow.duckdb") == rollout_rows(reference / "gymflow.duckdb")


def _read_only(*folders: Path) -> list[str]:
    """A command prefix that runs with `folders` mounted read-only (as root, permissions alone
    would not stop a write)."""
    prefix = [require_tool("bwrap"), "--dev-bind", "/", "/"]
    for folder in folders:
        prefix += ["--ro-bind", str(folder), str(folder)]
    return prefix


def test_a_read_only_place_is_one_error_line_naming_it(run: Path, tmp_path: Path) -> None:
    before = tree_digest(run)
    env = {**os.environ, "COLUMNS": "200"}
    report = subprocess.run(
        [*_read_only(run), GYM, "report", str(run)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.returncode == 1, report.stdout + report.stderr
    line = one_error_line(report.stderr)
    assert line.startswith(f"error: {run / 'report.html'}: cannot write: Read-only"), line
    assert tree_digest(run) == before

    folder = tmp_path / "envs"
    folder.mkdir()
    init = subprocess.run(
        [*_read_only(folder), GYM, "env", "init", "my-env", "--dir", str(folder)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert init.returncode == 1, init.stdout + init.stderr
    assert str(folder) in one_error_line(init.stderr)
    assert list(folder.iterdir()) == []


def test_a_link_into_gymflows_own_folder_is_not_written_through(run: Path, tmp_path: Path) -> None:
    """An attacker's pass (a12): `RUN/report.html` linked to the records of sealed stores, and
    the owner's `gym report RUN` replaced them with the report, which switched off the check
    that a sealed store was stripped (linked to the seal key, it destroyed the key). The link
    is now replaced by the report; the records are left alone."""
    from gymflow.store.seal_key import key_file

    run = copied_run(run, tmp_path / "run")
    records = key_file().with_name("sealed-stores")
    assert records.exists()  # the run above was recorded there
    before = records.read_bytes()
    (run / "report.html").unlink(missing_ok=True)
    (run / "report.html").symlink_to(records)
    done = gym_in_process("report", str(run), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"report: {run / 'report.html'}" in done.stdout
    assert not (run / "report.html").is_symlink()
    assert (run / "report.html").read_text().lstrip().lower().startswith("<!doctype html")
    assert records.read_bytes() == before
