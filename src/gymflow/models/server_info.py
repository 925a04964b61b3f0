"""What a model server says about itself: the model it serves and its version, where it tells
(llama.cpp's `/props`, vLLM's `/version`, the OpenAI-compatible `/v1/models`).

A run records it as a factor (`gymflow.analysis.factors`): two runs of one config against
servers that load another file, or another build, differ in something the config cannot show.
Only what identifies the server is kept (model ids and paths, versions, builds, and a hash of a
chat template, never the template itself, nor anything resembling a key); a server that answers
none of these gives nothing, and a probe never fails a run."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

#: seconds each probe may take: a server slow to answer one is not waited for
PROBE_TIMEOUT_S = 2.0
#: fields of llama.cpp's /props worth keeping
_PROPS = ("model_path", "build_info", "n_ctx", "total_slots")
#: fields of a /v1/models entry worth keeping
_MODEL = ("id", "owned_by", "root", "max_model_len")


def _get(client: httpx.Client, url: str) -> Any | None:
    try:
        response = client.get(url)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _short(value: Any) -> Any:
    return value[:300] if isinstance(value, str) else value


def server_report(base_url: str, *, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """What the server at `base_url` (…/v1) reports about its model and version; {} when it
    reports nothing."""
    root = base_url.rstrip("/").removesuffix("/v1")
    found: dict[str, Any] = {}
    with httpx.Client(timeout=timeout, follow_redirects=False) as client:
        props = _get(client, f"{root}/props")
        if isinstance(props, dict):
            kept = {k: _short(props[k]) for k in _PROPS if k in props}
            template = props.get("chat_template")
            if isinstance(template, str) and template:
                kept["chat_template_sha256"] = hashlib.sha256(template.encode()).hexdigest()[:12]
            if kept:
                found["props"] = kept
        version = _get(client, f"{root}/version")
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            found["version"] = _short(version["version"])
        models = _get(client, f"{root}/v1/models")
        if isinstance(models, dict) and isinstance(models.get("data"), list):
            entries = [
                {k: _short(m[k]) for k in _MODEL if k in m}
                for m in models["data"][:8]
                if isinstance(m, dict)
            ]
            if entries:
                found["models"] = entries
    return found
