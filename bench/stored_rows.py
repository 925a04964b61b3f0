"""Every stored row of a demo run, a sharded run, a multi-turn tool run and a reverify, as one
digest per table: run it on two commits to show a change kept behaviour (issue 17's "byte-identical
before and after").

Each scenario runs twice with the same seeds. A column whose values differ between those two runs
(times, durations, process ids, paths of the temporary folder) is volatile and masked; every other
column must match the other commit's byte for byte. The public readers are compared too: the JSONL
export of each store (a layout change inside the store must read back the same).

    python bench/stored_rows.py --save /tmp/rows-before.json      # on the old commit
    python bench/stored_rows.py --against /tmp/rows-before.json   # on the new one
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb
import tiny

SCENARIOS = {
    "demo": [["demo", "--out", "{dir}"]],
    "sharded": [
        ["eval", "run", "--benchmark", "arithmetic-smoke", "--shards", "2", "--out", "{dir}"]
    ],
    "multi_turn": [["eval", "run", "--benchmark", "backoffice", "--limit", "20", "--out", "{dir}"]],
    "reverify": [
        ["demo", "--out", "{dir}"],
        ["eval", "reverify", "{dir}", "--set", "abs_tol=1.5"],
    ],
}


def gym(args: list[str], cwd: Path) -> None:
    done = subprocess.run(
        ["gym", *args], cwd=cwd, capture_output=True, text=True, env={**os.environ, "NO_COLOR": "1"}
    )
    if done.returncode not in (0, 2):  # 2: a health gate, which a scenario may trip on purpose
        sys.exit(f"gym {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")


#: Stored once and referred to from model calls' JSON (commit d39c380 on): compared through the
#: requests and responses they expand into, as every reader reads them.
REFERRED = ("tool_lists",)
EXPANDED = ("request_json", "response_json")


def _select(con, table: str) -> str:
    """`SELECT *`, with a model call's request and response read back whole."""
    try:
        from gymflow.store.tool_lists import expanded
    except ImportError:  # a commit before tool lists were stored once
        return f'SELECT * FROM "{table}"'
    columns = [
        r[0]
        for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE table_name = ? ORDER BY column_index",
            [table],
        ).fetchall()
    ]
    parts = [f"{expanded(f't.{c}')} AS {c}" if c in EXPANDED else f't."{c}"' for c in columns]
    return f'SELECT {", ".join(parts)} FROM "{table}" t'


def table_rows(store: Path, scratch: Path) -> dict[str, list[list[str]]]:
    """Each table's rows as sorted lists of canonical cell strings, the scratch folder's path
    replaced by a placeholder."""
    con = duckdb.connect(str(store), read_only=True)
    tables = [
        r[0]
        for r in con.execute("SELECT table_name FROM duckdb_tables() ORDER BY 1").fetchall()
        if r[0] not in REFERRED
    ]
    out: dict[str, list[list[str]]] = {}
    for table in tables:
        cursor = con.execute(_select(con, table))
        names = [d[0] for d in cursor.description]
        rows = [
            [json.dumps(v, default=str).replace(str(scratch), "<tmp>") for v in row]
            for row in cursor.fetchall()
        ]
        out[table] = [names, *sorted(rows)]
    con.close()
    return out


def export_lines(run: Path, scratch: Path) -> list[str]:
    target = run.parent / f"{run.name}.export.jsonl"
    gym(["export", str(run), "--format", "jsonl", "--out", str(target)], run.parent)
    lines = target.read_text().replace(str(scratch), "<tmp>").splitlines()
    return sorted(lines)


def scenario_once(name: str, scratch: Path) -> dict[str, object]:
    run = scratch / name
    for step in SCENARIOS[name]:
        gym([a.replace("{dir}", str(run)) for a in step], scratch)
    return {
        "tables": table_rows(run / "gymflow.duckdb", scratch),
        "export": export_lines(run, scratch),
    }


