"""The guard CLI as real processes with the packaged MiniLM: the fake upstream and the proxy are
started with ``python -m dialfork_metrics.guard`` on free ports and stopped by their own PIDs. A
proxy killed with SIGKILL in the middle of a concurrent run and restarted on the same database
continues every conversation with the verdicts of an uninterrupted run (the in-process monitor),
with no turn lost, duplicated or misattributed. Start-up refuses unusable monitor files and
databases with a one-line message and exit code 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from dialfork_metrics.guard import Monitor  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return env


def _cli(*args):
    return [sys.executable, "-m", "dialfork_metrics.guard", *map(str, args)]


def Proc(args, workdir, name):
    from dialfork_metrics.guard.loadgen import ServerProcess

    return ServerProcess(args, workdir, name, env=_env())


@pytest.fixture(scope="module")
def setup(template_corpus, tmp_path_factory):
    from dialfork_dataset.jsonl import write_jsonl
    from dialfork_metrics.task3 import load_examples

    root = tmp_path_factory.mktemp("guard_crash")
    train = [e for e in load_examples(template_corpus, "train") if e["task"] == "weather"]
    test = [e for e in load_examples(template_corpus, "test") if e["task"] == "weather"]
    path = Monitor.fit(train, detector="ss+nc", encoder="minilm").save(root / "weather.monitor")
    dialogues = [e for e in test if e["hallucination_type"] is None][:3] + [
        e for e in test if e["hallucination_type"] is not None
    ][::9][:7]
    write_jsonl(root / "dialogues.jsonl", dialogues)
    up = Proc(["fake-upstream", "--dialogues", root / "dialogues.jsonl", "--port", 0], root, "upstream")
    yield {"root": root, "monitor": path, "dialogues": dialogues, "upstream": up}
    up.stop()


@pytest.mark.slow
def test_kill9_mid_run_then_restart_gives_the_uninterrupted_verdicts(setup):
    from dialfork_metrics.guard.loadgen import check_against_monitor, play, turns_until_last_system
    from dialfork_metrics.guard.store import Store

    root, dialogues = setup["root"], setup["dialogues"]
    db = root / "crash.db"
    args = ["serve", "--upstream", setup["upstream"].url + "/v1", "--monitor", setup["monitor"], "--db", db]
    proxy = Proc([*args, "--port", 0], root, "proxy")
    port = proxy.port
    total = sum(t["speaker"] == "system" for d in dialogues for t in turns_until_last_system(d))
    done = []
    third = threading.Event()

    def on_reply(conv, k):
        done.append(conv)
        if len(done) >= total // 3:
            third.set()

    out = {}
    player = threading.Thread(
        target=lambda: out.setdefault(
            "r", play(proxy.url, dialogues, concurrency=len(dialogues), retry_for=900, on_reply=on_reply)
        )
    )
    player.start()
    assert third.wait(timeout=900), "the run did not get a third of the way"
    assert (
        proxy.kill9() == -signal.SIGKILL
    )  # in the middle of the run: requests in flight are lost to their clients
    n_killed = len(done)
    proxy = Proc([*args, "--port", port], root, "proxy")  # same address, same database
    try:
        player.join(timeout=1800)
        assert not player.is_alive()
        results = out["r"]
        assert n_killed < total and sum(r.retries for r in results) > 0  # the kill did interrupt the run
        counts = check_against_monitor(
            Monitor.load(setup["monitor"]),
            Store(db, Monitor.load(setup["monitor"]).fingerprint),
            results,
            {d["dialogue_id"]: d for d in dialogues},
        )
        assert counts["replies"] == total and counts["conversations"] == len(dialogues)
    finally:
        proxy.stop()


def test_startup_refuses_unusable_monitor_and_db(setup, tmp_path):
    import zipfile

    up = setup["upstream"].url + "/v1"

    def run(*args):
        p = subprocess.run(
            _cli("serve", "--upstream", up, "--port", 0, *args),
            capture_output=True,
            text=True,
            env=_env(),
            timeout=600,
        )
        return p.returncode, p.stderr.strip().splitlines()

    rc, err = run("--monitor", tmp_path / "nope.monitor", "--db", tmp_path / "a.db")
    assert rc == 2 and len(err) == 1 and "no such monitor file" in err[0]
    newer = tmp_path / "newer.monitor"
    with zipfile.ZipFile(setup["monitor"]) as z, zipfile.ZipFile(newer, "w") as out:
        for n in z.namelist():
            data = z.read(n)
            if n == "monitor.json":
                data = json.dumps({**json.loads(data), "format_version": 7}).encode()
            out.writestr(n, data)
    rc, err = run("--monitor", newer, "--db", tmp_path / "b.db")
    assert rc == 2 and len(err) == 1 and "version 7" in err[0] and "upgrade dialfork" in err[0]
    from dialfork_metrics.guard.store import Store

    Store(tmp_path / "other.db", "0" * 64).close()
    rc, err = run("--monitor", setup["monitor"], "--db", tmp_path / "other.db")
    assert rc == 2 and len(err) == 1 and "another monitor" in err[0]
    p = subprocess.run(
        _cli("serve", "--upstream", "ftp://x", "--monitor", setup["monitor"], "--db", tmp_path / "c.db"),
        capture_output=True,
        text=True,
        env=_env(),
        timeout=600,
    )
    assert p.returncode == 2 and "http(s) URL" in p.stderr
