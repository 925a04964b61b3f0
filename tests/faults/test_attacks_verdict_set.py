"""The verdict set sealed as a whole (issue 42, attack pass 7, s03). Each verdict's seal shows an
edit of it, never its absence: the failing verdicts moved, seals and all, into
`superseded_verifications` (where a reverify sets aside the ones it judges again), or simply
deleted, left pass@1 60% -> 100% in `gym eval profile`, `profile --compare`, `gym eval diagnose`,
`gym runs list` and `gym report`, exit 0 with no word of it; only health said
`verification_missing`. Now the store holds a record of the verdict set (`meta.verdicts_seal`:
count and XOR of every verdict's seal, under the key, `store/sealed_rows.VERDICTS`), kept by every
writer that adds or sets verdicts aside, and every read that shows a number says the seals fail
(exit 2, as profile does for any failed seal; `runs list` shows no pass@1), and health fails
`verdicts_edited`. The store's generation is sealed over the record, so it cannot be removed;
a store sealed before it existed has none, reads as before, is checked for completed rollouts
without a verdict instead, and gets the record from its next writer."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from tests.conftest import gym as gym_process
from tests.conftest import gym_in_process as gym  # reads of stored runs: no process needed
from tests.faults.stores import (
    collect_run,
    copied_run,
    edit_store,
    query,
    rollout_rows,
    tree_digest,
)

#: The attacks, each an edit of the file by someone without the key.
ATTACKS = {
    # s03: the failing verdicts moved, seals and all, where a reverify sets aside verdicts
    "moved aside": (
        "INSERT INTO superseded_verifications "
        "SELECT *, 1, now()::TIMESTAMP FROM verifications WHERE NOT passed",
        "DELETE FROM verifications WHERE NOT passed",
    ),
    "deleted": ("DELETE FROM verifications WHERE NOT passed",),
    # the rollouts go too (their model calls with them): nothing is left without a verdict
    "deleted with their rollouts": (
        "CREATE TEMP TABLE gone AS SELECT rollout_id FROM verifications WHERE NOT passed",
        "DELETE FROM verifications WHERE rollout_id IN (FROM gone)",
        "DELETE FROM model_calls WHERE rollout_id IN (FROM gone)",
        "DELETE FROM rollouts WHERE rollout_id IN (FROM gone)",
    ),
}
#: What every read says of the attacked store.
SAYS = "the verdict set (a verdict deleted, added or moved aside) not as sealed"


@pytest.fixture(scope="module")
def honest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return collect_run(tmp_path_factory.mktemp("verdict-set") / "honest" / "run", limit=10)


def _json(done) -> dict:
    assert done.stdout, done.stderr
    return json.loads(done.stdout)


def _reads(run: Path, baseline: Path, cwd: Path) -> dict[str, tuple]:
    """Every read command that shows a number of `run`: exit code, the number it shows, and
    whether it says the store's seals fail (and what of)."""
    said = {}
    done = gym("eval", "profile", str(run), "--json", cwd=cwd)
    found = _json(done)
    said["profile"] = (done.returncode, found["pass@1"], found["seals"]["edited"])
    text = gym("eval", "profile", str(run), cwd=cwd)
    said["profile text"] = (text.returncode, "its seals do not match" in text.stdout)
    done = gym("eval", "profile", str(baseline), "--compare", str(run), "--json", cwd=cwd)
    found = _json(done)["profiles"]["b"]
    said["compare"] = (done.returncode, found["pass@1"], found["seals"]["edited"])
    done = gym("eval", "diagnose", str(run), "--json", cwd=cwd)
    # (`seals` is new in diagnose's JSON: read as none where it is absent)
    said["diagnose"] = (done.returncode, (_json(done).get("seals") or {}).get("edited", []))
    text = gym("eval", "diagnose", str(run), cwd=cwd)
    said["diagnose text"] = (text.returncode, "its seals do not match" in text.stdout)
    done = gym("runs", "list", str(run.parent), "--json", cwd=cwd)
    [entry] = _json(done)["runs"]
    said["runs list"] = (done.returncode, entry["pass1"], entry["seals"])
    for name, extra in (("report", ()), ("report compare", ("--compare", str(run)))):
        page = cwd / f"{run.parent.name}-{name.replace(' ', '-')}.html"
        args = (str(baseline), *extra) if extra else (str(run),)
        done = gym("report", *args, "--out", str(page), cwd=cwd)
        banner = 'data-field="seals.intact" data-value="false"' in page.read_text()
        said[name] = (done.returncode, banner, "its seals do not match" in done.stdout)
    done = gym("runs", "gate", str(run), "--baseline", str(baseline), "--json", cwd=cwd)
    found = _json(done)
    said["gate"] = (done.returncode, found["passed"], "verdicts_edited" in found["unhealthy"])
    done = gym("eval", "health", str(run), "--json", cwd=cwd)
    checks = _json(done)["checks"]
    said["health"] = (done.returncode, checks.get("verdicts_edited", {}).get("count"))
    return said


