"""A symlink planted at a file gymflow writes by default. An attacker's pass (a09): someone who
can write a run folder and its store (no key) appended `ssh-ed25519 AAAA… attacker@evil` to
the rollouts' text (the report shows it in `<pre>`, and HTML escaping leaves a public key
alone) and planted `RUN/report.html -> ~/.ssh/authorized_keys`. The owner's `gym report RUN`
followed the link: authorized_keys became the 77 KB report, 9 of its lines the attacker's key,
the owner's own key gone. Every default output (`gym export`'s files in the run folder, `gym
runs trend`'s ROOT/trend-NAME.html, gate.json, `gym data select`'s RUN/data/…) did the same.

gymflow.core.written now writes every file aside and renames it over the name: a rename
replaces a link and never follows it; a folder gymflow names itself inside a run folder (RUN/data,
RUN/confirm/…) is refused when it is a link, and so is the folder a file or a store is written
in (RUN itself, an `--out` folder). The targets below are a stand-in home's files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.conftest import gym_in_process as in_process
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    one_error_line,
    rollout_rows,
    tree_digest,
)

OWNER_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ3b0wnerOwnerOwnerOwner owner@laptop\n"
ATTACKER_KEY = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOkWy34BPDxldW/8rSDlmqFY4C4+qhVHs1nDQCjCVv9S attacker@evil"
)


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run each test here plants its links around a copy of."""
    return collect_run(tmp_path_factory.mktemp("honest") / "run")


