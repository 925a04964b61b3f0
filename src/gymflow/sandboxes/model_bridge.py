"""The program that runs a command inside a sandbox with no network, and lets it reach the model.

Run inside the sandbox by the host's `/usr/bin/python3 -I` (standard library only), as
`model_bridge.py SOCKET PORT COMMAND...`: it listens on 127.0.0.1:PORT in the sandbox's own
network namespace (where nothing else exists), starts COMMAND, and carries every connection made
to that port to the unix socket SOCKET, which the host bound in and which leads to the model
server alone (gymflow.sandboxes.model_socket). It listens before COMMAND starts, so the agent's
first call finds it, and exits with COMMAND's status (128 + N when a signal N ended it)."""

import contextlib
import signal
import socket
import subprocess
import sys
import threading


def _pump(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (sink, source):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _serve(listener, path):
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def main():
    path, port, command = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    listener = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=_serve, args=(listener, path), daemon=True).start()
    child = subprocess.Popen(command)
    # a stop from outside (the time limit) reaches the command too
    signal.signal(signal.SIGTERM, lambda *_: child.terminate())
    code = child.wait()
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main()
