"""Benchmark: the annotation tool under a burst of wrong admin passwords (issue 14, section 5).

Starts ``python -m annotation demo`` on loopback (from ``--root``: this tree by default, or any
other checkout, e.g. main's, for a before/after comparison), fires ``--burst`` concurrent
``POST /admin/login`` with wrong passwords (httpx, one connection each), and while the burst is
in flight (2 s in, by default) times one annotator page (``GET /a/<demo link>``) from its own
connection. Then it tries the correct password
once and, if refused, after the ``Retry-After`` the server announced. Prints the status counts,
the annotator's latency, its ratio to the 1 s target (< 1 = met) and how the real admin fares.

    python benchmarks/bench_annotation_attack.py [--burst 300] [--root /path/to/checkout]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 1.0
PASSWORD = "bench-admin-password"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _run(base: str, link: str, burst: int, delay_s: float, separate: bool) -> dict:
    import httpx

    limits = httpx.Limits(max_connections=burst + 10, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120.0) as client:
        origin = {"Origin": base}

        async def wrong(i: int) -> int:
            r = await client.post("/admin/login", data={"password": f"wrong-{i}"}, headers=origin)
            return r.status_code

        def annotator_thread() -> float:
            # its own thread and connection: the attacker's client loop does not delay it
            time.sleep(delay_s)
            with httpx.Client(base_url=base, timeout=120.0) as c:
                t = time.perf_counter()
                r = c.get(f"/a/{link}")
                r.raise_for_status()
                return time.perf_counter() - t

        async def annotator_same() -> float:
            # from the burst's own client, as a browser tab next to the attack would
            await asyncio.sleep(delay_s)
            t = time.perf_counter()
            r = await client.get(f"/a/{link}")
            r.raise_for_status()
            return time.perf_counter() - t

        first = asyncio.to_thread(annotator_thread) if separate else annotator_same()
        t0 = time.perf_counter()
        results = await asyncio.gather(first, *(wrong(i) for i in range(burst)))
        burst_s = time.perf_counter() - t0
        latency, codes = results[0], collections.Counter(results[1:])
        r = await client.post("/admin/login", data={"password": PASSWORD}, headers=origin)
        admin = {"first_try": r.status_code, "retry_after_s": r.headers.get("Retry-After")}
        if r.status_code == 429 and r.headers.get("Retry-After"):
            wait = float(r.headers["Retry-After"])
            if wait <= 30:
                await asyncio.sleep(wait)
                r = await client.post("/admin/login", data={"password": PASSWORD}, headers=origin)
                admin["after_retry_after"] = r.status_code
        return {
            "codes": dict(sorted(codes.items())),
            "annotator_s": latency,
            "burst_s": burst_s,
            "admin": admin,
        }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--burst", type=int, default=300, help="concurrent wrong passwords (default: 300)")
    ap.add_argument(
        "--root",
        default=str(Path(__file__).resolve().parents[1]),
        help="checkout whose annotation package is served (default: this tree)",
    )
    ap.add_argument(
        "--delay",
        type=float,
        default=2.0,
        help="seconds after the burst starts when the annotator's request is sent (default: 2, when the "
        "whole burst has reached the server)",
    )
    ap.add_argument(
        "--annotator-client",
        choices=("same", "separate"),
        default="separate",
        help="send the annotator's request from another thread with its own connection (separate: the "
        "server's latency) or from the burst's own client (same: also waits for that client's "
        "300 connections) (default: separate)",
    )
    a = ap.parse_args(argv)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "PYTHONPATH": a.root, "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "annotation",
            "demo",
            "--db",
            f"sqlite:///{tmp}/study.db",
            "--port",
            str(port),
            "--admin-password",
            PASSWORD,
            "--analysis-dir",
            f"{tmp}/an",
        ]
        proc = subprocess.Popen(
            cmd, cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            link = None
            lines = []
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                line = proc.stdout.readline()
                if not line:
                    break
                lines.append(line)
                m = re.search(r"annotator demo: \S+/a/(\S+)", line)
                if m:
                    link = m.group(1)
                    break
            if link is None:
                print("".join(lines), file=sys.stderr)
                raise SystemExit("the demo did not print the annotator link")
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("the demo server did not start") from None
                    time.sleep(0.1)
            res = asyncio.run(_run(base, link, a.burst, a.delay, a.annotator_client == "separate"))
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"code: {a.root}")
    print(f"burst of {a.burst} wrong passwords: status counts {res['codes']} in {res['burst_s']:.2f} s")
    print(
        f"annotator page during the burst ({a.annotator_client} client, sent {a.delay:g} s in): {res['annotator_s']:.3f} s "
        f"(ratio to the {TARGET_S:g} s target: {res['annotator_s'] / TARGET_S:.2f})"
    )
    print(f"real admin afterwards: {res['admin']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
