"""A NeMo Gym resources server as a run's resources: its routes, called as NeMo Gym's agents call
them, and its verdicts judged on gymflow's side.

Per rollout: `POST /seed_session` with the row, then each tool call as `POST /<tool>` with the
call's arguments as the body, then `POST /verify` with the row's fields, its
`responses_create_params` and the whole rollout as one Responses `response` (every output item
after the input, as NeMo Gym's simple agent builds it). The server's session middleware keeps
the rollout's state under a cookie, so each rollout has a cookie jar of its own; the HTTP
client keeps none, or rollouts running at once would share a session.

What each answer means here:
- a tool route's answer body, whatever its status, is the tool's output the model reads, as
  NeMo Gym's simple agent hands it on and goes on (so rewards are NeMo Gym's): a 2xx is the
  tool's answer; a 4xx (NeMo Gym's 422 for arguments its model rejects) is a tool error the
  model caused (`counters.tool_errors`); a 500 is the tool's server failing
  (`ToolServerError`): the rollout goes on to `/verify`, and the failure is kept as what it
  is, its route, status and the tail of the server's log in the rollout's `error` and
  `counters.tool_server_errors` (`gym eval health`'s `tool_server_error`, `gym eval
  diagnose`'s `tool_error` / `tool_server_error`); no answer, 502-504 or a body that is no
  JSON where JSON is due is `resources_unavailable` (`--resume` runs it again);
- `/verify` answering a finite `reward` is judged by this environment's pass threshold (the
  server's own fields are kept as details); no reward, a reward that is no finite number, a 4xx
  (the row's fields do not fit the server's verify request) or a 500 are verifier errors, never
  a score."""

from __future__ import annotations

import asyncio
import http.cookiejar
import itertools
import json
import os
import time
from pathlib import Path
from typing import Any, Protocol

import httpx

from gymflow.core import progress
from gymflow.core.config import ConfigError
from gymflow.core.errors import RuntimeFailure
from gymflow.core.protocols import ResourcesUnavailable, ToolError, ToolServerError
from gymflow.core.records import Verification
from gymflow.core.tasks import Task
from gymflow.core.written import written
from gymflow.environments.dataset.mapping import row_input_items
from gymflow.environments.manifest import Described
from gymflow.environments.nemo_gym.folder import NemoServer
from gymflow.environments.resources import ResourcesServer
from gymflow.models.nemo_gym_shapes import nemo_request, nemo_response
from gymflow.models.nemo_gym_shapes import usage as _usage
from gymflow.store.queries.exports import scored_verdicts
from gymflow.verifiers.base import VerifyInput

#: Generous: a verification can run code or ask a judge.
TIMEOUT = httpx.Timeout(600.0, connect=10.0)
#: How long one `/verify` may take before its rollout is a `verifier_timeout`, and how often a
#: slow one says what it waits on; the variable sets another bound.
VERIFY_BOUND_VARIABLE = "GYMFLOW_NEMO_GYM_VERIFY_TIMEOUT_S"
VERIFY_BOUND_S = 300.0
SLOW_NOTICE_S = 30.0
#: The header naming the rollout of a `/verify`, passed on to the judge (serve_app.py).
ROLLOUT_HEADER = "x-gymflow-rollout"
#: Reply fields that are the request echoed back, not the verifier's own.
ECHOED = ("reward", "response", "responses_create_params")
#: Where a run keeps the server's own `/aggregate_metrics` answer, beside its report.
METRICS_FILE = "nemo_gym_metrics.json"
#: Statuses of a server in the way (a proxy, a restart) rather than one that answered.
UNAVAILABLE = (502, 503, 504)


class _NoJar(http.cookiejar.CookieJar):
    """The client's jar, which keeps nothing: each rollout sends its own session's cookies.
    A jar, not an `httpx.Cookies`: httpx copies a `Cookies` it is given into a plain one (so a
    subclass's override is lost and the client kept the first session's cookie, sending it
    with the next rollout's `/seed_session`), and keeps a `CookieJar` as it is."""

    def extract_cookies(self, response, request) -> None:
        return None

    def set_cookie(self, cookie) -> None:
        return None