def volatile(first: dict, second: dict) -> dict[str, list[str]]:
    """Per table, the columns whose values differ between two identical runs."""
    found: dict[str, list[str]] = {}
    for table, rows in first["tables"].items():
        other = second["tables"].get(table, [])
        names = rows[0]
        found[table] = [
            col
            for i, col in enumerate(names)
            if sorted(r[i] for r in rows[1:]) != sorted(r[i] for r in other[1:])
        ]
    return found


def without(value: object, keys: set[str]) -> object:
    """The value with every object key in `keys` dropped, at any depth."""
    if isinstance(value, dict):
        return {k: without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [without(v, keys) for v in value]
    return value


def digest(snapshot: dict, masked: dict[str, list[str]]) -> dict[str, object]:
    """Per table: its columns, row count and a sha256 of its rows with volatile columns dropped."""
    tables = {}
    for table, rows in snapshot["tables"].items():
        names, body = rows[0], rows[1:]
        keep = [i for i, col in enumerate(names) if col not in masked.get(table, [])]
        kept = sorted(json.dumps([r[i] for i in keep]) for r in body)
        tables[table] = {
            "columns": names,
            "masked": masked.get(table, []),
            "rows": len(body),
            "sha256": hashlib.sha256("\n".join(kept).encode()).hexdigest(),
        }
    return {"tables": tables}


def snapshot(scenarios: list[str]) -> dict[str, object]:
    result = {}
    for name in scenarios:
        with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
            # Same folder name in both runs, so paths stored in rows compare equal.
            first = scenario_once(name, Path(a))
            second = scenario_once(name, Path(b))
            masked = volatile(first, second)
            result[name] = digest(first, masked)
            volatile_keys = {col for cols in masked.values() for col in cols}
            exported = [without(json.loads(line), volatile_keys) for line in first["export"]]
            again = [without(json.loads(line), volatile_keys) for line in second["export"]]
            if sorted(map(json.dumps, exported)) != sorted(map(json.dumps, again)):
                sys.exit(
                    f"{name}: the export differs between two identical runs beyond {volatile_keys}"
                )
            result[name]["export_sha256"] = hashlib.sha256(
                "\n".join(sorted(json.dumps(x, sort_keys=True) for x in exported)).encode()
            ).hexdigest()
        print(f"{name}: {len(result[name]['tables'])} tables", file=sys.stderr)
    return result


def compare(before: dict, after: dict) -> list[str]:
    problems = []
    for name, old in before.items():
        new = after.get(name)
        if new is None:
            problems.append(f"{name}: missing")
            continue
        for table, t in old["tables"].items():
            n = new["tables"].get(table)
            if n is None:
                problems.append(f"{name}.{table}: table gone")
            elif (t["columns"], t["rows"], t["sha256"]) != (n["columns"], n["rows"], n["sha256"]):
                problems.append(f"{name}.{table}: rows differ ({t['rows']} -> {n['rows']})")
        for table in set(new["tables"]) - set(old["tables"]):
            problems.append(f"{name}.{table}: new table")
        if old["export_sha256"] != new["export_sha256"]:
            problems.append(f"{name}: JSONL export differs")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--save", type=Path, help="write this commit's digests here")
    parser.add_argument("--against", type=Path, help="compare with digests saved on another commit")
    parser.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    args = tiny.parse(parser, scenarios=["demo"])
    result = snapshot(args.scenarios)
    if args.save:
        args.save.write_text(json.dumps(result, indent=1))
    for name, s in result.items():
        rows = sum(t["rows"] for t in s["tables"].values())
        print(f"{name:<11} {len(s['tables']):>2} tables {rows:>6} rows")
    if args.against:
        before = json.loads(args.against.read_text())
        problems = compare({name: before[name] for name in result if name in before}, result)
        print("\n".join(problems) if problems else "every stored row and export identical")
        sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
