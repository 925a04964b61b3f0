"""The command table: every `gym` command group and command, with the module that defines it
and its one-line summary. Read without importing any command's module, so `gym --help` and a
mistyped command list what exists at no cost (`gymflow.cli.main`)."""

from __future__ import annotations

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
    ("eval", "decide"): (
        "decide",
        "The next action as a tested hypothesis with its margin; --confirm runs its experiment.",
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
    ("eval", "migrate"): (
        "migrate",
        "Check a store an earlier gymflow sealed, in full, and seal it as this one does.",
    ),
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
    ("env", "prepare"): (
        "nemo_prepare",
        "Install NeMo Gym servers' own requirements into their venvs (cached).",
    ),
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
    ("runs", "pin"): (
        "runs",
        "Pin the baseline every gate under a root compares with, by its store's id.",
    ),
    ("study", "run"): ("study", "Run the baseline and every variant, then write study.html."),
}
