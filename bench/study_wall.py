"""A study's wall time against running its variants one by one.

The same baseline and four variants (another skill seed, another harness system prompt, another
prompt template, a verifier parameter), on arithmetic-smoke against the local policy server with
a fixed model latency, run two ways, each from a clean folder:
- `gym study run`: one command, one Prefect flow, the four inference arms concurrently, the
  verifier variant as a reverify of the baseline, the comparisons and the report;
- one by one: `gym eval run` for each inference arm in turn, `gym eval reverify` for the
  verifier variant, and `gym eval profile --compare` for each variant against the baseline.

    python bench/study_wall.py [--latency-ms 200] [--limit 50] [--repeats 4] [--variants ...]
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
import yaml

GYM = str(Path(sys.executable).parent / "gym")
PREFECT_HOME = Path.home() / ".cache" / "gymflow-bench" / "prefect-home"


#: The variants by name: three inference arms and one reverify.
VARIANTS = {
    "seed": {"model": {"skill_seed": 5}},
    "harness": {"harness": {"system_prompt": "Answer tersely."}},
    "prompt": {"prompt_template": "{{ question }}\nAnswer: <number>"},
    "loose": {"verifier_params": {"abs_tol": 1.5}},
}


def study(latency_ms: float, limit: int, repeats: int, variants: list[str]) -> dict:
    model = {"faults": {"latency_ms": latency_ms}}
    return {
        "name": "bench",
        "out": "study",
        "baseline": {
            "benchmark": "arithmetic-smoke",
            "limit": limit,
            "repeats": repeats,
            "model": model,
        },
        "variants": [{"name": name, "set": VARIANTS[name]} for name in variants],
    }


def run(command: list[str], cwd: Path, env: dict) -> None:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode not in (0, 2):  # 2: a health gate, not a failure of the command
        sys.exit(f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}")


def one_by_one(spec: dict, cwd: Path, env: dict) -> None:
    from gymflow.study.spec import StudySpec, resolve_study

    plan = resolve_study(StudySpec.model_validate(spec), "bench")
    for arm in (plan.baseline, *plan.variants):
        if arm.reverify_only:
            continue
        path = cwd / f"{arm.name}.yaml"
        path.write_text(yaml.safe_dump(arm.config.model_dump(mode="json", exclude_defaults=True)))
        run([GYM, "eval", "run", str(path)], cwd, env)
    base = plan.baseline.config.out
    for loose in (a for a in plan.variants if a.reverify_only):
        settings = [f"--set={k}={v}" for k, v in loose.config.verifier_params.items()]
        run([GYM, "eval", "reverify", base, *settings], cwd, env)
    for arm in plan.variants:
        if not arm.reverify_only:
            run([GYM, "eval", "profile", arm.config.out, "--compare", base], cwd, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--limit", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    # one inference arm and the reverify: each variant is two more `gym` processes, 4 CPU s each
    args = tiny.parse(parser, latency_ms=20.0, limit=5, repeats=2, variants=["seed", "loose"])
    spec = study(args.latency_ms, args.limit, args.repeats, args.variants)
    PREFECT_HOME.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PREFECT_HOME": str(PREFECT_HOME),
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_LOGGING_LEVEL": "WARNING",
           "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120"}  # fmt: skip
    figures = {}
    with tempfile.TemporaryDirectory(prefix="gymflow-study-") as tmp:
        for name in ("gym study run", "one by one"):
            cwd = Path(tmp) / name.replace(" ", "-")
            cwd.mkdir()
            started = time.perf_counter()
            if name == "gym study run":
                (cwd / "study.yaml").write_text(yaml.safe_dump(spec))
                run([GYM, "study", "run", "study.yaml"], cwd, env)
            else:
                one_by_one(spec, cwd, env)
            figures[name] = time.perf_counter() - started
    reverify = sum("verifier_params" in VARIANTS[name] for name in args.variants)
    print(
        f"study wall time: baseline + {len(args.variants)} variants ({reverify} reverify), "
        f"arithmetic-smoke {args.limit} tasks x {args.repeats}, "
        f"model latency {args.latency_ms:g} ms, {os.cpu_count()} cores (shared machine: noisy)"
    )
    for name, seconds in figures.items():
        print(f"{name:<16}{seconds:>8.1f} s")
    print(f"one by one / study: {figures['one by one'] / figures['gym study run']:.2f}x")


if __name__ == "__main__":
    main()
