"""A resources server on another process or machine (`gym serve environment`), used by a run as if
it were the in-process one: the same methods, over the HTTP routes of `environments/asgi.py`.

Set `resources_url` in the eval config to use it, and `resources_key_env` to the variable
holding the server's access key (sent on every request but /health). The served environment
must be the run's
environment with the run's verifier parameters: the check is the verifier version the server
reports, so a server started with other parameters is refused before any rollout, instead of
quietly scoring the run under a different verifier."""

from __future__ import annotations

import os
from typing import Any, Literal, Protocol

import httpx
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
)

from gymflow.core.config import ConfigError, EvalConfig
from gymflow.core.errors import RuntimeFailure
from gymflow.core.protocols import (
    ACCESS_KEY_HEADER,
    SESSION_TOKEN_HEADER,
    ResourcesUnavailable,
    ToolError,
    ToolServerError,
    bearer,
)
from gymflow.core.records import Verification
from gymflow.core.statuses import VERIFY_ERROR
from gymflow.core.tasks import Task
from gymflow.environments.base import Environment
from gymflow.environments.resources import ResourcesServer

#: Generous: a verification can run a sandboxed program or ask a judge model.
TIMEOUT = httpx.Timeout(600.0, connect=10.0)


class ServedPlan(Protocol):
    """What serving a run needs of its plan (gymflow.rollouts.plan.RunPlan is one)."""

    @property
    def config(self) -> EvalConfig: ...

    @property
    def env(self) -> Environment: ...

    @property
    def split(self) -> str: ...

    @property
    def verifier_params(self) -> dict[str, Any]: ...

    @property
    def verifier_version(self) -> str: ...


def _access_headers(config: EvalConfig) -> dict[str, str]:
    """The access key header, from the variable `resources_key_env` names (empty when unset)."""
    key = os.environ.get(config.resources_key_env or "", "")
    return {ACCESS_KEY_HEADER: bearer(key)} if key else {}


def _refused_key(config: EvalConfig, url: str) -> str:
    """What to do about a served environment that refused the run's access key."""
    name = config.resources_key_env
    if not name:
        return (
            f"resources_key_env: {url} needs its access key, and the config names no variable "
            "holding it: export the key `gym serve environment` was given or wrote (its file) "
            "in a variable (e.g. RESOURCES_KEY) and set resources_key_env: RESOURCES_KEY"
        )
    if not os.environ.get(name):
        return (
            f"resources_key_env names {name}, which is not set here: export {name}=... (the "
            "served environment's access key, read at run time and never stored)"
        )
    return (
        f"resources_key_env: {url} refused the access key in {name}: it is not the key this "
        "server was started with (a restarted server without --key-env writes a new one)"
    )


def remote_problems(plan: ServedPlan, url: str) -> list[str]:
    """Why the server at `url` cannot serve this plan (empty when it can)."""
    try:
        health = httpx.get(
            f"{url.rstrip('/')}/health", headers=_access_headers(plan.config), timeout=10.0
        )
        health.raise_for_status()
        info = health.json()
    except (httpx.HTTPError, ValueError) as exc:
        return [f"resources_url: {url} does not answer /health: {exc}"]
    problems = []
    if info.get("environment") != plan.env.name:
        problems.append(
            f"resources_url: {url} serves environment {info.get('environment')!r}, "
            f"not {plan.env.name!r}"
        )
    elif info.get("verifier_version") != plan.verifier_version:
        problems.append(
            f"resources_url: {url} verifies with {info.get('verifier_version')}, the run with "
            f"{plan.verifier_version} (start it with the run's verifier parameters)"
        )
    if info.get("key_accepted") is False:
        problems.append(_refused_key(plan.config, url))
    return problems


