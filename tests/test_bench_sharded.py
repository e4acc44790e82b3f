"""``accelerate launch -m dialfork_metrics.bench``: encoding sharded across 1 or 2 CPU processes
gives the same reports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from dialfork_metrics.sharded import (
    global_batches,
    is_worker_process,
    launched_by_accelerate,
    my_batches,
    unique_by_length,
)

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_batches_are_the_same_for_any_number_of_processes():
    texts = ["bb", "a", "ccc", "a", "dd", "e", "bb", "ffff"]
    items = unique_by_length(texts, len)
    assert items == ["ffff", "ccc", "bb", "dd", "a", "e"]  # distinct, longest first, ties sorted
    assert unique_by_length(texts[::-1], len) == items  # whatever the input order
    batches = global_batches(items, 4)
    assert batches == [["ffff", "ccc", "bb", "dd"], ["a", "e"]]
    for n in (1, 2, 3, 5):
        shards = [my_batches(7, i, n) for i in range(n)]
        assert sorted(i for s in shards for i in s) == list(range(7))  # disjoint, and all of them
    assert my_batches(7, 1, 3) == [1, 4]
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        global_batches(items, 0)
    with pytest.raises(ValueError, match="expected 0 <= index < num_processes"):
        my_batches(3, 2, 2)


def test_launched_by_accelerate():
    assert not launched_by_accelerate({})
    assert launched_by_accelerate({"ACCELERATE_MIXED_PRECISION": "no"})
    assert launched_by_accelerate({"WORLD_SIZE": "2"})
    assert not is_worker_process({}) and not is_worker_process({"RANK": "1"})  # not launched: no worker
    assert not is_worker_process({"WORLD_SIZE": "2", "RANK": "0"})
    assert is_worker_process({"WORLD_SIZE": "2", "RANK": "1"})
    assert not is_worker_process({"WORLD_SIZE": "2", "RANK": "x"})


def test_a_worker_exits_with_its_code_and_its_logs_flushed(tmp_path):
    script = (
        "import logging, sys; from dialfork_metrics.sharded import exit_worker\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n"
        "logging.getLogger('w').info('shard written'); print('out', end='')\n"
        "exit_worker(3)\n"
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 3 and p.stdout == "out" and "shard written" in p.stderr


def test_a_shard_is_written_once_and_a_cached_batch_is_skipped(tmp_path):
    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.sharded import encode_shard_texts

    texts = [f"turn number {i} {'x' * (i % 5)}" for i in range(10)]
    proc0 = SimpleNamespace(process_index=0, num_processes=2, is_local_main_process=True)
    proc1 = SimpleNamespace(process_index=1, num_processes=2, is_local_main_process=False)
    enc = Encoder("minilm", batch_size=3, cache_dir=tmp_path, show_progress=False)
    assert encode_shard_texts(enc, texts, proc0, progress=False) == 6  # batches 0 and 2 of 4
    assert len(list(enc._disk.dir.glob("*.npz"))) == 1  # one shard file for the process
    assert encode_shard_texts(enc, texts, proc0, progress=False) == 0  # all cached: nothing encoded
    other = Encoder(enc.name, batch_size=3, cache_dir=tmp_path, show_progress=False, model=enc.model)
    assert encode_shard_texts(other, texts, proc1, progress=False) == 4
    fresh = Encoder(enc.name, batch_size=3, cache_dir=tmp_path, show_progress=False, model=enc.model)
    got = fresh.encode(texts)
    assert fresh.stats["disk_hits"] == 10 and fresh.stats["encoded"] == 0  # the merged cache has every text
    plain = Encoder("minilm", show_progress=False, model=enc.model).encode(texts)
    assert got == pytest.approx(plain, rel=1e-5, abs=1e-6)
    with pytest.raises(ValueError, match="needs an encoder with a disk cache"):
        encode_shard_texts(Encoder("minilm", model=enc.model), texts, proc0)


def _report(out: Path) -> dict:
    rep = json.loads((out / "report.json").read_text(encoding="utf-8"))
    rep.pop("timings")
    rep["meta"].pop("data")
    return rep


def test_one_and_two_processes_give_the_same_report(tmp_path, star_dir):
    from dialfork_metrics.bench.corpus import load_corpus
    from dialfork_metrics.sharded import corpus_pairs, corpus_texts
    from generation import GenerationConfig, generate_corpus

    corpus = tmp_path / "corpus"
    generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(corpus), tasks=("weather",), per_task=1, seed=0),
        progress=False,
    )
    # a batch that holds every distinct (system, user) pair but not every distinct turn text, whatever
    # types are registered: the pairs make one batch, the texts at least two (one per process)
    records = load_corpus(str(corpus)).records
    batch = len(set(corpus_pairs(records)))
    assert batch < len(set(corpus_texts(records, transcripts=True)))
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    bench = [
        "-m",
        "dialfork_metrics.bench",
        "--data",
        str(corpus),
        "--tasks",
        "1,2",
        "--task1-methods",
        "flowkl,fbd,turn_count_diff",
        "--task1-compare",
        "fbd",
        "--task2-methods",
        "mean_turn,full_dialog,flowscore",
        "--bootstrap-resamples",
        "50",
        "--no-plots",
        "--batch-size",
        str(batch),
    ]
    procs = {}
    for n in (1, 2):
        # on a machine without GPUs, --multi_gpu starts torchrun-style workers that form a gloo CPU group
        # (accelerate's --cpu always starts one process)
        launch = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--num_processes",
            str(n),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
        ]
        launch += ["--multi_gpu", "--main_process_port", str(free_port())] if n > 1 else ["--cpu"]
        procs[n] = subprocess.Popen(
            launch + bench + ["--out", str(tmp_path / f"out{n}"), "--cache-dir", str(tmp_path / f"cache{n}")],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    logs = {}
    for n, p in procs.items():
        so, se = p.communicate(timeout=1200)
        assert p.returncode == 0, so[-2000:] + se[-3000:]
        logs[n] = se
    assert "process 0/2:" in logs[2] and "process 1/2:" in logs[2]  # each process encoded its own batches
    assert "process 0/1:" in logs[1]
    shards = {p.parent.name: [] for p in (tmp_path / "cache2").rglob("*.npz")}
    for p in (tmp_path / "cache2").rglob("*.npz"):
        shards[p.parent.name].append(p)
    assert len(shards) == 2  # one folder for the turn texts, one for the pairs
    assert sorted(map(len, shards.values())) == [1, 2]  # texts: one shard per process; the pairs: one batch
    assert _report(tmp_path / "out2") == _report(tmp_path / "out1")
    for name in ("task1_units.csv", "task2_units_minilm.csv"):
        assert (tmp_path / "out2" / name).read_bytes() == (tmp_path / "out1" / name).read_bytes()
