"""Storage every host reaches: a local path or an fsspec URL (`s3://`, `gs://`, `file://`).

A URL's credentials and endpoint come from its storage's standard variables (for S3, the
`AWS_*` ones botocore reads, `AWS_ENDPOINT_URL` included); gymflow never takes them as
parameters, so they never reach a config, a store or Prefect. The client is an optional extra
(`pip install 'gymflow[s3]'`): a missing one is one line saying which to install.

Objects written here are immutable: `put_new` writes a name only if nothing holds it yet
(`If-None-Match: *` on S3, a hard link on a local disk), so of two attempts that publish one
name, exactly one wins and the other is told (`AlreadyExists`)."""

from __future__ import annotations

import functools
import hashlib
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gymflow.core.bounded_files import FileBoundError, FileTooLong, open_bounded, read_bounded
from gymflow.core.errors import UserError
from gymflow.core.written import WriteError, write_bytes, written

#: URL schemes a shard root may take, and the package that reads each (the extra that has it).
CLIENTS = {"s3": ("s3fs", "s3"), "gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"), "file": ("", "")}
_CHUNK = 1 << 20


class RemoteError(UserError):
    """Storage that cannot be reached, read or written: the message names the URL and why."""


class ObjectTooLong(RemoteError):
    """An object longer than anything gymflow writes there: refused before it is read."""


class AlreadyExists(RemoteError):
    """An immutable name already holds an object: another attempt published it first."""


@functools.cache
def _failures() -> tuple[type[BaseException], ...]:
    """What object storage raises when it cannot be reached or refuses: OSError (s3fs turns
    most answers into one), and what botocore and aiohttp raise themselves (an endpoint that
    does not answer is botocore's EndpointConnectionError, no OSError): each a one-line
    RemoteError, never a traceback."""
    found: list[type[BaseException]] = [OSError]
    try:
        from botocore.exceptions import BotoCoreError, ClientError

        found += [BotoCoreError, ClientError]
    except ImportError:
        pass
    try:
        from aiohttp import ClientError as HttpClientError

        found.append(HttpClientError)
    except ImportError:
        pass
    return tuple(found)


