"""What leaves a sandbox: the one rule every sandbox's `download` follows.

What is in a sandbox's folders was made by the code it ran (an agent, a task's tests), so it may
be anything: `ln -s /dev/zero /logs/agent/trajectory.json` was copied out as a link and then
read on the host until the run passed 2 GB (attack pass 7, s04); a link to a host file would
have been read into the rollout's trajectory. So only folders and regular files come out, each
read through the bounded reader that never follows a link (`core.bounded_files`); a link, a
device, a FIFO or a socket is never recreated on the host, and a file past MAX_FILE_BYTES (or
past MAX_TOTAL_BYTES copied before it) stays behind, as do folders past MAX_DEPTH levels and
entries past MAX_ENTRIES, and whatever cannot be read: a download never fails for what the
sandbox's code left in the folder it takes out. What stays behind is returned, each with
why, for the caller to record. The sandbox's processes have ended when its files are copied out
(bubblewrap's pid namespace dies with the command), so nothing swaps a folder meanwhile; a file
opened is still opened without following a link."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gymflow.core.bounded_files import FileBoundError, FileTooLong, open_bounded
from gymflow.core.config import MAX_TEXT_BYTES

#: The longest file taken out of a sandbox: a trajectory or a log, stored as text at most this.
MAX_FILE_BYTES = MAX_TEXT_BYTES
#: All a download takes out of a sandbox, past which files stay behind (the host's disk).
MAX_TOTAL_BYTES = 4 * MAX_TEXT_BYTES
#: Folder levels and entries a download takes out, past which they stay behind.
MAX_DEPTH, MAX_ENTRIES = 32, 10_000
_CHUNK = 1 << 20
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def _kind(mode: int) -> str:
    return "a link" if stat.S_ISLNK(mode) else "not a regular file (a device, FIFO or socket)"


class _Copy:
    def __init__(self) -> None:
        self.file_bytes, self.room = MAX_FILE_BYTES, MAX_TOTAL_BYTES
        self.entries = MAX_ENTRIES
        self.left: list[str] = []

    def tree(self, source: Path, target: Path, shown: str) -> None:
        """The folder `source` to `target`, with its own stack: a folder an agent made 1,100
        levels deep raised RecursionError out of the owner's run (attack pass 8, F5)."""
        stack = [(source, target, shown, 0)]
        while stack:
            source, target, shown, depth = stack.pop()
            try:
                mode = os.lstat(source).st_mode
                if stat.S_ISDIR(mode) and depth >= MAX_DEPTH:
                    self.left.append(f"{shown}: past {MAX_DEPTH} folders deep; left in the sandbox")
                elif stat.S_ISDIR(mode):
                    target.mkdir(parents=True, exist_ok=True)
                    names = sorted(os.listdir(source))
                    if len(names) > self.entries:
                        self.left.append(
                            f"{shown}: {len(names) - self.entries} of its entries past the "
                            f"{MAX_ENTRIES:,} taken out; left in the sandbox"
                        )
                        names = names[: self.entries]
                    self.entries -= len(names)
                    stack.extend(
                        (source / name, target / name, f"{shown}/{name}", depth + 1)
                        for name in reversed(names)
                    )
                elif stat.S_ISREG(mode):
                    self.file(source, target)
                else:
                    self.left.append(f"{shown}: {_kind(mode)}; left in the sandbox")
            except FileBoundError as exc:
                self.left.append(f"{shown}: {exc.why}")
            except OSError as exc:
                self.left.append(f"{shown}: cannot be read ({exc.strerror}); left in the sandbox")

    def file(self, source: Path, target: Path) -> None:
        bound = min(self.file_bytes, self.room)
        with open_bounded(source, bound) as handle:
            fd = os.open(target, _WRITE, 0o600)
            copied = 0
            with os.fdopen(fd, "wb") as out:
                while chunk := handle.read(min(_CHUNK, bound + 1 - copied)):
                    copied += len(chunk)
                    if copied > bound:
                        break
                    out.write(chunk)
        if copied > bound:
            target.unlink()
            raise FileTooLong(source, f"grew past the {bound:,} bytes taken out")
        self.room -= copied


def copy_out(source: Path, target: Path) -> list[str]:
    """Copy the file or folder `source` (a sandbox's, on the host) to `target`: folders and
    regular files only, none past the bounds. Returns what stayed behind, as "path: why" (the
    path under `source`'s name). `source` itself a link or no file is FileBoundError (or
    FileNotFoundError); one past the bound is FileBoundError."""
    mode = os.lstat(source).st_mode
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise FileBoundError(source, f"{_kind(mode)}; not copied out of the sandbox")
    copy = _Copy()
    if stat.S_ISREG(mode):
        copy.file(source, target)
    else:
        copy.tree(source, target, source.name)
    return copy.left
