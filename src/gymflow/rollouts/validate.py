"""`gym env validate`: check an eval config before spending compute, reporting every problem.

Checks run in order and each one that can run does, even when an earlier one failed: a schema
error in one field does not hide a broken prompt template, and a broken template does not hide bad
verifier parameters. Nothing is written: no store, no run directory, no Prefect state."""

from __future__ import annotations

import asyncio
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from gymflow.core.config import ConfigError, EvalConfig, load_config_file, missing_api_key
from gymflow.core.errors import UserError
from gymflow.core.prompts import PromptError, render_prompt
from gymflow.core.protocols import SESSION_TOKEN_HEADER
from gymflow.environments.nemo_gym.environment import NemoGymEnvironment
from gymflow.environments.registry import (
    BENCHMARKS_VARIABLE,
    RegistryError,
    load_benchmark,
    load_environment,
    on_search_path,
)
from gymflow.rollouts.plan import VERIFIER_PROBLEM, RunPlan, build_plan, plan_problems


@dataclass
class ValidationReport:
    source: str
    passed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "passed": self.passed,
            "problems": self.problems,
        }


def _schema(data: dict[str, Any], source: str, report: ValidationReport) -> EvalConfig | None:
    """Validate; on errors, record each one and retry without the offending top-level keys, so
    the remaining checks still run on what is usable."""
    data = dict(data)
    for _ in range(len(data) + 1):
        try:
            config = EvalConfig.model_validate(data)
        except ValidationError as exc:
            bad = set()
            for item in exc.errors():
                where = ".".join(str(p) for p in item["loc"]) or "(top level)"
                message = f"{source}: {where}: {item['msg']}"
                if message not in report.problems:
                    report.problems.append(message)
                if item["loc"]:
                    bad.add(item["loc"][0])
            if not bad & data.keys():
                return None
            data = {k: v for k, v in data.items() if k not in bad}
            continue
        if not report.problems:
            report.passed.append("config schema")
        return config
    return None


def _dataset_rows(config: EvalConfig, report: ValidationReport) -> bool:
    """A dataset benchmark's rows: read, mapped and type-checked against the verifier, each
    problem naming the file, the rows and the field. False when the rows cannot make a plan."""
    from gymflow.environments.dataset.environment import DatasetEnvironment
    from gymflow.environments.dataset.readers import DatasetError

    try:
        benchmark = load_benchmark(config.benchmark) if config.benchmark else None
        env = load_environment(benchmark.environment) if benchmark and benchmark.dataset else None
    except RegistryError:
        return True  # build_plan names it
    if not isinstance(env, DatasetEnvironment):
        return True
    try:
        loaded = env.load()
    except (DatasetError, KeyError) as exc:
        report.problems.extend(getattr(exc, "problems", [str(exc).strip(chr(34))]))
        return False
    if loaded.problems:
        report.problems.extend(loaded.problems)
        return False
    fields = env.spec.fields if env.spec else None
    reads = ", ".join(f"{name} <- {path}" for name, path in env.rules().verifier_map.items())
    report.passed.append(
        f"dataset {loaded.source}: {len(loaded.tasks)} rows; every mapped field present, with "
        f"the type {env.manifest.verifier.name} reads ({reads}); task ids from "
        f"{'field ' + repr(fields.id) if fields and fields.id else 'a hash of each row'}"
    )
    first = loaded.tasks[0]
    template = config.prompt_template or benchmark.prompt_template or env.manifest.prompt_template
    try:
        shown = render_prompt(template, first.inputs)
    except PromptError:
        pass  # every row's rendering is checked, and reported, with the plan
    else:
        report.passed.append(f"first row ({loaded.wheres[0]}) renders as {shown[:80]!r}")
    report.passed.append(env.simulation())
    return True


def _dataset(config: EvalConfig, plan: RunPlan, source: str, report: ValidationReport) -> bool:
    """Rows through the template, and verifier parameters; True when the verifier is usable."""
    row_problems, verifier_ok = [], True
    for problem in plan_problems(plan, config_source=source):
        if problem.startswith(VERIFIER_PROBLEM):
            report.problems.append(f"{source}: {problem}")
            verifier_ok = False
        else:
            row_problems.append(problem)
    report.problems.extend(row_problems)
    if not row_problems:
        report.passed.append(
            f"{len(plan.all_tasks)} rows of {plan.env.name}/{plan.split} render through the "
            "prompt template"
        )
    if verifier_ok:
        report.passed.append(f"verifier parameters ({plan.verifier_version})")
    return verifier_ok