def _pass1(run: Path) -> float:
    (row,) = query(run / "gymflow.duckdb", "SELECT avg(passed::INT) FROM verifications")
    return float(row[0])


@pytest.mark.parametrize("attack", ATTACKS)
def test_every_read_says_a_store_whose_verdicts_were_removed_fails(
    honest: Path, tmp_path: Path, attack: str
) -> None:
    """On main, profile, compare, diagnose, runs list and report showed the raised pass@1 with
    exit 0 and the seals intact. Each now says the verdict set is not as sealed (exit 2; the
    report's page states it in a banner; runs list shows no pass@1), the gate fails
    `verdicts_edited`, and reading changed nothing."""
    baseline = copied_run(honest, tmp_path / "baseline" / "run")
    run = copied_run(honest, tmp_path / "attacked" / "run")
    before = _pass1(run)
    assert 0 < before < 1
    clean = _reads(run, baseline, tmp_path)
    assert clean["profile"] == (0, before, []) and clean["runs list"] == (0, before, "intact")
    assert clean["diagnose"] == (0, []) and clean["health"][0] == 0

    edit_store(run, *ATTACKS[attack])
    assert _pass1(run) == 1.0  # what the file says now
    stored, digest = rollout_rows(run / "gymflow.duckdb"), tree_digest(run)
    said = _reads(run, baseline, tmp_path)
    code, shown, edited = said["profile"]
    assert (code, shown) == (2, 1.0) and SAYS in edited, said  # the file's number, flagged
    assert said["profile text"] == (2, True), said
    code, shown, edited = said["compare"]
    assert (code, shown) == (2, 1.0) and SAYS in edited, said
    assert said["diagnose"][0] == 2 and SAYS in said["diagnose"][1], said
    assert said["diagnose text"] == (2, True), said
    assert said["runs list"] == (0, None, "edited"), said
    assert said["report"] == (2, True, True), said
    assert said["report compare"] == (2, True, True), said
    assert said["gate"] == (2, False, True), said
    assert said["health"] == (2, 1), said
    # the store is as the attacker left it (the gate keeps its verdict beside it)
    assert rollout_rows(run / "gymflow.duckdb") == stored
    assert tree_digest(run)["gymflow.duckdb"] == digest["gymflow.duckdb"]


def test_a_writer_refuses_a_store_whose_verdicts_were_removed(honest: Path, tmp_path: Path) -> None:
    """The failing verdicts and their rollouts deleted (no rollout left without a verdict, so
    no writer's check of deleted verdicts sees it): a reverify is refused, nothing written."""
    run = copied_run(honest, tmp_path / "run")
    edit_store(run, *ATTACKS["deleted with their rollouts"])
    # the rollouts' seal already showed this one; with it resealed as the attacker cannot,
    # only the verdict set would: here both say so
    digest = tree_digest(run)
    done = gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "nothing was written" in done.stderr
    assert tree_digest(run) == digest


@pytest.mark.parametrize("with_verdicts", [False, True])
def test_the_record_removed_is_seen(honest: Path, tmp_path: Path, with_verdicts: bool) -> None:
    """The verdict set's record deleted, to pass the store off as one sealed before it existed:
    the store's generation was sealed over the record, so it no longer holds
    (`seal_rolled_back`); with the failing verdicts deleted too, the check such a store gets
    sees them gone (`verdicts_edited`). Profile exits 2 either way."""
    run = copied_run(honest, tmp_path / "run")
    deleted = ATTACKS["deleted"] if with_verdicts else ()
    edit_store(run, *deleted, "DELETE FROM meta WHERE key = 'verdicts_seal'")
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    assert done.returncode == 2 and _json(done)["seals"]["intact"] is False
    health = _json(gym("eval", "health", str(run), "--json", cwd=tmp_path))
    failed = "verdicts_edited" if with_verdicts else "seal_rolled_back"
    assert failed in health["gate_failures"], health["gate_failures"]


def _as_sealed_before_the_record(run: Path) -> None:
    """The store as a gymflow that kept no record of the verdict set left it: no record, and
    its generation sealed over the records it has (what that gymflow's writers sealed)."""
    from gymflow.store.generations import write_generation
    from gymflow.store.seal_key import load_key

    key = load_key(create=False)
    assert key is not None
    con = duckdb.connect(str(run / "gymflow.duckdb"))
    try:
        con.execute("DELETE FROM meta WHERE key = 'verdicts_seal'")
        write_generation(con, key)
    finally:
        con.close()


