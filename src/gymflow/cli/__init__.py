"""The `gym` command (also installed as `gymflow`). Each verb group lives in its own module of
this package and registers its commands on the Typer apps of `gymflow.cli.app` when imported.
`main` imports the one module a command line names (`COMMANDS`); a line that names no command
(`gym --help`, `gym eval`, a typo) imports none of them: the command lists are drawn from the
summaries declared here, so listing what exists costs no analysis, store or Prefect import.

`main` turns every way a command can end into one of `exit_codes` and, for an error, one line:
usage errors included (click's own code, 2, would read as a failed gate), and every
`gymflow.errors.GymflowError` with its class's exit code. Any other exception is a gymflow bug:
its traceback is printed, always, above the line that says so."""

from __future__ import annotations

import importlib
import sys
import traceback

import typer

from gymflow.cli import ending, exit_codes
from gymflow.errors import GymflowError
from gymflow.present.terminal import styled

#: The command groups and what each is for.
GROUPS: dict[str, str] = {
    "eval": "Run, check, profile and diagnose evaluations.",
    "list": "List environments and benchmarks.",
    "env": "Check and scaffold environments and configs.",
    "serve": "Serve a model, an environment or the reports over HTTP.",
    "data": "Training data from a run: select tasks, export trajectories, profile.",
    "import": "Import rollouts collected elsewhere.",
    "runs": "The runs under a folder: list them, draw a benchmark's trend, gate on regressions.",
    "study": "Ablation studies: vary one thing at a time against a baseline.",
}

#: Every command: its words, the module that registers it, and the line that lists it (its own
#: docstring is its `--help`). A command imports only its own module and what that imports:
#: importing all of them took ~1 s (polars, numpy, the analysis and report modules) before any
#: command ran. tests/test_cli_commands.py checks this table against what the modules register.
COMMANDS: dict[tuple[str, ...], tuple[str, str]] = {
    ("eval", "run"): (
        "evaluate",
        "Collect rollouts, then check health, profile and write the report.",
    ),
    ("eval", "health"): (
        "analysis",
        "Check every record; exit 2 when a check flags too many rollouts.",
    ),
    ("eval", "profile"): (
        "analysis",
        "pass@1 with its 95% CI, pass@k, pass^k and coverage; --compare pairs two runs.",
    ),
    ("eval", "diagnose"): (
        "analysis",
        "Outcome buckets, failure taxonomy, verifier suspects and the next action.",
    ),
    ("eval", "reverify"): (
        "reverify",
        "New rewards from stored rollouts under changed verifier parameters; no inference.",
    ),
    ("eval", "use-version"): (
        "reverify",
        "Read a run under another stored verifier version from now on.",
    ),
    ("eval", "aggregate"): ("scale", "Merge shard stores into a run store (idempotent)."),
    ("demo",): ("evaluate", "Run the whole loop on arithmetic-smoke against the simulated policy."),
    ("report",): ("report", "Write the HTML report: opens offline, readable without JavaScript."),
    ("server",): (
        "scale",
        "Which Prefect server runs go to; --start / --stop a local one (and its report server).",
    ),
    ("search",): (
        "discover",
        "Rank environments and benchmarks by name, tag, domain and description.",
    ),
    ("list", "environments"): (
        "discover",
        "Every environment: name, domain, tags, harness, verifier, splits.",
    ),
    ("list", "benchmarks"): (
        "discover",
        "Every benchmark: environment, split, repeats, sampling and version.",
    ),
    ("env", "validate"): (
        "environment",
        "Check a config before spending compute; list every problem.",
    ),
    ("env", "init"): ("environment", "Scaffold a new environment that validates as created."),
    ("serve", "environment"): (
        "serve_environment",
        "Serve an environment's resources server over HTTP.",
    ),
    ("serve", "model"): ("serve_model", "Serve the seeded local policy (a simulation) over HTTP."),
    ("serve", "reports"): ("serve_reports", "Serve the HTML reports under ROOT (read-only)."),
    ("data", "select"): (
        "data",
        "Choose tasks by pass rate, bucket, tag, difficulty, length; write a benchmark.",
    ),
    ("data", "trajectories"): (
        "data",
        "Export the selected tasks' trajectories as chat-format training data.",
    ),
    ("data", "profile"): (
        "data",
        "Pass-rate histogram, informative share, near-duplicate prompts.",
    ),
    ("import", "nemo-gym"): ("interop", "Read a NeMo Gym rollout file into a new gymflow store."),
    ("export",): ("interop", "Write a run's rollouts as NeMo Gym JSONL, flat JSONL or Parquet."),
    ("runs", "list"): ("runs", "Every run under ROOT with its factors and headline."),
    ("runs", "trend"): ("runs", "pass@1 with its 95% CI over time for one benchmark."),
    ("runs", "gate"): (
        "runs",
        "Compare a run with a pinned baseline, paired by task; exit 2 on a drop.",
    ),
    ("study", "run"): ("study", "Run the baseline and every variant, then write study.html."),
}


def command_module(argv: list[str]) -> str | None:
    """The module of the command a command line (`argv` without the program name) names."""
    for words in (tuple(argv[:2]), tuple(argv[:1])):
        if words in COMMANDS:
            return COMMANDS[words][0]
    return None


def _register(argv: list[str]) -> None:
    """Import the module of the command `argv` names; with none named, list every command by
    its summary (a command that only lists is never run: a line naming it imports its
    module)."""
    from gymflow.cli.app import app, group

    module = command_module(argv)
    if module is not None:
        importlib.import_module(f"{__name__}.{module}")
        return
    for words, (_, summary) in COMMANDS.items():
        target = group(words[0]) if len(words) == 2 else app
        target.command(words[-1], help=summary)(_listed)


def _listed() -> None:
    """A listed command's stand-in (see `_register`)."""


def _unreadable_store(exc: Exception) -> bool:
    """A DuckDB read error; DuckDB is not imported to ask (a command that never opened a store
    cannot raise one)."""
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(exc, duckdb.IOException)


def _error(message: str) -> None:
    from gymflow.cli.app import errors

    errors.print(styled(("error:", "bold red")), message, highlight=False, soft_wrap=True)


def main() -> None:
    _register(sys.argv[1:])
    from gymflow.cli.app import app

    try:
        code = app(standalone_mode=False)
    except typer.Abort:  # Ctrl-C outside a run's own handling
        _error("interrupted")
        code = exit_codes.INTERRUPTED
    except typer.TyperException as exc:  # a usage error: Typer shows it with the usage line
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            _error(str(exc))
        code = exit_codes.BAD_INPUT
    except GymflowError as exc:
        _error(str(exc))
        code = exc.exit_code
    except KeyboardInterrupt:
        _error("interrupted")
        code = exit_codes.INTERRUPTED
    except Exception as exc:
        if _unreadable_store(exc):
            # A store whose header opened but whose data blocks cannot be read: cut short on
            # disk. Caught here, not where the store is opened: any later query may read a
            # broken block.
            _error(f"store unreadable (truncated or corrupt?): {exc}")
            code = exit_codes.BAD_INPUT
        else:
            traceback.print_exc()
            summary = " ".join(str(exc).split())[:500]
            _error(
                f"unexpected {type(exc).__name__}: {summary} (this is a gymflow bug: please "
                "report it with the traceback above)"
            )
            code = exit_codes.RUNTIME
    code = code if isinstance(code, int) else exit_codes.OK
    if ending.is_the_command():
        ending.exit_process(code)
    raise SystemExit(code)