def _harness(plan: RunPlan, source: str, report: ValidationReport) -> None:
    from gymflow.harness.base import get_harness

    try:
        get_harness(plan.harness)
    except RegistryError as exc:
        report.problems.append(f"{source}: harness.name: {str(exc).strip(chr(34))}")
    else:
        report.passed.append(f"harness {plan.harness!r}")


def _agent(plan: RunPlan, source: str, report: ValidationReport) -> None:
    """Harness `command`: its agent recipe, installed; and every workspace task, one the chosen
    sandbox can honour (each refusal names the task and the reason)."""
    from gymflow.environments.workspace.environment import WorkspaceEnvironment
    from gymflow.harness.command import recipe_of

    workspace = isinstance(plan.env, WorkspaceEnvironment)
    if plan.harness != "command":
        if workspace:
            report.problems.append(
                f"{source}: harness.name: {plan.harness!r} cannot run workspace tasks; "
                "use `command` with an agent"
            )
        return
    harness = plan.config.harness
    try:
        missing = recipe_of(harness).missing()
    except UserError as exc:
        report.problems.append(f"{source}: {exc}")
    else:
        if missing:
            report.problems.append(f"{source}: harness.agent {harness.agent!r}: {missing}")
        else:
            report.passed.append(f"agent {harness.agent_version}")
    if not workspace:
        report.problems.append(
            f"{source}: harness `command` runs workspace tasks; {plan.env.name!r} has none"
        )
        return
    try:
        problems = plan.env.task_problems(harness.sandbox)
    except UserError as exc:
        problems = [str(exc)]
    report.problems.extend(f"{source}: {problem}" for problem in problems)
    if not problems:
        report.passed.append(
            f"{len(plan.all_tasks)} workspace tasks valid, each runnable in the "
            f"{harness.sandbox} sandbox"
        )


async def _health(plan: RunPlan) -> str:
    """Start the environment's resources server (its ASGI app, in-process), ask /health, and
    seed, verify and close one session, as a run would."""
    from gymflow.environments.asgi import create_app

    server = plan.env.resources_server(plan.verifier_params)
    transport = httpx.ASGITransport(app=create_app(server))
    async with httpx.AsyncClient(transport=transport, base_url="http://resources") as client:
        health = await client.get("/health")
        health.raise_for_status()
        if plan.all_tasks:
            task = plan.all_tasks[0]
            seeded = await client.post(
                "/seed_session", json={"task_id": task.task_id, "split": plan.split}
            )
            seeded.raise_for_status()
            session = seeded.json()
            verified = await client.post(
                "/verify",
                json={"session_id": session["session_id"], "output_text": ""},
                headers={SESSION_TOKEN_HEADER: session["session_token"]},
            )
            verified.raise_for_status()
    return f"resources server starts and answers /health ({health.json()['environment']})"


def _nemo_gym_routes(plan: RunPlan, report: ValidationReport) -> None:
    """A NeMo Gym environment's server, given or started, has the routes its rows need."""
    if not plan.config.resources_url and plan.env.refusals(plan.verifier_params):
        return  # said with the plan's problems; nothing to start
    server = plan.env.resources_server(plan.verifier_params)
    try:
        server.open(plan.config.resources_url)
        problems = server.route_problems(list(plan.all_tasks))
    except UserError as exc:  # it did not start: its log says why
        problems = [str(exc)]
    finally:
        server.close()
    report.problems.extend(problems)
    if not problems:
        report.passed.append(f"NeMo Gym server at {server.url} has every route the rows need")


