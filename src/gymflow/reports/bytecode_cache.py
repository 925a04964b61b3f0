"""The report templates' compiled form, kept between commands in a per-user cache folder.

Compiling the templates took 0.18 s of every `gym eval run` (its report is rendered once per
process); loading their bytecode takes a few milliseconds. Jinja keys each entry on the
template's name and checks it against the source's checksum, so an edited template is compiled
again; the file name also carries a digest of what the bytecode depends on besides the source
(the environment's options, here, and Jinja's and Python's versions, which Jinja checks too).

The cache is an optimisation only: a folder that cannot be made, is not the user's own or is
open to others (bytecode is code), or an entry that cannot be read or written, means the
templates are compiled as before, never a failed report."""

from __future__ import annotations

import contextlib
from pathlib import Path

from jinja2.bccache import Bucket, FileSystemBytecodeCache

from gymflow.core.user_folders import private_folder, user_cache


def cache_root() -> Path:
    """`$XDG_CACHE_HOME/gymflow/jinja`, or `~/.cache/gymflow/jinja`."""
    return user_cache("jinja")


class SafeBytecodeCache(FileSystemBytecodeCache):
    """A file-system bytecode cache whose failures compile the template instead of raising."""

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # a damaged entry: compile from source, and the dump replaces it
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        # A full disk or a read-only folder: the next run compiles again.
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def bytecode_cache(variant: str, folder: Path | None = None) -> SafeBytecodeCache | None:
    """A cache in `folder` (default `cache_root()`) whose entries are named by `variant` (a
    digest of the environment's options), or None if the folder is not safe to use."""
    try:
        folder = folder or cache_root()
    except RuntimeError:  # no home folder (HOME unset, no passwd entry): nowhere to cache
        return None
    if not private_folder(folder, create=True):
        return None
    return SafeBytecodeCache(str(folder), pattern=f"{variant}-%s.cache")