class ServedVerdict(BaseModel):
    """A verification as `/verify` answers it (`environments/asgi.py`). Its `passed` is not
    read: pass or fail is decided on this side, by the run's environment."""

    model_config = ConfigDict(extra="ignore")
    verifier_version: StrictStr
    status: Literal["ok", "error"]
    reward: StrictFloat | StrictInt | None
    failure_kind: StrictStr | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class RemoteResourcesServer:
    """The resources protocol (core.protocols.Resources) over HTTP. Use inside one event loop;
    `aclose()` at the end."""

    def __init__(self, url: str, plan: ServedPlan) -> None:
        self.url = url.rstrip("/")
        self.env = plan.env
        self.split = plan.split
        self.verifier_version = plan.verifier_version
        # Tool schemas are the environment's code, which this side has too: no round trip.
        self._schemas = plan.env.resources_server(plan.verifier_params)
        self._config = plan.config
        self._http = httpx.AsyncClient(
            base_url=self.url, timeout=TIMEOUT, headers=_access_headers(plan.config)
        )
        self._tokens: dict[str, str] = {}  # session id -> the token its seed returned

    def tools(self) -> list[dict[str, Any]]:
        return self._schemas.tools()

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        return self._schemas.tools_for(task)

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        token = self._tokens.get(body.get("session_id", ""))
        headers = {SESSION_TOKEN_HEADER: token} if token else None
        try:
            response = await self._http.post(path, json=body, headers=headers)
        except httpx.TransportError as exc:  # stopped, restarting, a network gone
            raise ResourcesUnavailable(
                f"resources server {self.url}{path} unreachable: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code == 401:  # the key changed under the run (a restarted server)
            raise ResourcesUnavailable(f"{self.url}{path}: {_refused_key(self._config, self.url)}")
        if response.status_code >= 500:
            raise ResourcesUnavailable(
                f"resources server {self.url}{path} answered {response.status_code}: "
                f"{response.text[:200]}"
            )
        if response.status_code != 200:
            raise RuntimeFailure(
                f"resources server {self.url}{path} answered {response.status_code}: "
                f"{response.text[:200]}"
            )
        try:
            return response.json()
        except ValueError:  # a proxy's page, a truncated body: no answer the run can use
            raise ResourcesUnavailable(
                f"resources server {self.url}{path} answered 200 without JSON: "
                f"{response.text[:200]!r}"
            ) from None

    async def seed_session(self, task: Task) -> str:
        seeded = await self._post("/seed_session", {"task_id": task.task_id, "split": self.split})
        self._tokens[seeded["session_id"]] = seeded["session_token"]
        return seeded["session_id"]

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        result = await self._post(
            f"/tools/{name}", {"session_id": session_id, "arguments": arguments}
        )
        if result.get("crashed"):
            raise RuntimeFailure(result["output"])
        if result.get("server_error"):
            raise ToolServerError(str(result["server_error"]), output=result["output"])
        if result["error"]:
            raise ToolError(result["output"].removeprefix("error: "), output=result["output"])
        return result["output"]

    async def verify(
        self, session_id: str, task: Task, output_text: str, trajectory: list[dict[str, Any]]
    ) -> Verification:
        body = {
            "session_id": session_id,
            "output_text": output_text,
            "trajectory": trajectory,
            "close": False,
        }
        return self._checked(await self._post("/verify", body))

    def _checked(self, reply: Any) -> Verification:
        """The served verdict, judged here as an in-process one is (its reward against this
        environment's pass threshold, a reward that is no finite number a verifier error): a
        reply that is not a verdict, or one made under another verifier version, is a verifier
        error, never a score."""
        source = f"resources server {self.url}/verify"
        try:
            served = ServedVerdict.model_validate(reply)
        except ValidationError as exc:
            problem = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            return self._schemas.unjudged("bad_verify_reply", f"{source}: {problem}"[:500])
        if served.verifier_version != self.verifier_version:
            return self._schemas.unjudged(
                "bad_verify_reply",
                f"{source} verified with {served.verifier_version}, the run with "
                f"{self.verifier_version}",
            )
        if served.status == VERIFY_ERROR:
            kind = served.failure_kind or "verifier_error"
            version = self.verifier_version
            return Verification(version, VERIFY_ERROR, None, None, kind, served.details)
        return self._schemas.judged(
            served.reward, served.failure_kind, served.details, source=source
        )

    async def close_session(self, session_id: str) -> None:
        await self._post("/close_session", {"session_id": session_id})
        self._tokens.pop(session_id, None)

    async def aclose(self) -> None:
        await self._http.aclose()


def open_resources(plan: ServedPlan) -> ResourcesServer | RemoteResourcesServer:
    """The run's resources server: in-process, or the one at the config's `resources_url`."""
    url = plan.config.resources_url
    from gymflow.environments.nemo_gym.environment import NemoGymEnvironment

    if isinstance(plan.env, NemoGymEnvironment):  # its own server: the given one, or started
        return plan.env.resources_server(plan.verifier_params).open(url)
    if not url:
        return plan.env.resources_server(plan.verifier_params)
    problems = remote_problems(plan, url)
    if problems:
        raise ConfigError("\n".join(problems))
    return RemoteResourcesServer(url, plan)


async def close_resources(server: ResourcesServer | RemoteResourcesServer) -> None:
    aclose = getattr(server, "aclose", None)  # a served one, or a NeMo Gym server's client
    if aclose is not None:
        await aclose()
