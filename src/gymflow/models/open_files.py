"""Open-file headroom for a run: every model call in flight holds a socket.

Many systems start processes with a soft limit of 1,024 open files; at concurrency 1,024 the run
then fails at its first commit ("Too many open files"), after the model calls were paid for. The
soft limit can be raised up to the hard one without privileges, so it is, before anything starts;
where even the hard limit is too low, the run is refused with the figure it needs.

A server (`gym serve model`, `gym serve environment`) holds a socket per client connection and
cannot know how many will come: at 1,024 it stopped accepting the last few connections of a
run at concurrency 1,024 (they waited, or were reset and retried), and that run reached 0.7 of
its latency bound. It raises its soft limit as far as `SERVING_OPEN_FILES` allows."""

from __future__ import annotations

import resource

from gymflow.core.config import ConfigError

#: Descriptors besides the calls' sockets: the store's files, Prefect's client, the local policy
#: server's pipes, the interpreter's own.
RESERVE = 256


def files_needed(concurrency: int, *, remote_resources: bool) -> int:
    """One socket per call in flight, and one more per rollout when tool calls and verification go
    to a served resources server."""
    return concurrency * (2 if remote_resources else 1) + RESERVE


def ensure_open_files(concurrency: int, *, remote_resources: bool = False) -> int:
    """Raise this process's soft RLIMIT_NOFILE to what the run needs (children such as the local
    policy server inherit it); return the soft limit now in force."""
    needed = files_needed(concurrency, remote_resources=remote_resources)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft
    if hard != resource.RLIM_INFINITY and hard < needed:
        fits = (hard - RESERVE) // (2 if remote_resources else 1)
        # below the reserve no concurrency fits: "lower concurrency to 1" was refused in turn
        remedy = (
            f"lower concurrency to {fits} or raise the hard limit"
            if fits >= 1
            else "raise the hard limit to at least "
            f"{files_needed(1, remote_resources=remote_resources)}"
        )
        raise ConfigError(
            f"concurrency {concurrency} needs about {needed} open files, but this process may "
            f"open at most {hard} (hard limit, `ulimit -Hn`): {remedy}"
        )
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    return needed


#: The soft open-file limit a server raises itself to (within the hard limit): connections for
#: many runs at the largest concurrency a config allows.
SERVING_OPEN_FILES = 65_536


def ensure_serving_open_files() -> int:
    """Raise this server process's soft RLIMIT_NOFILE towards SERVING_OPEN_FILES (never above
    the hard limit, never lowered); return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = SERVING_OPEN_FILES if hard == resource.RLIM_INFINITY else min(SERVING_OPEN_FILES, hard)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        return wanted
    return soft
