"""The `gym` command: hand the command to the warm process serving this PREFECT_HOME, if one
does and takes it, and otherwise run it here.

The warm process takes a command only when it would run exactly as it would here (same Python,
import path, environment, limits and priority, code on disk; `warm.refusal`); a refusal costs a few
milliseconds and the command runs here as it always did. Once taken, the command is never run
twice: this process passes on Ctrl-C, SIGTERM and SIGHUP, waits for the exit code and exits
with it (Ctrl-Z stops both, `fg` continues both)."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import socket
import sys

from gymflow import warm_protocol as protocol
from gymflow.user_folders import private_folder

#: Commands that always run here: `gym server` starts and stops the warm process itself.
LOCAL_ONLY = frozenset({"server"})
#: A warm process that has not answered in this long is not used (it is checking the code on
#: disk, a few milliseconds, or it is stuck).
ANSWER_TIMEOUT_S = 5.0


def main() -> None:
    code = forwarded(sys.argv) if _may_forward(sys.argv[1:]) else None
    if code is not None:
        raise SystemExit(code)
    from gymflow.cli import main as run_here

    run_here()


def _may_forward(args: list[str]) -> bool:
    return (
        bool(args)
        and args[0] not in LOCAL_ONLY
        and os.environ.get(protocol.MODE_ENV, "on") != "off"
    )


def forwarded(argv: list[str]) -> int | None:
    """The exit code of `argv` run by the warm process, or None when it did not take it."""
    path = protocol.socket_path(protocol.prefect_home())
    if not (path.exists() and private_folder(path.parent, create=False)):
        return None
    if not all(_is_open(fd) for fd in (0, 1, 2)):  # `gym ... >&-`: the socket would take its fd
        return None
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(ANSWER_TIMEOUT_S)
        conn.connect(str(path))
        if protocol.peer_uid(conn) != os.getuid():
            return None
        request = {
            "argv": argv,
            "cwd": os.getcwd(),
            "env": dict(os.environ),
            "executable": sys.executable,
            "path": sys.path,
            "umask": _umask(),
            "context": protocol.process_context(),
        }
        payload = (json.dumps(request) + "\n").encode()
        socket.send_fds(conn, [payload], [0, 1, 2])
        lines = protocol.Lines(conn)
        answer = lines.next()
        if not answer or "taken" not in answer:
            conn.close()
            return None
        # The command starts only on this answer: a caller that gave up waiting (and runs the
        # command here) has closed the connection instead, and the command never starts there.
        protocol.send(conn, {"go": True})
    except (OSError, ValueError):
        conn.close()
        return None
    return _wait(conn, lines)


def _wait(conn: socket.socket, lines: protocol.Lines) -> int:
    """Pass signals on until the command's exit code arrives."""

    def pass_on(signum: int, _frame: object) -> None:
        with contextlib.suppress(OSError):  # the warm process is gone: the exit says so
            protocol.send(conn, {"signal": signum})

    def suspend(_signum: int, _frame: object) -> None:
        """Ctrl-Z: stop the command, then this process as the shell expects; on `fg` or `bg`,
        continue the command."""
        pass_on(signal.SIGSTOP, None)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)  # returns when this process is continued
        signal.signal(signal.SIGTSTP, suspend)
        pass_on(signal.SIGCONT, None)

    # A signal this process ignores (`nohup`, a script's background job) stays ignored, as the
    # command in its own process would ignore it: passed on, a hangup would end a `nohup` run.
    for signum, handler in ((signal.SIGINT, pass_on), (signal.SIGTERM, pass_on),
                            (signal.SIGHUP, pass_on), (signal.SIGQUIT, pass_on),
                            (signal.SIGTSTP, suspend)):  # fmt: skip
        if signal.getsignal(signum) != signal.SIG_IGN:
            signal.signal(signum, handler)
    conn.settimeout(None)
    try:
        while True:
            message = lines.next()  # a signal's handler runs, then recv resumes (PEP 475)
            if message is None:
                sys.stderr.write(
                    "error: the warm gymflow process lost this command before it ended (see "
                    f"{protocol.prefect_home() / protocol.LOG_FILE})\n"
                )
                from gymflow.cli.exit_codes import RUNTIME

                return RUNTIME
            if "exit" in message:
                if "killed" in message:
                    _die_by(int(message["killed"]))
                return int(message["exit"])
    finally:
        conn.close()


def _die_by(signum: int) -> None:
    """End as the command ended, killed by `signum` (an OOM kill, SIGQUIT): a parent sees a
    process killed by a signal (Python's returncode -9), not one that exited 137. Without a
    core file: the command wrote its own."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    with contextlib.suppress(OSError):  # SIGKILL cannot be handled, nor so be reset
        signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # returns only for a signal that does not end a process


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
