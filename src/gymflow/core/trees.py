"""Walking and removing folder trees that someone else made: a sandbox's folders after an agent's
commands, a run root anyone may write. Python 3.11's `os.walk` and `shutil.rmtree` recurse once a
level, so a folder 1,100 levels deep, six lines of an agent's Python, raised RecursionError out of
a sandbox's clean-up and ended the owner's whole run (attack pass 8, F5), and made the report
server's index answer 500 (F7). Both here keep their own stack, and neither follows a link."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: The folder Python writes a bytecode cache into, beside a module it imports or compiles. pip
#: compiles every .py file it installs, so once gymflow is installed from a wheel each workspace
#: task it ships holds some (its checks, its workspace's code), as does a task whose check a user
#: ran by hand. Never a file of the tree it lies in: not hashed into a task's version, not copied
#: into a sandbox (git-init-commit's check found it in the commit the task asks for), not
#: packed for a worker.
BYTECODE_CACHE = "__pycache__"


def in_bytecode_cache(relative: Path) -> bool:
    """Whether `relative` (a path below the root of the tree it lies in) is in a bytecode
    cache."""
    return BYTECODE_CACHE in relative.parts


def walk(
    root: Path | str, max_depth: int | None = None
) -> Iterator[tuple[str, list[str], list[str]]]:
    """`os.walk(root)` top-down, without recursion and never into a link: (folder, its folders,
    its other entries). The caller may prune the folders list in place, as with `os.walk`.
    Folders more than `max_depth` below `root` are listed by their parent but not entered; a
    folder that cannot be listed (past PATH_MAX, say) is skipped."""
    stack = [(os.fspath(root), 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        folders: list[str] = []
        others: list[str] = []
        for entry in entries:
            try:
                is_folder = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_folder = False
            (folders if is_folder else others).append(entry.name)
        yield folder, folders, others
        if max_depth is None or depth < max_depth:
            stack.extend((os.path.join(folder, name), depth + 1) for name in reversed(folders))


def remove_tree(path: Path | str) -> None:
    """Remove `path` and everything under it, however deep, without following a link; nothing
    there is no error. Folders are moved up into one holding folder below `path` before they are
    emptied, so every path used is short (a deep tree's full paths pass PATH_MAX) and at most two
    folders are open at once. A folder that cannot be removed (modes, another owner) raises the
    OSError."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        os.unlink(path)
        return
    top = os.open(path, _DIRECTORY)
    try:
        hold = f".removing-{uuid.uuid4().hex}"
        os.mkdir(hold, 0o700, dir_fd=top)
        pending: list[str] = []
        moved = 0
        for name in _empty_but_folders(top):
            if name != hold:
                pending.append(name)
        while pending:
            name = pending.pop()
            folder = os.open(name, _DIRECTORY, dir_fd=top)
            try:
                for inner in _empty_but_folders(folder):
                    moved += 1
                    os.rename(inner, f"{hold}/{moved}", src_dir_fd=folder, dst_dir_fd=top)
                    pending.append(f"{hold}/{moved}")
            finally:
                os.close(folder)
            os.rmdir(name, dir_fd=top)
        os.rmdir(hold, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(path)


def _empty_but_folders(folder: int) -> list[str]:
    """Remove every entry of the open folder but its folders; their names."""
    folders: list[str] = []
    with os.scandir(folder) as entries:
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=folder)
    return folders