def _home(tmp_path: Path) -> Path:
    """A stand-in home: the owner's authorized_keys (their own key), .bashrc and .profile."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "authorized_keys").write_text(OWNER_KEY)
    (home / ".bashrc").write_text("export PATH=$HOME/bin:$PATH\n")
    (home / ".profile").write_text(". ~/.bashrc\n")
    return home


def _digests(home: Path) -> dict[str, str]:
    """sha256 of the owner's files (gymflow's own cache may appear beside them)."""
    files = (".ssh/authorized_keys", ".bashrc", ".profile")
    return {name: hashlib.sha256((home / name).read_bytes()).hexdigest() for name in files}


def _plant(link: Path, target: Path) -> None:
    link.unlink(missing_ok=True)
    link.symlink_to(target)


def _keys(path: Path) -> list[str]:
    return [line for line in path.read_text().splitlines() if line.startswith("ssh-ed25519")]


def test_a_report_link_to_authorized_keys_leaves_them_alone(honest: Path, tmp_path: Path) -> None:
    home = _home(tmp_path)
    keys = home / ".ssh" / "authorized_keys"
    run = copied_run(honest, tmp_path / "run")
    line = "\\n" + ATTACKER_KEY + "\\n"  # a JSON-escaped newline inside the trajectory's text
    edit_store(
        run,
        f"UPDATE rollouts SET output_text = output_text || '\n{ATTACKER_KEY}\n'",
        f"""UPDATE rollouts SET trajectory_json =
            replace(trajectory_json, '"text": "', '"text": "' || '{line}')""",
        f"""UPDATE rollouts SET trajectory_json =
            replace(trajectory_json, '"text":"', '"text":"' || '{line}')""",
    )
    _plant(run / "report.html", keys)
    before, stored = _digests(home), rollout_rows(run / "gymflow.duckdb")
    assert _keys(keys) == [OWNER_KEY.strip()]

    done = in_process("report", str(run), cwd=tmp_path, env={"HOME": str(home)})
    # written where it belongs, and the edited store said to fail its seals (exit 2, as profile)
    assert done.returncode == 2 and "its seals do not match" in done.stdout, done.stdout
    assert f"report: {run / 'report.html'}" in done.stdout  # was: report: …/authorized_keys
    assert _digests(home) == before
    assert _keys(keys) == [
        OWNER_KEY.strip()
    ]  # was: 9 lines of the attacker's key, the owner's gone
    report = run / "report.html"
    assert not report.is_symlink() and report.stat().st_size > 1000
    assert ATTACKER_KEY in report.read_text()  # the store's text went where the report belongs
    assert rollout_rows(run / "gymflow.duckdb") == stored


@pytest.mark.parametrize("output", ["export", "trend"])
def test_other_default_outputs_replace_a_link_and_never_follow_it(
    output: str, honest: Path, tmp_path: Path
) -> None:
    home = _home(tmp_path)
    root = tmp_path / "runs"
    run = copied_run(honest, root / "nightly")
    if output == "export":  # default: RUN/rollouts.jsonl
        name, command = run / "rollouts.jsonl", ["export", str(run)]
    else:  # default: ROOT/trend-BENCHMARK.html
        name = root / "trend-arithmetic-smoke.html"
        command = ["runs", "trend", "arithmetic-smoke", "--root", str(root)]
    _plant(name, home / ".bashrc")
    before, stored = _digests(home), rollout_rows(run / "gymflow.duckdb")

    done = in_process(*command, cwd=tmp_path, env={"HOME": str(home)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert _digests(home) == before
    assert not name.is_symlink() and name.stat().st_size > 100
    assert rollout_rows(run / "gymflow.duckdb") == stored
    assert not [p for p in name.parent.iterdir() if p.name.endswith(".partial")]


def test_a_link_at_a_folder_gymflow_names_is_refused(honest: Path, tmp_path: Path) -> None:
    """`gym data select RUN` writes RUN/data/benchmarks/NAME.*: a link planted at RUN/data
    put the selection wherever it pointed (here the stand-in home's .ssh)."""
    home = _home(tmp_path)
    run = copied_run(honest, tmp_path / "run")
    (run / "data").symlink_to(home / ".ssh", target_is_directory=True)
    before, listed = _digests(home), sorted(p.name for p in (home / ".ssh").iterdir())

    done = in_process("data", "select", str(run), "--pass-rate", "[0,1]", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_error_line(done.stderr)
    assert f"{run / 'data'}: a symlink where gymflow keeps a folder of its own" in line, line
    assert _digests(home) == before
    assert sorted(p.name for p in (home / ".ssh").iterdir()) == listed  # no benchmarks/ there


def test_a_run_folder_that_is_a_link_is_written_through_by_no_writer(
    honest: Path, tmp_path: Path
) -> None:
    """RUN itself made a link (by whoever can write its parent, a shared runs/ folder) to a
    folder of the owner's: every default output (report.html, rollouts.jsonl, RUN/data/…) and
    the store's own writes (a reverify) landed in the folder it points to. The folder a file or
    a store is written in is refused when it is a link, named with where it points; reading
    through it is still reading that store (its seals and the ledger decide)."""
    home = _home(tmp_path)
    real = copied_run(honest, home / "project")
    (tmp_path / "runs").mkdir()
    link = tmp_path / "runs" / "nightly"
    link.symlink_to(real, target_is_directory=True)
    before, stored = tree_digest(real), rollout_rows(real / "gymflow.duckdb")
    for command in (
        ["report", str(link)],
        ["export", str(link)],
        ["data", "select", str(link), "--pass-rate", "[0,1]"],
        ["eval", "reverify", str(link), "--set", "rel_tol=1e-9"],
    ):
        done = in_process(*command, cwd=tmp_path, env={"HOME": str(home)})
        assert done.returncode == 1, (command, done.stdout + done.stderr)
        line = one_error_line(done.stderr)
        assert f"{link}: a symlink (to {real}); gymflow writes into a folder as" in line, line
    assert tree_digest(real) == before and rollout_rows(real / "gymflow.duckdb") == stored
    read = in_process("eval", "profile", str(link), "--json", cwd=tmp_path)
    assert read.returncode == 0, read.stdout + read.stderr


def test_an_out_folder_that_is_a_link_is_refused(honest: Path, tmp_path: Path) -> None:
    """`--out` naming a folder that is a link (`gym data select RUN --out DIR`, a file in it
    for `gym export`, the run folder `gym import` makes): refused as a run folder is, the
    folder it points to left alone."""
    home = _home(tmp_path)
    run = copied_run(honest, tmp_path / "run")
    out = tmp_path / "selections"
    out.symlink_to(home / ".ssh", target_is_directory=True)
    before = _digests(home), sorted(p.name for p in (home / ".ssh").iterdir())
    exported = tmp_path / "rollouts.jsonl"
    in_process("export", str(run), "--format", "nemo-gym", "--out", str(exported), cwd=tmp_path,
               check=True)  # fmt: skip
    for command in (
        ["data", "select", str(run), "--pass-rate", "[0,1]", "--out", str(out)],
        ["export", str(run), "--out", str(out / "rollouts.jsonl")],
        ["import", "nemo-gym", str(exported), "--out", str(out), "--environment", "arithmetic"],
    ):
        done = in_process(*command, cwd=tmp_path)
        assert done.returncode == 1, (command, done.stdout + done.stderr)
        line = one_error_line(done.stderr)
        assert f"{out}: a symlink (to {home / '.ssh'})" in line, line
    assert (_digests(home), sorted(p.name for p in (home / ".ssh").iterdir())) == before
