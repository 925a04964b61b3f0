"""The program that runs inside the sandbox (as /job/runner.py), and the plain-data encoding that
both sides of the sandbox speak. Standard library only: the sandbox has no site-packages.

The runner loads the candidate's module, then answers call requests: arguments in (marshalled by
the trusted side; marshal is built in, and the sandbox only ever reads it), the return value (or
the exception it raised) out as one line of JSON that `decode` turns back into plain built-in
values. It imports nothing beyond what the interpreter has loaded at startup (json alone would
double the runner's start-up cost), so its JSON is written here. It never judges
anything: the tests run in the trusted process (gymflow.verifiers.sandbox), so whatever the
candidate does to this process can only change the values it hands back, never a verdict.

What the runner adds is evidence. An audit hook (which code in this process can neither remove nor
get under) reports, at the moment it happens, candidate code that inspects the interpreter (frames,
the garbage collector, tracing, ctypes) or opens the runner's own files; after the load and after
each call the runner reports what the candidate changed that a harness relies on (builtins, sys,
os, marshal, atexit and signal handlers). Each reply carries a token the trusted side sent first,
so a line the candidate wrote to the reply pipe itself is told apart. A candidate can silence this
evidence only by first doing something that is itself reported."""

#: Largest message either side sends, in bytes: a return value the runner cannot fit is refused.
MAX_MESSAGE = 8 << 20
#: Deepest nesting, and most values, in one return value. Both sides count alike, one level per
#: container (a dict's keys and values one below it) and one value per item, so a value the
#: runner writes always decodes and only a forged one is refused.
_MAX_DEPTH = 200
MAX_VALUES = 1 << 20
_TAGS = ("tuple", "set", "frozenset", "dict", "float")
_ESCAPES = {**{code: f"\\u{code:04x}" for code in range(32)}, 34: '\\"', 92: "\\\\"}
#: How many members a set or dict takes between two looks at the clock while it is built.
_CLOCK_EVERY = 64


class Unsupported(ValueError):
    """A value with no plain-data form (an object, a function, a generator...)."""


class OutOfTime(Exception):
    """Decoding reached the sandbox's deadline: the value cost more to build than the program
    had time for (members whose hashes collide make a set quadratic to build)."""


def decode(data, deadline=None, clock=None):
    """The value `to_json` wrote as `data` (parsed JSON); anything `to_json` never writes raises
    Unsupported. Only built-in types come out, so nothing decoded can run code when compared.
    With a `deadline` (on `clock`), sets and dicts are built member by member and OutOfTime is
    raised once it passes: a candidate's values are built on the trusted side, and it chooses
    their hashes (int subclasses with distinct hashes in the sandbox become plain ints that all
    hash alike here)."""
    count = [0]

    def members(pairs, add):
        for index, pair in enumerate(pairs):
            add(*pair)
            if deadline is not None and index % _CLOCK_EVERY == 0 and clock() > deadline:
                raise OutOfTime("building the returned value outlived the time limit")

    def value(data, depth):
        count[0] += 1
        if depth > _MAX_DEPTH:
            raise Unsupported(f"nested more than {_MAX_DEPTH} deep")
        if count[0] > MAX_VALUES:
            raise Unsupported(f"more than {MAX_VALUES} values")
        kind = type(data)
        if data is None or kind in (bool, int, float, str):
            return data
        if kind is list:
            return [value(item, depth + 1) for item in data]
        if kind is not dict or len(data) != 1:
            raise Unsupported(f"not a plain-data encoding: {kind.__name__}")
        ((tag, payload),) = data.items()
        if tag == "float" and payload in ("nan", "inf", "-inf"):
            return float(payload)
        if tag not in _TAGS or type(payload) is not list:
            raise Unsupported(f"unknown tag {tag!r}")
        if tag == "dict":
            if any(type(pair) is not list or len(pair) != 2 for pair in payload):
                raise Unsupported("a dict item is not a pair")
            items = [(value(k, depth + 1), value(v, depth + 1)) for k, v in payload]
        else:
            items = [(value(item, depth + 1),) for item in payload]
        if tag == "tuple":
            return tuple(item for (item,) in items)
        built = {} if tag == "dict" else set()
        try:
            members(items, built.__setitem__ if tag == "dict" else built.add)
        except TypeError as exc:  # an unhashable key or member
            raise Unsupported(str(exc)) from None
        return frozenset(built) if tag == "frozenset" else built

    return value(data, 0)


