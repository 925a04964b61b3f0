"""Every file gymflow writes: written aside, then renamed into place.

A file is written as a hidden partial beside its name (same folder, so the rename is atomic) and
takes the name only when complete: a killed or failed command (a full disk, SIGKILL) leaves the
previous file whole and at most a partial named after its process, which the next write of that
file removes once that process is gone. Nothing half-written can block the next command or read
as a smaller run.

What a name may be: a regular file, a symlink or nothing yet. A symlink is never followed: the
rename replaces the link itself and leaves what it pointed to alone. A link planted in a run
folder (`RUN/report.html` -> ~/.ssh/authorized_keys) made `gym report` replace its target with
a page whose text the store chose; whether a name is the user's own link or a planted one
cannot be told apart, so an explicit `--out` is treated the same (write to the resolved path to
write through a link). The same holds one level up: the folder a file is written into (a run
folder, an `--out` folder) is refused when it is a link, as a store opened for writing in one is
(`unlinked_folder`): whoever can write a run folder's parent could replace RUN with a link to
any folder of the owner's, and every default output, the store included, would land there. Its
ancestors are the user's own layout and are followed. A partial's name is unguessable, and it
is renamed only while it is still a regular file (not swapped for a link while written). A
name (or the link at it) that is a device, FIFO or socket is refused: a rename would replace the
node or the link to it (`--out /dev/stdout` as root replaced /dev/stdout with a regular file). A
folder that cannot be written is one line naming it (`WriteError`), never a traceback. A core
module: it imports nothing from gymflow but its errors and process checks."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Generator
from contextlib import contextmanager, suppress
from pathlib import Path

from gymflow.core.errors import UserError
from gymflow.core.processes import pid_alive

_PARTIAL = ".partial"


class WriteError(UserError):
    """A file that cannot be written there: the message names it and why."""


def unlinked_folder(folder: Path | str) -> Path:
    """`folder`, the folder gymflow writes files (or a store) into; WriteError when it is a
    symlink, named with where it points, so the user can name that folder instead."""
    folder = Path(folder)
    if folder.is_symlink():
        raise WriteError(
            f"{folder}: a symlink (to {os.readlink(folder)}); gymflow writes into a folder as "
            "it is named, never through a link: name the folder it points to to write there"
        )
    return folder


def target(path: Path | str) -> Path:
    """The file a write of `path` replaces: `path` itself, a symlink there included (the link
    is replaced, never followed). Raises WriteError for a folder or a special file (a device,
    FIFO or socket), or a link to one, and for a file in a folder that is a link
    (`unlinked_folder`)."""
    path = Path(path)
    unlinked_folder(path.parent)
    try:
        info = path.stat()  # follows links, /proc's magic ones too (/dev/stdout is a pipe's)
    except FileNotFoundError:
        info = None  # nothing there, or a dangling link: replaced like any other
    except NotADirectoryError:
        folder = next(p for p in path.parents if p.exists() and not p.is_dir())
        raise WriteError(f"{folder}: not a folder; cannot write {path.name} in it") from None
    except OSError as exc:
        raise WriteError(f"{path}: cannot write: {exc.strerror or exc}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise WriteError(f"{path}: is a folder; name the file to write")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise WriteError(
            f"{path}: not a regular file (a device, FIFO or socket); gymflow writes a file "
            "aside and renames it into place, which would replace it: name a file"
        )
    return path


def own_folder(base: Path | str, *names: str) -> Path:
    """`base/names…`, a folder gymflow names itself inside a folder it was given (RUN/data,
    RUN/confirm/FACTOR): WriteError when `base` or one of `names` is a symlink. Its files would
    land, and an earlier one be deleted, wherever a link planted there points."""
    path = unlinked_folder(base)
    for name in names:
        path = path / name
        if path.is_symlink():
            raise WriteError(
                f"{path}: a symlink where gymflow keeps a folder of its own; not followed, "
                "nothing written (remove the link)"
            )
    return path


def _partial(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}{_PARTIAL}")


def _still_ours(partial: Path) -> None:
    """Refuses a partial that is no longer a regular file (swapped for a link while written):
    the rename would give the name whatever was put there."""
    if not stat.S_ISREG(os.lstat(partial).st_mode):
        raise WriteError(f"{partial}: replaced while gymflow wrote it; nothing written")


def _prepare(path: Path) -> None:
    """`path`'s folder made, and partials a killed writer left there removed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(
            f"{path.parent}: cannot create the folder: {exc.strerror or exc}"
        ) from None
    _remove_abandoned(path)


def _remove_abandoned(path: Path) -> None:
    """Partials of `path` whose writer is gone (killed before it could remove them)."""
    with suppress(OSError):
        for left in path.parent.glob(f".{path.name}.*{_PARTIAL}*"):  # a store's .wal too
            pid = left.name[len(path.name) + 2 :].partition("-")[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                left.unlink(missing_ok=True)


def _failed(exc: OSError, partials: list[Path], targets: list[Path]) -> WriteError:
    """The error naming the file that could not be written (its partial could not be made or
    filled, in a read-only or full place, or it could not be renamed into place)."""
    named = dict(zip(map(str, partials), targets, strict=True)) | {str(t): t for t in targets}
    path = named.get(str(exc.filename), targets[0])
    return WriteError(f"{path}: cannot write: {exc.strerror or exc}")


@contextmanager
def written(*paths: Path | str) -> Generator[list[Path], None, None]:
    """Partial paths to write `paths` to; once the block ends they are renamed over their
    targets (the first last: a reader that finds the first file finds the others), and on any
    failure removed. Parent folders are made. An OSError is a WriteError naming the file."""
    targets = [target(path) for path in paths]
    for path in targets:
        _prepare(path)
    partials = [_partial(path) for path in targets]
    try:
        yield partials
        for partial in partials:  # on disk before the name moves: a crash never names a hole
            _still_ours(partial)
            fd = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        for partial, path in reversed(list(zip(partials, targets, strict=True))):
            os.replace(partial, path)
    except OSError as exc:
        raise _failed(exc, partials, targets) from None
    finally:
        for partial in partials:
            with suppress(OSError):
                partial.unlink(missing_ok=True)


@contextmanager
def created(path: Path | str) -> Generator[Path, None, None]:
    """A partial to build `path` in, for a file made once and then opened in place (a store):
    once the block ends it takes the name, unless another writer made `path` first (that one
    is kept and this partial removed). A killed build leaves no file at `path`: a store created
    in place and killed early was a 12 KB file every later command refused as no gymflow
    store. A symlink at `path` is refused: the store would be opened through it."""
    path = target(path)
    if path.is_symlink():
        raise WriteError(f"{path}: a symlink; gymflow makes a store as a file of its own there")
    _prepare(path)
    partial = _partial(path)
    try:
        yield partial
        try:
            os.link(partial, path)  # not a rename: never over a store another process just made
        except FileExistsError:
            pass
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
            if not path.exists():  # a file system without hard links: a rename, checked first
                os.replace(partial, path)
    except OSError as exc:
        raise _failed(exc, [partial], [path]) from None
    finally:
        for left in (partial, partial.with_name(partial.name + ".wal")):
            with suppress(OSError):
                left.unlink(missing_ok=True)


def write_text(path: Path | str, text: str) -> Path:
    """`path` holding `text` (UTF-8), written aside and renamed into place; returns the file."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path | str, data: bytes) -> Path:
    with written(path) as (partial,):
        partial.write_bytes(data)
    return target(path)