def test_a_store_sealed_before_the_record_reads_as_before_and_is_checked(
    honest: Path, tmp_path: Path
) -> None:
    """A store sealed before the record reads intact with its numbers as before; s03 on it is
    still seen (completed rollouts without a verdict that no reverify set aside); its next
    writer seals the verdict set whole, and from then on the record is kept."""
    run = copied_run(honest, tmp_path / "older" / "run")
    before = _json(gym("eval", "profile", str(run), "--json", cwd=tmp_path))
    _as_sealed_before_the_record(run)
    older = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    assert older.returncode == 0 and _json(older) == {**before, "seals": _json(older)["seals"]}
    assert _json(older)["seals"]["intact"] is True

    attacked = tmp_path / "attacked" / "run"
    shutil.copytree(run, attacked)
    edit_store(attacked, *ATTACKS["moved aside"])
    done = gym("eval", "profile", str(attacked), "--json", cwd=tmp_path)
    assert done.returncode == 2 and SAYS in _json(done)["seals"]["edited"]

    gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    assert query(run / "gymflow.duckdb", "SELECT count(*) FROM meta WHERE key = 'verdicts_seal'")
    health = _json(gym("eval", "health", str(run), "--json", "--verify-seals", cwd=tmp_path))
    assert health["verdict"] == "healthy" and health["checks"]["verdicts_edited"]["count"] == 0


def test_the_once_per_state_record_does_not_hide_a_later_edit(honest: Path, tmp_path: Path) -> None:
    """A store whose every seal matched is not recomputed while its file is unchanged; the
    verdicts moved aside change the file, and the full check sees them."""
    run = copied_run(honest, tmp_path / "run")
    gym("eval", "profile", str(run), cwd=tmp_path, check=True)
    again = _json(gym("eval", "profile", str(run), "--json", cwd=tmp_path))
    assert again["seals"]["checked_at"] is not None  # the shortcut
    edit_store(run, *ATTACKS["moved aside"])
    done = gym("eval", "profile", str(run), "--json", cwd=tmp_path)
    assert done.returncode == 2
    assert _json(done)["seals"]["checked_at"] is None and SAYS in _json(done)["seals"]["edited"]


def _record_holds(run: Path, cwd: Path) -> None:
    """The store holds the verdict set's record, and every seal matches recomputed in full."""
    assert query(run / "gymflow.duckdb", "SELECT count(*) FROM meta WHERE key = 'verdicts_seal'")[
        0
    ] == (1,)
    health = _json(gym("eval", "health", str(run), "--json", "--verify-seals", cwd=cwd))
    assert health["checks"]["verdicts_edited"]["count"] == 0, health["gate_failures"]
    assert health["checks"]["seal_rolled_back"]["count"] == 0, health["gate_failures"]
    done = gym("eval", "profile", str(run), "--json", cwd=cwd)
    assert done.returncode == 0 and _json(done)["seals"]["intact"] is True


def test_every_honest_writer_keeps_the_record(honest: Path, tmp_path: Path) -> None:
    """Reverify (a new version), `--failed-only` (passes carried), a full reverify of that
    version again (the carried verdicts set aside and judged), `use-version`, each leave the
    verdict set as their own record says."""
    run = copied_run(honest, tmp_path / "run")
    _record_holds(run, tmp_path)
    done = gym(
        "eval", "reverify", str(run), "--set", "abs_tol=0.5", "--failed-only", "--json",
        cwd=tmp_path, check=True,
    )  # fmt: skip
    _record_holds(run, tmp_path)
    version = _json(done)["new_version"]
    gym("eval", "reverify", str(run), "--set", "abs_tol=0.5", cwd=tmp_path, check=True)
    aside = query(run / "gymflow.duckdb", "SELECT count(*) FROM superseded_verifications")[0][0]
    assert aside > 0  # the carried verdicts were set aside to be judged
    _record_holds(run, tmp_path)
    gym("eval", "use-version", str(run), version, cwd=tmp_path, check=True)
    _record_holds(run, tmp_path)


def test_a_merge_of_shards_keeps_the_record(tmp_path: Path) -> None:
    """Shards merged (each with its own record) into one store: its record is the merged set."""
    shards = [collect_run(tmp_path / f"shard{i}", shard={"index": i, "count": 2}) for i in range(2)]
    merged = tmp_path / "merged" / "run"
    gym_process(
        "eval", "aggregate", *map(str, shards), "--out", str(merged), cwd=tmp_path, check=True
    )
    _record_holds(merged, tmp_path)