def _writers(
    isinstance=isinstance,
    bool=bool,
    int=int,
    float=float,
    str=str,
    dict=dict,
    list=list,
    tuple=tuple,
    frozenset=frozenset,
    set=set,
    type=type,
    ord=ord,
    UnicodeEncodeError=UnicodeEncodeError,
    Unsupported=Unsupported,
    max_depth=_MAX_DEPTH,
    max_values=MAX_VALUES,
    escapes=_ESCAPES,
):
    """`to_json` and `message`, with every built-in they use bound here: a candidate that patches
    `builtins` (or this module) cannot change what the runner writes, only get reported."""

    def to_json(value, depth=0, count=None):
        """JSON text for `value` as plain data: None, bool, int, str and finite float as themselves,
        a list as a list; tuples, sets, dicts and non-finite floats as a one-key object
        ({"tuple": [...]}, {"dict": [[key, value], ...]}, {"float": "nan"}). Subclasses of these
        (a Counter, a namedtuple, an IntEnum) become their base type; anything else is Unsupported.
        Runs in the sandbox: base-type methods, so a subclass cannot choose its own text.
        `count` holds the values written so far, counted as `decode` counts them."""
        if count is None:
            count = [0]
        count[0] += 1
        if depth > max_depth:
            raise Unsupported(f"nested more than {max_depth} deep")
        if count[0] > max_values:
            raise Unsupported(f"more than {max_values} values")
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if int.__index__(value) else "false"
        if isinstance(value, int):
            return int.__repr__(int.__index__(value))  # ValueError past 4300 digits
        if isinstance(value, float):
            number = float.__float__(value)
            text = float.__repr__(number)
            return text if number - number == 0.0 else '{"float":"' + text + '"}'
        if isinstance(value, str):
            return json_string(str.__str__(value))
        if isinstance(value, dict):
            pairs = (
                f"[{to_json(k, depth + 1, count)},{to_json(v, depth + 1, count)}]"
                for k, v in dict.items(value)
            )
            return '{"dict":[' + ",".join(pairs) + "]}"
        for kind in (list, tuple, frozenset, set):
            if isinstance(value, kind):
                items = ",".join(to_json(item, depth + 1, count) for item in kind.__iter__(value))
                return f"[{items}]" if kind is list else f'{{"{kind.__name__}":[{items}]}}'
        raise Unsupported(type(value).__name__)

    def json_string(text):
        escaped = text.translate(escapes)
        if not escaped.isascii():
            try:
                escaped.encode()
            except UnicodeEncodeError:  # lone surrogates: JSON can carry them only escaped
                escaped = "".join(
                    f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in escaped
                )
        return f'"{escaped}"'

    def message(**fields):
        """A flat JSON object; `value` is JSON text already."""
        parts = []
        for key, value in fields.items():
            if key != "value":
                value = to_json(value)
            parts.append(f'"{key}":{value}')
        return "{" + ",".join(parts) + "}"

    return to_json, message


to_json, message = _writers()


