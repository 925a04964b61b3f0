"""The NeMo Gym environments of one folder, kept on disk so listing them costs stats, not reads.

Finding them means parsing every config and reading every server's code (its verifier version),
its first dataset row (its tools) and its recorded rollouts (its reward range): seconds for
NeMo Gym's 95 servers. The index holds what that found, under a fingerprint of every file it
read (path, size, modification time); a file added, removed or changed is another fingerprint,
so the index is found again. It lives under `$XDG_CACHE_HOME/gymflow/nemo-gym-index/`; one that
cannot be read or written is simply not used."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any

#: The files of a server that what is listed depends on.
READ = ("*.py", "requirements.txt", "pyproject.toml", "configs/*.yaml", "data/*.jsonl")
#: What gymflow makes of those files: raised when that changes (a manifest's harness for an
#: MCP server), so an index an earlier gymflow wrote is found again.
FORMAT = 2


def fingerprint(root: Path) -> str:
    digest = hashlib.sha256(f"{FORMAT}\0{root.resolve()}".encode())
    for folder in sorted(root.glob("resources_servers/*")):
        for pattern in READ:
            for path in sorted(folder.glob(pattern)):
                with contextlib.suppress(OSError):
                    stat = path.stat()
                    digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:24]


def _file(root: Path, key: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:16]
    return Path(base) / "gymflow" / "nemo-gym-index" / f"{name}-{key}.json"


def load(root: Path, key: str) -> list[dict[str, Any]] | None:
    try:
        return json.loads(_file(root, key).read_text())
    except (OSError, ValueError):
        return None


def save(root: Path, key: str, entries: list[dict[str, Any]]) -> None:
    path = _file(root, key)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        for old in path.parent.glob(f"{path.name.split('-')[0]}-*.json"):
            old.unlink(missing_ok=True)  # this folder's earlier fingerprints
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(entries, default=str))
        partial.replace(path)