def _resources(plan: RunPlan, report: ValidationReport) -> None:
    if isinstance(plan.env, NemoGymEnvironment):
        _nemo_gym_routes(plan, report)
        return
    url = plan.config.resources_url
    if url:
        from gymflow.environments.remote import remote_problems

        problems = remote_problems(plan, url)
        report.problems.extend(problems)
        if not problems:
            report.passed.append(f"resources server at {url} answers /health ({plan.env.name})")
        return
    try:
        report.passed.append(asyncio.run(_health(plan)))
    except Exception as exc:
        report.problems.append(
            f"resources server of {plan.env.name!r} failed: {type(exc).__name__}: {exc}"
        )


async def _ask(plan: RunPlan, base_url: str) -> str:
    from gymflow.models.client import ResponsesClient
    from gymflow.models.responses import output_text, user_message

    model = plan.config.model.model_copy(update={"max_retries": 1})
    sampling = plan.sampling.model_copy(update={"max_output_tokens": 16})
    prompt = next(iter(plan.prompts.values()), "Reply with OK.")  # the first row that renders
    async with ResponsesClient(model, base_url, sampling, concurrency=1) as client:
        outcome = await client.create([user_message(prompt)], tools=None, call_index=0, seed=0)
    if outcome.error is not None:
        raise RuntimeError(f"{outcome.error.kind}: {outcome.error}")
    reply = output_text(outcome.response["output"]) or "(tool calls)"
    return f"model {model.name!r} at {base_url} answers ({reply[:40]!r})"


def _ping(plan: RunPlan, report: ValidationReport) -> None:
    from gymflow.simulated.endpoint import model_endpoint

    missing = missing_api_key(plan.config.model)
    if missing:  # the ping would go without the key `gym eval run` then refuses to run without
        report.problems.append(missing)
        return

    try:
        with model_endpoint(plan) as base_url:
            report.passed.append(asyncio.run(_ask(plan, base_url)))
    except Exception as exc:
        model = plan.config.model
        where = model.base_url or "the local policy server"
        report.problems.append(f"model: ping of {model.name!r} at {where} failed: {exc}")


def _failing_file(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return exc.filename
    frames = traceback.extract_tb(exc.__traceback__)
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "unknown file"


def validate_config(path: Path, *, ping: bool = False) -> ValidationReport:
    source = str(path)
    report = ValidationReport(source)
    try:
        data = load_config_file(path)
    except ConfigError as exc:
        report.problems.append(str(exc))
        return report
    if not isinstance(data, dict):
        report.problems.append(f"{source}: expected a mapping of config keys")
        return report
    if _is_benchmark_file(path, data):
        # A benchmark definition, not an eval config: check the config that runs it, with the
        # folder holding its benchmarks/ on the benchmark path (as a user would put it). Only
        # on that one: the file may lie in a run folder (`gym data select`), whose other
        # folders are no environments whose code runs here.
        root = path.resolve().parent.parent
        report.passed.append(
            f"{source}: a benchmark definition; checked as the config `benchmark: {path.stem}` "
            f"with {BENCHMARKS_VARIABLE}={root}"
        )
        with on_search_path(root, benchmarks_only=True):
            return _validate({"benchmark": path.stem}, source, report, ping)
    return _validate(data, source, report, ping)


def _is_benchmark_file(path: Path, data: dict[str, Any]) -> bool:
    """A YAML in a `benchmarks/` folder, named by its `name:`: where the registry finds
    benchmarks, and the key an eval config does not have."""
    return path.parent.name == "benchmarks" and "name" in data and "benchmark" not in data


def _validate(
    data: dict[str, Any], source: str, report: ValidationReport, ping: bool
) -> ValidationReport:
    config = _schema(data, source, report)
    if config is None or not _dataset_rows(config, report):
        return report
    try:
        plan = build_plan(config)
    except ConfigError as exc:
        report.problems.append(f"{source}: {exc}")
        return report
    except Exception as exc:  # the environment's own code failed to import or to make its tasks
        target = config.environment or config.benchmark
        report.problems.append(
            f"{source}: environment of {target!r} does not load ({_failing_file(exc)}): "
            f"{type(exc).__name__}: {exc}"
        )
        return report
    verifier_ok = _dataset(config, plan, source, report)
    _harness(plan, source, report)
    _agent(plan, source, report)
    if verifier_ok:  # the server cannot start with parameters its verifier rejects
        _resources(plan, report)
    if ping:
        _ping(plan, report)
    return report
