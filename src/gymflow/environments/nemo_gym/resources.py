"""A NeMo Gym resources server as a run's resources: its routes, called as NeMo Gym's agents call
them, and its verdicts judged on gymflow's side.

Per rollout: `POST /seed_session` with the row, then each tool call as `POST /<tool>` with the
call's arguments as the body, then `POST /verify` with the row's fields, its
`responses_create_params` and the whole rollout as one Responses `response` (every output item
after the input, as NeMo Gym's simple agent builds it). The server's session middleware keeps
the rollout's state under a cookie, so each rollout has a cookie jar of its own; the HTTP
client keeps none, or rollouts running at once would share a session.

What each answer means here:
- a tool route's 200 body is the tool's output; a 4xx (NeMo Gym's 422 for arguments its model
  rejects) goes back to the model as a tool error, as NeMo Gym's agent passes it on; a 500 is
  the tool crashing (the rollout fails, `tool_error`); no answer, 502-504 or a body that is no
  JSON where JSON is due is `resources_unavailable` (`--resume` runs it again);
- `/verify` answering a finite `reward` is judged by this environment's pass threshold (the
  server's own fields are kept as details); no reward, a reward that is no finite number, a 4xx
  (the row's fields do not fit the server's verify request) or a 500 are verifier errors, never
  a score."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx

from gymflow.core.errors import RuntimeFailure
from gymflow.core.protocols import ResourcesUnavailable, ToolError
from gymflow.core.records import Verification
from gymflow.core.tasks import Task
from gymflow.core.written import written
from gymflow.environments.dataset.mapping import row_input_items
from gymflow.environments.resources import ResourcesServer
from gymflow.models.nemo_gym_shapes import nemo_request, nemo_response
from gymflow.models.nemo_gym_shapes import usage as _usage
from gymflow.verifiers.base import VerifyInput

#: Generous: a verification can run code or ask a judge.
TIMEOUT = httpx.Timeout(600.0, connect=10.0)
#: Reply fields that are the request echoed back, not the verifier's own.
ECHOED = ("reward", "response", "responses_create_params")
#: Where a run keeps the server's own `/aggregate_metrics` answer, beside its report.
METRICS_FILE = "nemo_gym_metrics.json"
#: A run's scored verdicts as NeMo Gym's aggregation reads them (its task and rollout indices).
_SCORED = """
SELECT t.task_index, r.repeat_index, t.data_json, v.reward, v.details_json,
       r.input_tokens, r.output_tokens
FROM rollouts r JOIN tasks t USING (task_id) JOIN verifications v USING (rollout_id)
WHERE v.verifier_version = ? AND v.status = 'ok'
ORDER BY t.task_index, r.repeat_index
"""
#: Statuses of a server in the way (a proxy, a restart) rather than one that answered.
UNAVAILABLE = (502, 503, 504)


class _NoJar(httpx.Cookies):
    """The client's jar, which keeps nothing: each rollout sends its own session's cookies."""

    def extract_cookies(self, response: httpx.Response) -> None:
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


class NemoGymResources(ResourcesServer):
    """The resources protocol (core.protocols.Resources) over a NeMo Gym server's routes. `open`
    it (a URL, or start the environment's server) before use; `aclose()` at the end."""

    def __init__(self, env, verifier_params: dict[str, Any] | None = None) -> None:
        super().__init__(env, verifier_params)
        self.url = ""
        self._process = None
        self._http: httpx.AsyncClient | None = None
        self._jars: dict[str, dict[str, str]] = {}
        self._session_ids = itertools.count()

    # -- lifecycle -----------------------------------------------------------------------------
    def open(self, url: str | None) -> NemoGymResources:
        """Use the server at `url`, or start the environment's own (launch.py)."""
        if url:
            self.url = url.rstrip("/")
        else:
            from gymflow.environments.nemo_gym.launch import ServerProcess

            self._process = ServerProcess(self.env.server)
            self.url = self._process.start()
        return self

    def routes(self) -> set[str]:
        """The POST routes the server's OpenAPI document lists; empty when it lists none."""
        try:
            document = httpx.get(f"{self.url}/openapi.json", timeout=10.0).json()
        except (httpx.HTTPError, ValueError):
            return set()
        paths = document.get("paths") if isinstance(document, dict) else None
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

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self.close()

    # -- tools and sessions --------------------------------------------------------------------
    def tools(self) -> list[dict[str, Any]]:
        return []

    def tools_for(self, task: Task) -> list[dict[str, Any]]:
        return list(task.tools)  # the row's tools, as given

    async def _post(self, session_id: str, path: str, body: Any) -> httpx.Response:
        if self._http is None:
            self._http = httpx.AsyncClient(base_url=self.url, timeout=TIMEOUT, cookies=_NoJar())
        jar = self._jars.setdefault(session_id, {})
        cookie = "; ".join(f"{k}={v}" for k, v in jar.items())
        try:
            response = await self._http.post(
                path, json=body, headers={"cookie": cookie} if cookie else None
            )
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
        return session_id

    async def call_tool(self, session_id: str, name: str, arguments: dict[str, Any]) -> str:
        response = await self._post(session_id, f"/{name}", arguments)
        if response.status_code == 200:
            return response.text
        if 400 <= response.status_code < 500:
            raise ToolError(f"{response.status_code}: {response.text[:2000]}")
        raise RuntimeFailure(
            f"tool route /{name} answered {response.status_code}: {response.text[:300]}"
        )

    async def close_session(self, session_id: str) -> None:
        self._jars.pop(session_id, None)

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
                con.execute(_SCORED, [self.verifier_version]).fetchall()
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
        response = await self._post(session_id, "/verify", verify_body(task, trajectory))
        return self.judge_reply(task, response)

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

    def judge_reply(self, task: Task, response: httpx.Response) -> Verification:
        source = f"NeMo Gym server {self.url}/verify"
        if response.status_code != 200:
            kind = "bad_verify_request" if response.status_code < 500 else "verifier_error"
            return self.unjudged(
                kind, f"{source} answered {response.status_code}: {response.text[:500]}"
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