def is_url(location: str | Path) -> bool:
    """A URL (`scheme://…`) rather than a path on this machine."""
    return "://" in str(location)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Remote:
    """A folder at a URL (or a local path): read, list, and write objects under it."""

    url: str

    def __post_init__(self) -> None:
        scheme = self.url.split("://", 1)[0] if is_url(self.url) else "file"
        if scheme not in CLIENTS:
            raise RemoteError(
                f"{self.url}: storage scheme {scheme!r} is not supported; use a path or one of "
                f"{', '.join(f'{s}://' for s in CLIENTS)}"
            )

    @property
    def _fs(self) -> tuple[Any, str]:
        import fsspec

        scheme = self.url.split("://", 1)[0] if is_url(self.url) else "file"
        try:
            return fsspec.core.url_to_fs(self.url)
        except ImportError:
            package, extra = CLIENTS[scheme]
            raise RemoteError(
                f"{self.url}: reading {scheme}:// needs {package}: pip install 'gymflow[{extra}]'"
            ) from None

    @property
    def local(self) -> bool:
        return not is_url(self.url) or self.url.startswith("file://")

    def child(self, *parts: str) -> Remote:
        return Remote("/".join([self.url.rstrip("/"), *parts]))

    def _object(self, name: str) -> tuple[Any, str]:
        """The client and the path of the object `name`, refused unless it is plainly inside
        this folder: a name read from storage (a manifest's) must not reach another folder."""
        parts = name.split("/")
        if "\\" in name or any(part in ("", ".", "..") for part in parts):
            raise RemoteError(f"{self.url}: object name {name!r} is not plainly inside it")
        fs, root = self._fs
        return fs, f"{root}/{name}"

    def read(self, name: str, limit: int) -> bytes | None:
        """The object at `name` (relative to this folder), or None if there is none; one longer
        than `limit` bytes is ObjectTooLong, from its size, before a byte of it is read (a
        sparse 6 GB COMMITTED.json took `gym eval aggregate` past 2.4 GB: attack pass 7, s05).
        On this machine, read through the one bounded reader (no link, no FIFO)."""
        fs, path = self._object(name)
        try:
            if self.local:
                return read_bounded(Path(path), limit)
            self._within(fs, path, name, limit)
            data = fs.cat_file(path, start=0, end=limit + 1)
        except FileNotFoundError:
            return None
        except FileBoundError as exc:
            raise self._refused(name, exc) from None
        except _failures() as exc:
            raise RemoteError(f"{self.url}/{name}: cannot read: {exc}") from None
        if len(data) > limit:  # grew since its size was asked
            raise ObjectTooLong(f"{self.url}/{name}: longer than {limit:,} bytes; refused")
        return data

    def read_into(self, name: str, target: Path, limit: int) -> tuple[str, int] | None:
        """Copy the object at `name` into the new file `target` in chunks, hashed as it goes:
        its SHA-256 and length, or None if there is none. One longer than `limit` bytes is
        ObjectTooLong, from its size before it is read, or as soon as it passes it."""
        fs, path = self._object(name)
        digest, copied = hashlib.sha256(), 0
        try:
            if not self.local:
                self._within(fs, path, name, limit)
            with (
                open_bounded(Path(path), limit) if self.local else fs.open(path, "rb") as source,
                open(target, "xb") as out,
            ):
                while chunk := source.read(min(_CHUNK, limit + 1 - copied)):
                    copied += len(chunk)
                    if copied > limit:
                        break
                    digest.update(chunk)
                    out.write(chunk)
        except FileNotFoundError:
            return None
        except FileBoundError as exc:
            raise self._refused(name, exc) from None
        except _failures() as exc:
            raise RemoteError(f"{self.url}/{name}: cannot read: {exc}") from None
        if copied > limit:
            target.unlink()
            raise ObjectTooLong(f"{self.url}/{name}: longer than {limit:,} bytes; refused")
        return digest.hexdigest(), copied

    def _within(self, fs: Any, path: str, name: str, limit: int) -> None:
        size = fs.size(path)
        if size is not None and size > limit:
            raise ObjectTooLong(f"{self.url}/{name}: {size:,} bytes, past the {limit:,} read "
                                "here; refused")  # fmt: skip

    def _refused(self, name: str, exc: FileBoundError) -> RemoteError:
        kind = ObjectTooLong if isinstance(exc, FileTooLong) else RemoteError
        return kind(f"{self.url}/{name}: {exc.why}; refused")

    def find(self, suffix: str) -> list[str]:
        """Names (relative to this folder) of every object under it ending in `suffix`."""
        fs, root = self._fs
        try:
            found = fs.find(root)
        except FileNotFoundError:
            return []
        except _failures() as exc:
            raise RemoteError(f"{self.url}: cannot list: {exc}") from None
        prefix = root.rstrip("/") + "/"
        return sorted(p.removeprefix(prefix) for p in found if p.endswith(suffix))

    def put(self, name: str, data: bytes) -> None:
        """Write `name`, under a name no other attempt uses (so overwriting never happens)."""
        fs, path = self._object(name)
        try:
            if self.local:
                _link_new(Path(path), data, replace=True)
            else:
                fs.pipe_file(path, data)
        except WriteError as exc:
            raise RemoteError(f"{self.url}/{name}: {exc}") from None
        except _failures() as exc:
            raise RemoteError(f"{self.url}/{name}: cannot write: {exc}") from None

    def put_file(self, name: str, path: Path) -> None:
        """Upload the file at `path` as `name`, replacing what was there (streamed: a run store
        can be larger than memory)."""
        fs, remote_path = self._object(name)
        try:
            if self.local:
                with written(remote_path) as (partial,):
                    shutil.copyfile(path, partial)
            else:
                fs.put_file(str(path), remote_path)
        except WriteError as exc:
            raise RemoteError(f"{self.url}/{name}: {exc}") from None
        except _failures() as exc:
            raise RemoteError(f"{self.url}/{name}: cannot write: {exc}") from None

    def put_new(self, name: str, data: bytes) -> None:
        """Write `name` only if nothing holds it yet (a conditional write); else AlreadyExists."""
        fs, path = self._object(name)
        try:
            if self.local:
                _link_new(Path(path), data, replace=False)
            else:
                fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            raise AlreadyExists(f"{self.url}/{name}: already written by another attempt") from None
        except _failures() as exc:
            # S3 answers 412 Precondition Failed, which s3fs raises as a plain OSError: the
            # object's presence says whether another attempt won (or this one's reply was lost).
            try:
                held = self.read(name, len(data))
            except ObjectTooLong:
                held = b""  # longer than what this attempt wrote: another attempt's
            if held is None:
                raise RemoteError(f"{self.url}/{name}: cannot write: {exc}") from None
            if held != data:
                raise AlreadyExists(
                    f"{self.url}/{name}: already written by another attempt"
                ) from None


def _link_new(path: Path, data: bytes, *, replace: bool) -> None:
    """Write aside, then give the file its name: a hard link fails if the name exists (no
    reader ever sees half a file, and of two writers one wins); `replace` renames instead."""
    if replace:
        write_bytes(path, data)  # gymflow.core.written: a link at `path` is replaced, not followed
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        with os.fdopen(os.open(partial, flags, 0o666), "wb") as out:
            out.write(data)
        os.link(partial, path)  # never through a link: link(2) makes `path` or fails
    finally:
        partial.unlink(missing_ok=True)
