"""`gym eval run --resume` continues only a run this machine collected where it lies (attacker's
pass 9, A4). The crash-safe nightly form, `gym eval run CONFIG --resume --out TONIGHT`,
continued whatever store was at TONIGHT before it ran: a copy of last night's store put there
read as tonight's run ("nothing to collect", last night's pass@1, no model called), and its
writer then recorded the path as the run's. A copy of a run still where it was collected is
refused, nothing written; a run moved by its owner continues."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.faults.stores import collect_run, one_error_line, run_gym, tree_digest

CONFIG = {"benchmark": "arithmetic-smoke", "limit": 6, "repeats": 2}


def _resume(out: Path, tmp_path: Path, prefect_api: str):
    config = tmp_path / "nightly.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return run_gym(
        "eval", "run", str(config), "--resume", "--out", str(out),
        cwd=tmp_path, prefect_api=prefect_api,
    )  # fmt: skip


def test_a_copy_of_last_nights_run_at_tonights_folder_is_not_continued(
    tmp_path: Path, prefect_api: str
) -> None:
    last_night = collect_run(tmp_path / "nightly" / "n2", **CONFIG)
    tonight = tmp_path / "nightly" / "n3"
    tonight.mkdir()
    # the attacker, who writes nightly/ and guesses tonight's folder: one `cp`, no key
    shutil.copyfile(last_night / "gymflow.duckdb", tonight / "gymflow.duckdb")
    planted, kept = tree_digest(tonight), tree_digest(last_night)

    done = _resume(tonight, tmp_path, prefect_api)
    line = one_error_line(done.stderr)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert f"{tonight}: not continued" in line and str(last_night) in line, line
    assert "nothing to collect" not in done.stdout, done.stdout
    assert tree_digest(tonight) == planted and tree_digest(last_night) == kept


def test_a_run_its_owner_moved_is_continued(tmp_path: Path, prefect_api: str) -> None:
    first = collect_run(tmp_path / "runs" / "first", **CONFIG)
    moved = tmp_path / "runs" / "renamed"
    first.rename(moved)

    done = _resume(moved, tmp_path, prefect_api)
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    assert "nothing to collect" in done.stdout, done.stdout