def main() -> None:
    """One function, so the candidate cannot reach its parts by name."""
    import _signal
    import atexit
    import builtins
    import marshal
    import os
    import sys

    # Bound here: a candidate that patches builtins cannot reach the runner's own names.
    from builtins import (  # noqa: UP029
        BaseException,
        RecursionError,
        SystemExit,
        ValueError,
        compile,
        dict,
        exec,
        getattr,
        int,
        isinstance,
        len,
        open,
        set,
        str,
        type,
        vars,
    )

    encode, make_message, unsupported = to_json, message, Unsupported
    write, unmarshal, exit_now = os.write, marshal.loads, os._exit
    stdlib = os.path.dirname(os.__file__)
    me = os.path.abspath(__file__)

    # The pipes stay on fds only the runner names; the candidate's own output goes to stderr.
    requests = os.fdopen(os.dup(0), "rb")
    reply_fd = os.dup(1)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    token = requests.readline().strip() + b" "

    def send(text) -> None:
        data = token + text.encode() + b"\n"
        while data:
            data = data[write(reply_fd, data) :]

    send(make_message(started=True))

    seen = set()

    def report(what) -> None:
        if what not in seen:
            seen.add(what)
            send(make_message(seen=what))

    # -- evidence from the audit hook ------------------------------------------------------------
    introspection = {
        "sys._getframe",
        "sys._current_frames",
        "sys.settrace",
        "sys.setprofile",
        "sys.addaudithook",
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "object.__getattr__",  # tb_frame, gi_frame, cr_frame, f_code...
    }
    busy = [False]

    def by_candidate(frame) -> bool:
        name = frame.f_code.co_filename
        if name.endswith("inspect.py") and frame.f_back is not None:  # inspect.stack() & co.
            name = frame.f_back.f_code.co_filename
        return not (name == me or name.startswith(stdlib) or name.startswith("<frozen"))

    def harness_path(path) -> bool:
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        if not isinstance(path, str):
            return False
        path = os.path.normpath(os.path.join("/tmp", path))
        parts = path.split("/")
        if len(parts) > 2 and parts[1] == "proc":
            return parts[2] in ("self", "thread-self") or parts[2].isdigit()
        return parts[1] == "job" or path.startswith("/dev/fd")

    def watched_event(event, args) -> bool:
        if event == "object.__setattr__":  # a function's code swapped
            return len(args) > 1 and args[1] == "__code__"
        return event in introspection

    def hook(event, args) -> None:
        if busy[0]:
            return
        busy[0] = True
        try:
            if event in ("open", "os.listdir", "os.scandir"):
                if args and harness_path(args[0]):
                    report(f"read_harness:{args[0]}")
            elif event.startswith("ctypes."):
                report(f"introspection:{event}")
            elif watched_event(event, args) and by_candidate(sys._getframe(1)):
                detail = f":{args[1]}" if event.startswith("object.") else ""
                report(f"introspection:{event}{detail}")
        finally:
            busy[0] = False

    # -- evidence from what the candidate changed ------------------------------------------------
    watched = [
        (os, ("write", "read", "_exit", "dup2", "fdopen")),
        (sys, ("exit", "settrace", "setprofile", "addaudithook", "_getframe", "modules")),
        (marshal, ("loads",)),
        (builtins, tuple(vars(builtins))),
    ]
    snapshot = {(m.__name__, a): getattr(m, a, None) for m, names in watched for a in names}
    modules = {name: sys.modules[name] for name in ("os", "sys", "marshal", "builtins")}
    runner = dict(vars(sys.modules["__main__"]))  # this module: to_json, message...
    signals = {s: _signal.getsignal(s) for s in _signal.valid_signals() if s < _signal.SIGRTMIN}

    def check_state() -> None:
        for (module, name), value in snapshot.items():
            if getattr(sys.modules.get(module), name, None) is not value:
                report(f"patched:{module}.{name}")
        for name in set(vars(builtins)) - {n for m, n in snapshot if m == "builtins"} - {"_"}:
            report(f"patched:builtins.{name}")
        now = getattr(sys.modules.get("__main__"), "__dict__", {})
        for name in set(runner) | set(now):
            if now.get(name) is not runner.get(name) and name != "__warningregistry__":
                report(f"patched:runner.{name}")
        for name, module in modules.items():
            if sys.modules.get(name) is not module:
                report(f"patched:sys.modules[{name!r}]")
        if sys.gettrace() is not None or sys.getprofile() is not None:
            report("patched:trace_function")
        if atexit._ncallbacks():
            report("patched:atexit_handler")
        for number, handler in signals.items():
            if _signal.getsignal(number) != handler:
                report(f"patched:signal_handler:{number}")

    def failure(exc):
        try:
            text = str(exc)[:500]
        except BaseException:
            text = "<unprintable>"
        info = {"raised": type(exc).__name__, "message": text, "line": None}
        errno = getattr(exc, "errno", None)
        info["errno"] = errno if type(errno) is int else None
        if isinstance(exc, SystemExit):
            info["exit_code"] = exc.code if type(exc.code) is int or exc.code is None else 1
        lines, tb = source.splitlines(), exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == "solution.py" and 0 < tb.tb_lineno <= len(lines):
                info["line"] = lines[tb.tb_lineno - 1].strip()[:300]
            tb = tb.tb_next
        return info

    with open(sys.argv[1]) as f:
        source = f.read()
    sys.addaudithook(hook)
    namespace = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(source, "solution.py", "exec"), namespace)
    except BaseException as exc:  # a SystemExit too: it ended the load early
        check_state()
        send(make_message(loaded=False, **failure(exc)))
    else:
        check_state()
        send(make_message(loaded=True))
    while True:
        header = requests.read(4)
        body = requests.read(int.from_bytes(header, "big")) if len(header) == 4 else b""
        if not body:
            exit_now(3)  # the trusted side closed the pipe: it is done with us
        call_id, name, args, kwargs = unmarshal(body)
        try:
            result = namespace[name](*args, **kwargs)
            check_state()  # first: a patch that breaks what follows is reported all the same
            try:
                text = encode(result)
                if len(text) > MAX_MESSAGE - 1024:
                    raise unsupported(f"a return value over {MAX_MESSAGE >> 20} MiB")
                reply = make_message(id=call_id, value=text)
            except (unsupported, RecursionError, ValueError) as exc:
                reply = make_message(id=call_id, unsupported=str(exc)[:200])
        except BaseException as exc:
            reply = make_message(id=call_id, **failure(exc))
        check_state()
        send(reply)


if __name__ == "__main__":
    main()
