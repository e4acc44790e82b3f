"""Start a web app in a subprocess for a test, in a way that holds on a loaded machine.

Gradio's ``launch`` gives its own server 5 s to start, then probes it with a 3 s HEAD request,
and exits when either is missed; a starved process can miss them. A port chosen by binding
port 0 can also be taken by another process before the app binds it. Both end the app before
it serves, so :func:`start_app` starts it again on a fresh port (a bounded number of times).
Everything it waits for is bounded and measured on the monotonic clock.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

APP_START_S = 300.0  # one start of the app, bounded
APP_STARTS = 3  # starts before the test fails


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_ok(url: str, timeout: float = 30.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
            return r.status == 200
    except OSError:
        return False


def stop(proc: subprocess.Popen) -> None:
    """Stop the app by its own PID."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_app(
    launch: Callable[[int], tuple[list[str], dict]],
    cwd: Path,
    log_dir: Path,
    ready_paths: tuple[str, ...] = ("/", "/config"),
) -> tuple[subprocess.Popen, str, Path]:
    """Start ``launch(port)`` (its command and environment) until it serves every path in
    ``ready_paths`` with 200; returns the process, its base URL and its log. Fails the test with
    every log when it exited :data:`APP_STARTS` times before serving, or did not serve within
    :data:`APP_START_S`. The caller stops the process with :func:`stop`."""
    logs = []
    for i in range(APP_STARTS):
        port = free_port()
        cmd, env = launch(port)
        log = log_dir / f"app{i}.log"
        logs.append(log)
        with open(log, "w") as fh:
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=cwd)
        base = f"http://127.0.0.1:{port}"
        end = time.monotonic() + APP_START_S
        while time.monotonic() < end:
            if proc.poll() is not None:
                break  # exited before serving: start again on a fresh port
            if all(get_ok(base + p) for p in ready_paths):
                return proc, base, log
            time.sleep(0.5)
        else:
            stop(proc)
            pytest.fail(
                f"the app did not serve {base} within {APP_START_S:.0f} s:\n{log.read_text()[-3000:]}"
            )
    pytest.fail(
        f"the app exited {APP_STARTS} times before serving:\n"
        + "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in logs)
    )
