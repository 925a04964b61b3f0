"""Reading dataset rows from local files: JSONL (and NeMo Gym rows), Parquet, CSV, and a folder
the `datasets` package wrote with `save_to_disk` (Arrow files, read with pyarrow alone).

Every row comes with where it is (`line N` of a text file, `row N` of a table), so a problem can
name the file, the row and the field. A row that cannot be read is a problem, not an exception:
the reader goes on, so one pass reports every bad row."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from gymflow.core.errors import UserError

#: Longest JSONL line read (bytes): a bound on one row's memory, like the config loader's.
MAX_LINE_BYTES = 64 * 1024 * 1024
BOM = b"\xef\xbb\xbf"


class DatasetError(UserError, ValueError):
    """A dataset that cannot be used; `problems` names the file, row and field of each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class RawRow:
    where: str  # "line 12" or "row 11"
    fields: dict[str, Any] | None  # None when the row could not be read
    problem: str | None = None


def read_rows(path: Path, fmt: str, limit: int | None = None) -> Iterator[RawRow]:
    """The rows of a local file (or `save_to_disk` folder), the first `limit` when given."""
    if fmt == "save_to_disk":
        if not path.is_dir():
            raise DatasetError([f"{path}: no such folder (a dataset saved with save_to_disk)"])
    elif not path.is_file():
        raise DatasetError([f"{path}: no such dataset file"])
    reader = {
        "jsonl": _jsonl,
        "nemo_gym": _jsonl,
        "parquet": _parquet,
        "csv": _csv,
        "save_to_disk": _saved,
    }[fmt]
    return islice(reader(path), limit)


def _jsonl(path: Path) -> Iterator[RawRow]:
    with path.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if number == 1:  # a byte-order mark, as Windows tools write
                line = line.removeprefix(BOM)
            if not line.strip():
                continue
            where = f"line {number}"
            if len(line) > MAX_LINE_BYTES:
                yield RawRow(where, None, f"longer than {MAX_LINE_BYTES} bytes")
                continue
            try:
                # orjson refuses NaN and Infinity, as JSON does
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                yield RawRow(where, None, f"not JSON: {exc}")
                continue
            if not isinstance(value, dict):
                yield RawRow(where, None, f"expected a JSON object, got {type(value).__name__}")
                continue
            yield RawRow(where, value)


def _parquet(path: Path) -> Iterator[RawRow]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError([f"{path}: not a Parquet file: {exc}"]) from None
    number = 0
    # A row group at a time: a corrupt page (`OSError: Couldn't deserialize thrift`) is a
    # problem naming its row group and rows, and the groups after it are still read.
    for group in range(parquet.num_row_groups):
        end = number + parquet.metadata.row_group(group).num_rows
        batches = parquet.iter_batches(batch_size=8192, row_groups=[group])
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pa.ArrowException) as exc:
                where = f"row group {group} (rows {number} to {end - 1})"
                yield RawRow(where, None, f"cannot be read: {' '.join(str(exc).split())}")
                break
            if batch is None:
                break
            for row in batch.to_pylist():
                yield _finite(f"row {number}", row)
                number += 1
        number = end


def _saved(path: Path) -> Iterator[RawRow]:
    """A `Dataset.save_to_disk` folder: `state.json` lists its Arrow stream files, in order. A
    `DatasetDict`'s folder holds one such folder per split, and is refused naming them."""
    import pyarrow as pa

    if (path / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in path.iterdir() if (p / "state.json").is_file())
        raise DatasetError(
            [
                f"{path}: a DatasetDict saved with save_to_disk: set dataset.path to one split's "
                f"folder ({', '.join(f'{path.name}/{s}' for s in splits) or 'none found'})"
            ]
        )
    try:
        files = [
            entry["filename"]
            for entry in orjson.loads((path / "state.json").read_bytes())["_data_files"]
        ]
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as exc:
        raise DatasetError(
            [f"{path}: a folder, but not one written by save_to_disk (state.json: {exc})"]
        ) from None
    number = 0
    for name in files:
        file = (path / str(name)).resolve()
        if not file.is_relative_to(path.resolve()):  # state.json names files in its folder
            raise DatasetError([f"{path}: state.json names {name!r}, outside the folder"])
        try:
            with pa.memory_map(str(file)) as source:
                for batch in pa.ipc.open_stream(source):
                    for row in batch.to_pylist():
                        yield _finite(f"row {number}", row)
                        number += 1
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError([f"{file}: not an Arrow file of save_to_disk: {exc}"]) from None


def _csv(path: Path) -> Iterator[RawRow]:
    # utf-8-sig: Excel starts a CSV with a byte-order mark, which would rename the first column
    with path.open(newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        try:
            header = reader.fieldnames or []
            repeated = sorted({name for name in header if header.count(name) > 1})
            if repeated:  # a DictReader would silently keep the last column of each name
                names = ", ".join(map(repr, repeated))
                raise DatasetError([f"{path}: line 1: header repeats column {names}"])
            for row in reader:
                where = f"line {reader.line_num}"
                if None in row:
                    yield RawRow(where, None, "more cells than the header has columns")
                    continue
                if None in row.values():
                    yield RawRow(where, None, "fewer cells than the header has columns")
                    continue
                yield RawRow(where, dict(row))
        except (csv.Error, UnicodeDecodeError) as exc:
            raise DatasetError([f"{path}: line {reader.line_num}: not CSV: {exc}"]) from None


def _finite(where: str, row: dict[str, Any]) -> RawRow:
    """Parquet may hold NaN or infinities, which no verifier can compare with."""
    for key, value in row.items():
        if isinstance(value, float) and not math.isfinite(value):
            return RawRow(where, None, f"field {key!r}: non-finite number {value}")
    return RawRow(where, row)
