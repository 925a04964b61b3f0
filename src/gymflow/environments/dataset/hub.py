"""Hugging Face Hub datasets, through `huggingface_hub` (download and cache a pinned snapshot) and
`datasets` (read that snapshot as the Hub would: its configs, splits and file formats).

The snapshot is resolved to a commit, and that commit is part of the benchmark's version, so a
branch that moves is a new version. With HF_HUB_OFFLINE=1 both read only their caches."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from gymflow.environments.dataset.readers import DatasetError, RawRow, _finite
from gymflow.environments.dataset.spec import HubSource

INSTALL_HINT = "Hub datasets need the Hugging Face libraries: pip install 'gymflow[hf]'"


@dataclass(frozen=True, slots=True)
class HubRows:
    label: str  # "hub:acme/tiny-math@<commit> (config default, split test)"
    commit: str
    rows: Iterator[RawRow]


def hub_rows(hub: HubSource, limit: int | None = None) -> HubRows:
    try:
        import datasets
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError
    except ImportError as exc:
        raise DatasetError([f"{INSTALL_HINT} ({exc})"]) from None
    where = f"hub dataset {hub.name!r} (revision {hub.revision!r})"
    try:
        folder = Path(
            snapshot_download(repo_id=hub.name, repo_type="dataset", revision=hub.revision)
        )
    except LocalEntryNotFoundError:
        raise DatasetError(
            [f"{where}: not in the Hugging Face cache, and the Hub cannot be reached"]
        ) from None
    except (HfHubHTTPError, OSError, ValueError) as exc:
        raise DatasetError([f"{where}: {type(exc).__name__}: {exc}"]) from None
    commit = folder.name
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        table = datasets.load_dataset(str(folder), name=hub.config, split=hub.split)
    except (ValueError, FileNotFoundError, datasets.exceptions.DatasetGenerationError) as exc:
        raise DatasetError(
            [f"{where}: config {hub.config!r} split {hub.split!r}: {type(exc).__name__}: {exc}"]
        ) from None
    config = hub.config or "default"
    label = f"hub:{hub.name}@{commit[:12]} ({config}/{hub.split})"
    rows = (_finite(f"row {i}", row) for i, row in enumerate(islice(table, limit)))
    return HubRows(label, commit, rows)
