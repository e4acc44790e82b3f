"""Resume after SIGKILL: a generator subprocess is killed at random points of its run (random
amounts of output on disk, so mid-unit and mid-line kills happen), rerun each time; the final
record files must be byte-identical to an uninterrupted run."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from generation.engine import GenerationConfig, generate_corpus, shard_path

TASKS = "weather,bank_balance,hotel_book,trivia"
ROOT = Path(__file__).resolve().parents[1]


def _bytes(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.glob("*.jsonl"))}


def test_resume_after_sigkill_is_byte_identical(tmp_path, star_dir):
    ref = tmp_path / "ref"
    generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(ref), tasks=tuple(TASKS.split(",")), per_task=10, seed=3, batch_size=2
        ),
        progress=False,
    )
    expected = _bytes(ref)
    total = sum(len(b) for b in expected.values())
    out = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "generation",
        "--star",
        str(star_dir),
        "--out",
        str(out),
        "--tasks",
        TASKS,
        "--per-task",
        "10",
        "--seed",
        "3",
        "--batch-size",
        "2",
        "--no-progress",
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rng = random.Random(20261130)
    thresholds = sorted(rng.uniform(0.05, 0.95) * total for _ in range(4))
    spath = shard_path(out, 0, 1)
    kills = 0
    for thr in [0.0, *thresholds]:
        p = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while p.poll() is None and time.monotonic() < deadline:
            size = spath.stat().st_size if spath.exists() else -1
            if (thr == 0.0 and size >= 0) or (thr > 0 and size >= thr):
                break
            time.sleep(0.002)
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
    assert kills >= 3, "the runs finished before they could be killed; the test did not test resume"
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _bytes(out) == expected
    assert (out / "manifest.json").is_file() and not (out / "shards").exists()
