"""The bubblewrap workspace sandbox holds its limits: of the host only the system's programs,
/etc without its secrets and the agent's installs, read-only (nothing else is there at all), no
network but the model endpoint, the time and memory limits, the answer key hidden, and no host
file read through a link the sandbox left."""

from __future__ import annotations

import asyncio
import http.server
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gymflow.sandboxes import SandboxError, SandboxSpec, bubblewrap
from gymflow.sandboxes.bubblewrap import BubblewrapSandbox
from gymflow.verifiers.sandbox_host import SandboxUser
from tests.conftest import require_tool


@pytest.fixture(autouse=True)
def _bwrap() -> None:
    require_tool("bwrap")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    folder = tmp_path / "workspace"
    folder.mkdir()
    (folder / "data.txt").write_text("hello\n")
    return folder


@pytest.fixture
def model_server() -> Iterator[str]:
    """A plain HTTP server on 127.0.0.1 standing in for the model endpoint."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def run(coro):
    return asyncio.run(coro)


def test_workspace_writable_host_root_read_only(workspace: Path) -> None:
    async def scenario():
        async with BubblewrapSandbox(SandboxSpec(workspace=workspace)) as box:
            result = await box.exec(
                "cat data.txt && echo new > made.txt && pwd; "
                "touch /usr/gymflow-probe 2>&1; touch /etc/gymflow-probe 2>&1; echo done",
                timeout_s=30,
            )
            out = workspace.parent / "made.txt"
            await box.download("/app/made.txt", out)
            return result, out.read_text()

    result, made = run(scenario())
    assert result.exit_code == 0, result.output
    assert result.output.startswith("hello\n/app\n")
    assert result.output.count("Read-only file system") == 2
    assert made == "new\n"
    assert not Path("/usr/gymflow-probe").exists()
    # the sandbox worked on its own copy: the task's folder is unchanged
    assert not (workspace / "made.txt").exists()


def _as_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    """The branch of a non-root owner without subordinate ids: the commands keep its user id."""
    monkeypatch.setattr(bubblewrap, "sandbox_user", lambda uid: SandboxUser(None))


@pytest.mark.parametrize("as_caller", [False, True], ids=["own-uid", "caller-uid"])
def test_the_root_shows_the_system_and_the_installs_only(
    workspace: Path, host_folder: Path, monkeypatch: pytest.MonkeyPatch, as_caller: bool
) -> None:
    if as_caller:
        _as_caller(monkeypatch)
    home = host_folder / "home"
    monkeypatch.setenv("HOME", str(home))
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text("SECRET-in-home\n")
    # an interpreter in a folder that stays hidden (pyenv under the home), and a venv of it
    interpreter = home / ".pyenv" / "versions" / "9.9"
    (interpreter / "bin").mkdir(parents=True)
    (interpreter / "bin" / "tool").write_text("the interpreter's own\n")
    (home / ".pyenv" / "beside.txt").write_text("SECRET-beside-the-interpreter\n")
    venv = host_folder / "agents" / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "agent").write_text("the agent\n")
    (venv / "pyvenv.cfg").write_text(f"home = {interpreter / 'bin'}\nversion = 9.9\n")
    (host_folder / "agents" / "other").mkdir()
    (host_folder / "agents" / "other" / "solve.sh").write_text("SECRET-another-copy\n")
    spec = SandboxSpec(workspace=workspace, installs=(venv,))
    probe = (
        f"ls /; echo ---; cat {venv}/bin/agent {interpreter}/bin/tool; "
        f"cat {home}/.aws/credentials {home}/.pyenv/beside.txt "
        f"{host_folder}/agents/other/solve.sh /etc/shadow; ls /etc/ssl/private; "
        "echo ---; id -u"
    )

    async def scenario():
        async with BubblewrapSandbox(spec) as box:
            return await box.exec(probe, timeout_s=30)

    result = run(scenario())
    top, seen, uid = result.output.split("---\n")
    expected = {"app", "bin", "dev", "etc", "lib", "logs", "proc", "run", "sbin", "solution"}
    expected |= {"tests", "tmp", "usr", host_folder.parts[1]}  # /var, down to the venv only
    expected |= {name for name in ("lib32", "lib64", "libx32") if os.path.lexists(f"/{name}")}
    assert set(top.split()) == expected, top
    assert "the agent\nthe interpreter's own\n" in seen, seen
    assert "SECRET" not in seen, seen
    for hidden in ("/.aws/credentials", "/.pyenv/beside.txt", "/agents/other/solve.sh"):
        assert f"{hidden}: No such file or directory" in seen, seen
    assert "root:" not in seen and "/etc/shadow: Permission denied" in seen, seen
    assert (uid.strip() == "0") is (as_caller and os.geteuid() == 0), uid


@pytest.mark.parametrize("as_caller", [False, True], ids=["own-uid", "caller-uid"])
def test_etc_names_the_sandboxs_user_and_not_the_hosts(
    workspace: Path, monkeypatch: pytest.MonkeyPatch, as_caller: bool
) -> None:
    if as_caller:
        _as_caller(monkeypatch)
    host_accounts = [line.split(":")[0] for line in Path("/etc/passwd").read_text().splitlines()]
    facts = "/etc/subuid /etc/machine-id /etc/hostname /etc/passwd-"

    async def scenario():
        async with BubblewrapSandbox(SandboxSpec(workspace=workspace)) as box:
            return await box.exec(
                f"id -un; cat /etc/passwd; echo ---; cat {facts} 2>/dev/null; echo ---; "
                "awk 'BEGIN { print \"awk through /etc/alternatives\" }'",
                timeout_s=30,
            )

    result = run(scenario())
    assert result.exit_code == 0, result.output
    names, facts_seen, awk = result.output.split("---\n")
    user, *accounts = names.splitlines()
    assert user == "sandbox", result.output
    listed = {line.split(":")[0] for line in accounts}
    assert listed == {"sandbox", "nobody"} | ({"root"} if "sandbox:x:0:" not in names else set())
    assert not set(host_accounts) - {"root", "nobody"} & {a.split(":")[0] for a in accounts}
    assert facts_seen == "", facts_seen
    assert awk == "awk through /etc/alternatives\n", awk


def test_an_install_that_would_show_the_users_folders_is_refused(
    workspace: Path, host_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = host_folder / "home"
    (home / "bin").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(host_folder / "config"))
    refused = BubblewrapSandbox.refusal(SandboxSpec(workspace=workspace, installs=(host_folder,)))
    assert refused is not None and f"needs {host_folder} shown" in refused, refused
    # a venv of an interpreter installed at ~/bin/python: its prefix is the home itself
    venv = host_folder / "venv"
    venv.mkdir()
    (venv / "pyvenv.cfg").write_text(f"home = {home / 'bin'}\n")
    refused = BubblewrapSandbox.refusal(SandboxSpec(workspace=workspace, installs=(venv,)))
    assert refused is not None and f"holds {home}" in refused, refused
    # a prefix inside the home is shown alone, as pyenv's is
    inside = SandboxSpec(workspace=workspace, installs=(home / "bin",))
    assert BubblewrapSandbox.refusal(inside) is None

    async def scenario():
        with pytest.raises(SandboxError, match="a sandbox never shows that"):
            await BubblewrapSandbox(SandboxSpec(workspace=workspace, installs=(venv,))).start()

    run(scenario())


def test_no_network_but_the_model_endpoint(workspace: Path, model_server: str) -> None:
    port = model_server.split(":")[2].split("/")[0]
    probe = (
        "import sys, urllib.request\n"
        "def get(url):\n"
        "    try:\n"
        "        return urllib.request.urlopen(url, timeout=3).read().decode()\n"
        "    except OSError as exc:\n"
        "        return f'refused: {exc}'\n"
        "print(get(sys.argv[1] + '/models'))\n"
        f"print(get('http://127.0.0.1:{port}/v1/models'))\n"  # the host's port itself
        "print(get('http://1.1.1.1/'))\n"
    )

    async def scenario():
        async with BubblewrapSandbox(SandboxSpec(workspace=workspace)) as box:
            (workspace.parent / "probe.py").write_text(probe)
            await box.upload(workspace.parent / "probe.py", "/tmp")
            inside = await box.expose_model(model_server)
            return inside, await box.exec(f"python3 /tmp/probe.py {inside}", timeout_s=30)

    inside, result = run(scenario())
    assert inside == "http://127.0.0.1:8765/v1"
    lines = result.output.splitlines()
    assert lines[0] == '{"ok": true}', result.output
    assert lines[1].startswith("refused"), "the host's own port is unreachable inside"
    assert lines[2].startswith("refused"), "the internet is unreachable inside"


def test_time_limit_kills_the_whole_tree(workspace: Path) -> None:
    async def scenario():
        async with BubblewrapSandbox(SandboxSpec(workspace=workspace)) as box:
            stopped = await box.exec("(sleep 30; echo late > late.txt) & sleep 30", timeout_s=1)
            after = await box.exec("sleep 2; ls", timeout_s=30)
            return stopped, after

    stopped, after = run(scenario())
    assert stopped.limit == "timeout" and stopped.exit_code is None
    assert stopped.seconds < 10
    assert "late.txt" not in after.output


def test_memory_limit(workspace: Path) -> None:
    spec = SandboxSpec(workspace=workspace, memory_mb=128)

    async def scenario():
        async with BubblewrapSandbox(spec) as box:
            return await box.exec(
                "python3 -c 'x = bytearray(400 << 20); print(len(x))'", timeout_s=30
            )

    result = run(scenario())
    assert result.exit_code != 0
    assert "419430400" not in result.output


def test_hidden_paths_and_root_only_files_unreadable(workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "answers"
    secret.mkdir()
    (secret / "solve.sh").write_text("the answer\n")
    spec = SandboxSpec(workspace=workspace, hidden=(secret,))

    async def scenario():
        async with BubblewrapSandbox(spec) as box:
            return await box.exec(f"ls {secret}; cat {secret}/solve.sh; echo end", timeout_s=30)

    result = run(scenario())
    assert "the answer" not in result.output
    assert result.output.rstrip().endswith("end")


def test_download_never_follows_a_link(workspace: Path, tmp_path: Path) -> None:
    target = tmp_path / "out.txt"

    async def scenario():
        async with BubblewrapSandbox(SandboxSpec(workspace=workspace)) as box:
            await box.exec(
                "mkdir -p /logs/verifier && ln -s /etc/hostname /logs/verifier/reward.txt",
                timeout_s=30,
            )
            with pytest.raises(SandboxError):
                await box.download("/logs/verifier/reward.txt", target)
            with pytest.raises(SandboxError, match="not in the sandbox's folders"):
                await box.download("/etc/passwd", target)
            with pytest.raises(SandboxError, match="not in the sandbox's folders"):
                await box.download("/app/../etc/passwd", target)

    run(scenario())
    assert not target.exists()


def test_refuses_what_it_cannot_honour(workspace: Path) -> None:
    (workspace / "Dockerfile").write_text("FROM debian\n")
    assert "Dockerfile" in BubblewrapSandbox.refusal(
        SandboxSpec(workspace=workspace, dockerfile=workspace)
    )
    assert "internet" in BubblewrapSandbox.refusal(
        SandboxSpec(workspace=workspace, allow_internet=True)
    )
    assert "CPUs" in BubblewrapSandbox.refusal(SandboxSpec(workspace=workspace, cpus=4096))
    assert BubblewrapSandbox.refusal(SandboxSpec(workspace=workspace)) is None


def test_stop_removes_the_scratch_folder(workspace: Path) -> None:
    async def scenario():
        box = BubblewrapSandbox(SandboxSpec(workspace=workspace))
        await box.start()
        scratch = box._scratch
        assert scratch is not None and scratch.is_dir()
        await box.stop()
        await box.stop()  # twice is harmless
        return scratch

    assert not run(scenario()).exists()