def verify_body(task: Task, trajectory: list[dict[str, Any]]) -> dict[str, Any]:
    """The `/verify` request NeMo Gym's agents send: the row, and the rollout as one response."""
    row = task.data
    request = nemo_request(row.get("responses_create_params") or {})
    items = list(task.input_items or row_input_items(row))  # a stored task keeps only its row
    opening = len(items)
    if list(trajectory[:opening]) != items:
        opening += 1  # the harness's system prompt went first (harness.base.opening_items)
    incomplete = any(item.get("status") == "incomplete" for item in trajectory[opening:])
    response = nemo_response(
        f"resp_{task.task_id}",
        request,
        trajectory[opening:],
        model=str(request.get("model") or "policy"),
        created_at=time.time(),
        incomplete=incomplete,
        usage=None,
    )
    return {**row, "response": response}


def declared_reward_range(openapi: dict[str, Any]) -> tuple[float, float] | None:
    """The bounds the server's `/verify` answer declares on `reward` in its OpenAPI document
    (`minimum`/`maximum`), or None: NeMo Gym 0.4.0's `BaseVerifyResponse` declares none."""
    try:
        answer = openapi["paths"]["/verify"]["post"]["responses"]["200"]["content"]
        ref = answer["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        reward = openapi["components"]["schemas"][ref]["properties"]["reward"]
    except (KeyError, TypeError, AttributeError):
        return None
    low, high = reward.get("minimum"), reward.get("maximum")
    if isinstance(low, int | float) and isinstance(high, int | float):
        return float(low), float(high)
    return None


#: Where NeMo Gym's MCPResourcesServer serves its tools (streamable HTTP, one token a session).
MCP_ROUTE = "/mcp"
#: What an MCP client accepts of NeMo Gym's MCP route (streamable HTTP, JSON answers).
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
MCP_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-03-26",
        "capabilities": {},
        "clientInfo": {"name": "gymflow", "version": "0"},
    },
}


class ServerEnvironment(Described, Protocol):
    """What these resources read of their environment (`environment.NemoGymEnvironment`, which
    imports this module): its NeMo Gym server and why it cannot start."""

    server: NemoServer

    def refusals(self, verifier_params: dict[str, Any]) -> list[str]: ...


