"""Does the fast tier cover every module? Runs `pytest -m "not slow"` (the fast tier, as the README
gives it) with bench/modules_seen/ on PYTHONPATH, so that every Python process of the run, `gym`
subprocesses included, records the gymflow modules it imported; then lists the modules under
src/gymflow (but the workspace tasks' files, an agent's material) that no process of the tier
imported, and prints the tier's wall time beside its bound (5 minutes on 2 cores, issue 43) and
the load average before and after.

"Imported" is the measure, not lines run: gymflow's CLI imports each command's modules when the
command runs, so a module no fast test imports is one whose code no fast test can have run.
Exits 1 when some module was never imported.

    python bench/fast_tier_modules.py                  # the whole fast tier, -n 2
    python bench/fast_tier_modules.py --log out.txt -- --durations=50  # pytest's arguments
    python bench/fast_tier_modules.py --tiny           # one small test: checks that it runs
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import tiny

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
RECORDER = Path(__file__).resolve().parent / "modules_seen"
BOUND_S = 300.0


#: the tasks gymflow ships for agents to work on: their files are an agent's material, run inside
#: a task's sandbox, not gymflow's modules (basedpyright leaves them out too)
MATERIAL = Path("gymflow/builtin/workspace")


def modules_under(source: Path) -> dict[str, str]:
    """Every module file under source/gymflow but the agents' material: resolved path -> dotted
    name (a package by its __init__)."""
    names = {}
    for path in (source / "gymflow").rglob("*.py"):
        relative = path.relative_to(source)
        if relative.is_relative_to(MATERIAL):
            continue
        parts = relative.with_suffix("").parts
        names[str(path.resolve())] = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
    return names


def seen_in(folder: Path) -> set[str]:
    return {
        line.strip()
        for record in folder.glob("*.txt")
        for line in record.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }


def load() -> str:
    return " ".join(f"{figure:.2f}" for figure in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workers", default="2", help="pytest-xdist's -n")
    parser.add_argument("--log", type=Path, help="write pytest's whole output here")
    parser.add_argument("pytest_args", nargs="*", help="after --: what pytest runs")
    # one test that starts one `gym` process, so a subprocess's record is read too; the file's
    # five start six
    args = tiny.parse(
        parser,
        pytest_args=[
            "tests/test_cli_in_process.py::test_in_process_says_what_the_process_says[table]"
        ],
        workers="0",
    )
    with tempfile.TemporaryDirectory(prefix="gymflow-modules-") as folder:
        env = {
            **os.environ,
            "GYMFLOW_MODULES_SEEN": folder,
            "PYTHONPATH": os.pathsep.join(
                [str(RECORDER), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
            ),
        }
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        command += ["-n", args.workers, "-m", "not slow", *args.pytest_args]
        before = load()
        started = time.monotonic()
        ran = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        seen = seen_in(Path(folder))
    if args.log:
        args.log.write_text(ran.stdout + ran.stderr)
    summary = ran.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"pytest {' '.join(command[3:])}: exit {ran.returncode}, {summary[0]}")
    print(f"wall {wall:.0f} s against the fast tier's bound {BOUND_S:.0f} s")
    print(f"load average (1, 5, 15 min) before {before}, after {load()}")
    # the check reads the source the run imported (PYTHONPATH's gymflow, else this checkout)
    import gymflow

    expected = modules_under(Path(gymflow.__file__).resolve().parents[1])
    unseen = sorted(name for path, name in expected.items() if path not in seen)
    print(f"{len(expected) - len(unseen)} of {len(expected)} gymflow modules imported by the tier")
    for name in unseen:
        print(f"  never imported: {name}")
    if ran.returncode not in (0, 1):
        print(ran.stdout[-3000:], ran.stderr[-3000:], sep="\n")
        return ran.returncode
    return 1 if unseen and not args.tiny else 0


if __name__ == "__main__":
    sys.exit(main())