class NemoGymResources(ResourcesServer):
    """The resources protocol (core.protocols.Resources) over a NeMo Gym server's routes. `open`
    it (a URL, or start the environment's server) before use; `aclose()` at the end."""

    env: ServerEnvironment

    def __init__(self, env, verifier_params: dict[str, Any] | None = None) -> None:
        super().__init__(env, verifier_params)
        self.url = ""
        self._process = None
        self._http: httpx.AsyncClient | None = None
        self._jars: dict[str, dict[str, str]] = {}
        self._session_ids = itertools.count()
        self._judge = None
        self.declared_range: tuple[float, float] | None = None
        #: the tools the server serves over MCP (name -> a Responses function tool), and each
        #: session's MCP headers (its signed session token) from its `/seed_session` answer
        self._mcp_tools: dict[str, dict[str, Any]] = {}
        self._mcp_headers: dict[str, dict[str, str]] = {}
        self._mcp_ids = itertools.count(1)

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self, url: str | None) -> NemoGymResources:
        """Use the server at `url`, or start the environment's own (launch.py)."""
        if url:
            self.url = url.rstrip("/")
        else:
            from gymflow.environments.nemo_gym.launch import ServerProcess
            from gymflow.environments.nemo_gym.prepare import prepare

            server = self.env.server
            refused = self.env.refusals({"judge": self.params.judge})
            if refused:
                raise ConfigError("\n".join(refused))
            python = prepare(server, say=progress.say).python  # cached after the first time
            judge_url = ""
            if self.params.judge is not None:
                from gymflow.environments.nemo_gym.judge import JudgeServer

                self._judge = JudgeServer(self.params.judge)
                judge_url = self._judge.start()
            self._process = ServerProcess(server, judge_url=judge_url, python=python)
            try:
                self.url = self._process.start()
            except BaseException:
                self.close()
                raise
        routes = self.routes()  # empty when it cannot be asked: its calls then say why
        missing = sorted({"/seed_session", "/verify"} - routes) if routes else []
        if missing:
            self.close()
            raise ConfigError(
                f"NeMo Gym server {self.env.server.name} has no POST route {', '.join(missing)} "
                f"(it has {', '.join(sorted(routes))}): gymflow drives a server "
                "as NeMo Gym's simple agent does (/seed_session, tools, /verify); a "
                "gymnasium-style server (/reset, /step) needs NeMo Gym's gymnasium_agent"
            )
        if self._serves_mcp():
            self._mcp_tools = self._list_mcp_tools()
        self.declared_range = declared_reward_range(self._openapi())
        return self

    def _openapi(self) -> dict[str, Any]:
        try:
            document = httpx.get(f"{self.url}/openapi.json", timeout=10.0).json()
        except (httpx.HTTPError, ValueError):
            return {}
        return document if isinstance(document, dict) else {}

    def log_tail(self) -> str:
        """The end of the server's log, when gymflow started it."""
        return self._process.log_tail() if self._process is not None else ""

    def routes(self) -> set[str]:
        """The POST routes the server's OpenAPI document lists; empty when it lists none."""
        paths = self._openapi().get("paths")
        return {p for p, ops in (paths or {}).items() if isinstance(ops, dict) and "post" in ops}

    def route_problems(self, tasks: list[Task]) -> list[str]:
        """What a run would miss on this server: `/seed_session`, `/verify` and a POST route
        for every tool the tasks offer (`gym env validate`)."""
        routes = self.routes()
        if not routes:
            return [f"{self.url}/openapi.json lists no routes: not a NeMo Gym resources server?"]
        wanted = {"/seed_session", "/verify"} | {
            f"/{tool['name']}" for task in tasks for tool in task.tools if "name" in tool
        }
        missing = sorted(wanted - routes)
        return [f"NeMo Gym server {self.url} has no POST route {', '.join(missing)}"] * bool(
            missing
        )

    def _list_mcp_tools(self) -> dict[str, dict[str, Any]]:
        """The server's MCP tools (`tools/list`) as Responses function tools, as NeMo Gym's
        claude_code_agent finds them. Raises ConfigError when the server does not list them:
        its rollouts would run without their tools, and their rewards say nothing of the model."""
        try:
            reply = httpx.post(
                f"{self.url}{MCP_ROUTE}",
                json={"jsonrpc": "2.0", "id": 0, "method": "tools/list", "params": {}},
                headers=MCP_HEADERS,
                timeout=10.0,
            )
            listed = reply.json()["result"]["tools"]
            tools = {
                str(tool["name"]): {
                    "type": "function",
                    "name": str(tool["name"]),
                    "description": str(tool.get("description") or ""),
                    "parameters": tool.get("inputSchema") or {"type": "object", "properties": {}},
                    "strict": False,
                }
                for tool in listed
            }
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            self.close()
            raise ConfigError(
                f"NeMo Gym server {self.env.server.name} serves its tools over MCP ({MCP_ROUTE}) "
                f"and did not list them (tools/list: {type(exc).__name__}: {exc}): its rollouts "
                "would run without their tools"
            ) from None
        return tools

    def _serves_mcp(self) -> bool:
        """Whether MCP_ROUTE answers an MCP `initialize` as an MCP server does: NeMo Gym mounts
        it beside its routes, outside its OpenAPI document, so only asking tells."""
        try:
            reply = httpx.post(
                f"{self.url}{MCP_ROUTE}", json=MCP_INITIALIZE, headers=MCP_HEADERS, timeout=5.0
            )
        except httpx.HTTPError:
            return False
        text = reply.text
        return reply.status_code == 200 and '"jsonrpc"' in text and "capabilities" in text

    def reverify_mode(self) -> str:
        """What the server says of judging stored rollouts again (`GET /reverify_mode`, NeMo
        Gym after 0.4): `stateless`, or `unknown` when it does not say (0.4.0 servers)."""
        try:
            reply = httpx.get(f"{self.url}/reverify_mode", timeout=10.0)
            return str(reply.json()) if reply.status_code == 200 else "unknown"
        except (httpx.HTTPError, ValueError):
            return "unknown"

    def reverify_refusal(self, resources_url: str | None) -> str | None:
        """Only a server that says its verifier is stateless judges stored rollouts again: the
        run's server (`resources_url`) when it still answers, else this environment's, started."""
        if not self.url:
            self.open(resources_url if resources_url and self._answers(resources_url) else None)
        mode = self.reverify_mode()
        if mode == "stateless":
            return None
        return (
            f"NeMo Gym server {self.env.server.name} answers reverify mode {mode!r} "
            f"(GET {self.url}/reverify_mode): only a stateless verifier judges stored rollouts, "
            "which hold no session state"
        )

    @staticmethod
    def _answers(url: str) -> bool:
        try:
            return httpx.get(f"{url.rstrip('/')}/openapi.json", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        if self._process is not None:
            self._process.stop()
            self._process = None
        if self._judge is not None:
            self._judge.stop()
            self._judge = None

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self.close()

    # -- tools and sessions --------------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return []

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        """The row's tools, as given, and the tools the server serves over MCP (the rows of an
        MCP server offer none: NeMo Gym's agent finds them there)."""
        given = list(task.tools)
        named = {tool.get("name") for tool in given}
        return given + [tool for name, tool in self._mcp_tools.items() if name not in named]

    async def _post(self, session_id: str, path: str, body: Any) -> httpx.Response:
        if self._http is None:
            self._http = httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT, cookies=_NoJar())
        jar = self._jars.setdefault(session_id, {})
        headers = {ROLLOUT_HEADER: session_id}
        if jar:
            headers["cookie"] = "; ".join(f"{k}={v}" for k, v in jar.items())
        try:
            response = await self._http.post(path, json=body, headers=headers)
        except httpx.TransportError as exc:
            raise ResourcesUnavailable(
                f"NeMo Gym server {self.url}{path} unreachable: {type(exc).__name__}: {exc}"
            ) from None
        if response.status_code in UNAVAILABLE:
            raise ResourcesUnavailable(
                f"NeMo Gym server {self.url}{path} answered {response.status_code}: "
                f"{response.text[:200]}"
            )
        jar.update(response.cookies)  # the session middleware sends it on every answer
        return response

    async def seed_session(self, task: Task) -> str:
        session_id = f"s{next(self._session_ids)}"
        response = await self._post(session_id, "/seed_session", task.data)
        if response.status_code != 200:
            self._jars.pop(session_id, None)
            raise RuntimeFailure(
                f"NeMo Gym server {self.url}/seed_session answered {response.status_code}: "
                f"{response.text[:300]}"
            )
        if self._mcp_tools:  # its MCP token: NeMo Gym's MCPServerMetadata under `mcp`
            try:
                headers = response.json()["mcp"]["headers"]
                self._mcp_headers[session_id] = {str(k): str(v) for k, v in headers.items()}
            except (ValueError, KeyError, TypeError, AttributeError):
                pass  # a tool call then says the server gave no token
        return session_id

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        if name in self._mcp_tools:
            return await self._call_mcp(session_id, name, arguments)
        response = await self._post(session_id, f"/{name}", arguments)
        status, body = response.status_code, response.text
        if 200 <= status < 300:
            return body
        if 400 <= status < 500:
            raise ToolError(f"{status}: {body[:2000]}", output=body)
        tail = self.log_tail()
        raise ToolServerError(
            f"tool route {self.url}/{name} answered {status}: {body[:300]}"
            + (f"\nthe server's log ends:\n{tail}" if tail else ""),
            output=body,
        )

    async def _call_mcp(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        """An MCP `tools/call` with the session's token, as NeMo Gym's agents call it: the
        result's text is the tool's output; an error result goes back to the model."""
        if session_id not in self._mcp_headers:
            raise RuntimeFailure(
                f"NeMo Gym server {self.url}/seed_session gave no MCP session token "
                "(`mcp.headers`): its MCP tools cannot be called for this rollout"
            )
        if self._http is None:
            self._http = httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT, cookies=_NoJar())
        call = {"jsonrpc": "2.0", "id": next(self._mcp_ids), "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}  # fmt: skip
        try:
            response = await self._http.post(
                MCP_ROUTE, json=call, headers={**MCP_HEADERS, **self._mcp_headers[session_id]}
            )
            reply = response.json()
        except httpx.TransportError as exc:
            raise ResourcesUnavailable(
                f"NeMo Gym server {self.url}{MCP_ROUTE} unreachable: {type(exc).__name__}: {exc}"
            ) from None
        except ValueError:
            reply = None
        result = reply.get("result") if isinstance(reply, dict) else None
        if not isinstance(result, dict):
            error = reply.get("error") if isinstance(reply, dict) else response.text[:300]
            raise RuntimeFailure(
                f"MCP tool {name} ({self.url}{MCP_ROUTE}) answered {response.status_code}: "
                f"{str(error)[:300]}"
            )
        text = "\n".join(
            str(part.get("text", ""))
            for part in result.get("content") or ()
            if isinstance(part, dict) and part.get("type") == "text"
        )
        if result.get("isError"):
            raise ToolError(text[:2000])
        return text

    async def close_session(self, session_id: str) -> None:
        self._jars.pop(session_id, None)
        self._mcp_headers.pop(session_id, None)

    def final_state(self, session_id: str) -> dict[str, Any] | None:
        return None  # the server holds it

    # -- NeMo Gym's own metrics ----------------------------------------------------------------
    async def store_aggregate(self, con, run_dir: Path) -> None:
        """The server's `/aggregate_metrics` over every scored rollout in the store, written to
        `RUN/nemo_gym_metrics.json` (its own figures, beside gymflow's profile): each verdict as
        NeMo Gym strips it for aggregation, the row's fields and the verifier's with the reward
        and the usage. A server that cannot aggregate leaves its error in the file; the run's
        own results do not depend on it."""
        entries = [
            {
                **{
                    k: v
                    for k, v in json.loads(data or "{}").items()
                    if k != "responses_create_params"
                },
                **json.loads(details or "{}"),
                "_ng_task_index": task_index,
                "_ng_rollout_index": repeat,
                "reward": reward,
                "response": {"usage": _usage(input_tokens, output_tokens)},
            }
            for task_index, repeat, data, reward, details, input_tokens, output_tokens in (
                scored_verdicts(con, self.verifier_version)
            )
        ]
        if not entries:
            return
        try:
            response = await self._post("", "/aggregate_metrics", {"verify_responses": entries})
            answer = (
                response.json()
                if response.status_code == 200
                else {
                    "error": f"/aggregate_metrics answered {response.status_code}: "
                    f"{response.text[:500]}"
                }
            )
        except (ResourcesUnavailable, ValueError) as exc:
            answer = {"error": str(exc)[:500]}
        with written(run_dir / METRICS_FILE) as (partial,):
            partial.write_text(
                json.dumps(
                    {"verifier_version": self.verifier_version, "rollouts": len(entries), **answer},
                    indent=2,
                )
            )

    # -- verification --------------------------------------------------------------------------
    async def verify(
        self, session_id: str, task: Task, output_text: str, trajectory: list[dict[str, Any]]
    ) -> Verification:
        """The server's `/verify`, bounded (VERIFY_BOUND_S); one that is slow says every
        SLOW_NOTICE_S (a third of the bound, when shorter) to whoever watches the run
        (`progress.say`) what it waits on: the server, the task, the judge's calls so far
        and the last line of the server's log."""
        bound = float(os.environ.get(VERIFY_BOUND_VARIABLE) or VERIFY_BOUND_S)
        every = min(SLOW_NOTICE_S, bound / 3)
        call = asyncio.ensure_future(
            self._post(session_id, "/verify", verify_body(task, trajectory))
        )
        started = time.monotonic()
        try:
            while True:
                left = bound - (time.monotonic() - started)
                done, _ = await asyncio.wait({call}, timeout=min(every, max(left, 0)))
                if done:
                    break
                if time.monotonic() - started >= bound:
                    call.cancel()
                    self._take_judge_calls(session_id)
                    return self.unjudged(
                        "verifier_timeout",
                        f"NeMo Gym server {self.env.server.name} {self.url}/verify gave no answer "
                        f"in {bound:.0f} s ({VERIFY_BOUND_VARIABLE} sets the bound); "
                        f"{self._waiting_on(session_id)}",
                    )
                progress.say(
                    f"NeMo Gym server {self.env.server.name}: /verify of task "
                    f"{task.task_id} has waited {time.monotonic() - started:.0f} s of "
                    f"{bound:.0f}; {self._waiting_on(session_id)}"
                )
        finally:
            if not call.done():
                call.cancel()
        judge_calls = self._take_judge_calls(session_id)
        verdict = self.judge_reply(task, call.result())
        if judge_calls:
            failed = [c for c in judge_calls if c["status"] != "ok"]
            if failed:
                return self.unjudged(
                    "judge_failed",
                    f"the judge {failed[0]['judge']} failed on {len(failed)} of "
                    f"{len(judge_calls)} calls: {failed[0]['error']}",
                )
            verdict.details = {**verdict.details, "judge_calls": judge_calls}
        return verdict

    def _take_judge_calls(self, session_id: str) -> list[dict[str, Any]]:
        return self._judge.endpoint.take(session_id) if self._judge is not None else []

    def _waiting_on(self, session_id: str) -> str:
        if self._judge is not None:
            asked = self._judge.endpoint.count(session_id)
            judge = f"its judge has answered {asked} calls for it; "
        else:
            judge = "no judge is configured; "
        lines = self.log_tail().splitlines()
        return judge + (f"the server's log ends: {lines[-1][:300]}" if lines else "")

    def verify_sync(self, inp: VerifyInput) -> Verification:
        """A stored rollout judged again (reverify): no session, so only for a server that
        says its verifier is stateless."""
        try:
            response = httpx.post(
                f"{self.url}/verify", json=verify_body(inp.task, inp.trajectory), timeout=TIMEOUT
            )
        except httpx.TransportError as exc:
            return self.unjudged("resources_unavailable", f"{self.url}/verify: {exc}")
        return self.judge_reply(inp.task, response)

    def judged(
        self, reward: object, failure_kind: str | None, details: dict[str, Any], *, source: str
    ) -> Verification:
        """As every environment judges, against the range the server declares when it declares
        one (read before the first rollout), else the manifest's (folder.reward_range)."""
        verdict = super().judged(reward, failure_kind, details, source=source)
        if self.declared_range is not None and verdict.reward is not None:
            low, high = self.declared_range
            verdict.details.pop("out_of_range", None)
            if not low <= verdict.reward <= high:
                verdict.details["out_of_range"] = True
        return verdict

    def judge_reply(self, task: Task, response: httpx.Response) -> Verification:
        source = f"NeMo Gym server {self.url}/verify"
        if response.status_code != 200:
            kind = "bad_verify_request" if response.status_code < 500 else "verifier_error"
            tail = self.log_tail() if response.status_code >= 500 else ""
            return self.unjudged(
                kind,
                f"{source} answered {response.status_code}: {response.text[:500]}"
                + (f"\nthe server's log ends:\n{tail}" if tail else ""),
            )
        try:
            reply = response.json()
        except ValueError:
            raise ResourcesUnavailable(
                f"{source} answered 200 without JSON: {response.text[:200]!r}"
            ) from None
        if not isinstance(reply, dict) or "reward" not in reply:
            shape = sorted(reply)[:20] if isinstance(reply, dict) else type(reply).__name__
            return self.unjudged("bad_verify_reply", f"{source} answered no reward: {shape}")
        details = {
            k: v
            for k, v in reply.items()
            if k not in ECHOED and (k not in task.data or task.data[k] != v)
        }
        return self.judged(reply["reward"], None, details, source=source)
