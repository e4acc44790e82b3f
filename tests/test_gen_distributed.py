"""``accelerate launch`` sharding: 1 process and 2 CPU processes write the same corpus."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("accelerate")

from dialfork_dataset.taxonomy import forks_per_source  # noqa: E402
from generation.distributed import (  # noqa: E402
    assign_shards,
    backend_options_for_process,
    existing_num_shards,
    launched_distributed,
)

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def corpus_files(out: Path) -> dict[str, list[str]]:
    """Record lines per file, with ``code_version`` blanked: it hashes the source files, which other
    work in this tree may touch between the two runs."""
    files = {}
    for p in sorted(out.glob("*.jsonl")):
        lines = p.read_text(encoding="utf-8").splitlines()
        versions = {json.loads(line)["code_version"] for line in lines}
        assert len(versions) == 1
        tag = f'"code_version":"{versions.pop()}"'
        files[p.name] = [line.replace(tag, '"code_version":""') for line in lines]
    return files


def test_assign_shards_and_device_placement():
    one = SimpleNamespace(num_processes=1, process_index=0, device="cpu")

    class Split:  # the contract of PartialState.split_between_processes for a single process
        def __init__(self, state):
            self.state = state

        def __call__(self, items):
            from contextlib import contextmanager

            @contextmanager
            def cm():
                yield items

            return cm()

    one.split_between_processes = Split(one)
    assert assign_shards(3, one) == [0, 1, 2]
    with pytest.raises(ValueError, match="num_shards must be an integer >= 1"):
        assign_shards(0, one)
    cfg = SimpleNamespace(backend="transformers", backend_options={"model": "m", "device": "auto"})
    two = SimpleNamespace(num_processes=2, device="cuda:1")
    assert backend_options_for_process(cfg, two) == {"model": "m", "device": "cuda:1"}
    assert backend_options_for_process(cfg, one) == {"model": "m", "device": "auto"}
    pinned = SimpleNamespace(backend="transformers", backend_options={"model": "m", "device": "cpu"})
    assert backend_options_for_process(pinned, two)["device"] == "cpu"
    spread = SimpleNamespace(backend="transformers", backend_options={"model": "m", "device_map": "auto"})
    with pytest.raises(ValueError, match="device_map cannot be combined with several processes"):
        backend_options_for_process(spread, two)
    other = SimpleNamespace(backend="openai", backend_options={"model": "m"})
    assert backend_options_for_process(other, two) == {"model": "m"}


def test_existing_num_shards(tmp_path):
    assert existing_num_shards(tmp_path) is None
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "run.json").write_text(json.dumps({"num_shards": 3}))
    assert existing_num_shards(tmp_path) == 3
    (tmp_path / "shards" / "run.json").write_text("{torn")
    assert existing_num_shards(tmp_path) is None


def test_launched_distributed(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not launched_distributed()
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert launched_distributed()


def test_one_and_two_processes_write_the_same_corpus(tmp_path, star_dir):
    from test_gen_hf import tiny_corpus_model

    from generation.backends.hf import TransformersBackend
    from generation.distributed import generate_distributed
    from generation.engine import GenerationConfig

    model = tiny_corpus_model(tmp_path / "m", star_dir)
    opts = {"model": model, "max_new_tokens": 1}

    # one process (not launched): the plain path
    one = GenerationConfig(
        star=str(star_dir),
        out=str(tmp_path / "one"),
        backend="transformers",
        backend_options=opts,
        tasks=("weather",),
        per_task=2,
        budget=3,
    )
    m1 = generate_distributed(one, backend=TransformersBackend(**opts), progress=False)
    n = forks_per_source()  # 16 for the paper's types
    assert m1.counts["total"]["records"] == 2 * (1 + n) and m1["num_shards"] == 1

    # two CPU processes: accelerate launch of the CLI (--multi_gpu starts torchrun-style workers; with
    # no GPU, generation.distributed puts them in a gloo CPU group)
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    out2 = tmp_path / "two"
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        "-m",
        "generation",  # the CLI hands off to the sharding
        "--backend",
        "transformers",
        "--model",
        str(model),
        "--backend-option",
        "max_new_tokens=1",
        "--star",
        str(star_dir),
        "--out",
        str(out2),
        "--tasks",
        "weather",
        "--per-task",
        "2",
        "--budget",
        "3",
        "--keep-shards",
        "--no-progress",
        "--no-check-conformance",
    ]  # as the one-process config (the check is tested in test_conformance_check)
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert (
        f"{2 * (1 + n)} records (2 conformant, {2 * n} forks; 0 scenario(s) dropped) from 2 process(es)"
        in proc.stdout
    )
    assert "process 0/2: shard 0 of 2" in proc.stderr and "process 1/2: shard 1 of 2" in proc.stderr

    shards = sorted(p.name for p in (out2 / "shards").glob("shard-*"))
    assert shards == ["shard-00000-of-00002.jsonl.part", "shard-00001-of-00002.jsonl.part"]
    assert all((out2 / "shards" / s).stat().st_size > 0 for s in shards)  # each process wrote its own
    assert corpus_files(out2) == corpus_files(tmp_path / "one")  # the same records, in the same order
    m2 = json.loads((out2 / "manifest.json").read_text())
    assert m2["num_shards"] == 2 and m2["counts"]["total"] == m1.counts["total"]


FAILING_LAUNCHER = """
import json, sys
import generation.engine as engine
import generation.engine.run as engine_run
from generation.distributed import generate_distributed, process_state

state = process_state()
if state.process_index == 1:
    def boom(*a, **k):
        raise RuntimeError("simulated crash in process 1")
    engine_run.generate_units = boom  # where generate_corpus looks it up
cfg = engine.GenerationConfig(**json.loads(sys.argv[1]))
try:
    generate_distributed(cfg, progress=False, state=state)
except Exception as e:
    print(f"process {state.process_index}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    sys.exit(3)
"""


def test_a_failed_process_stops_every_process_and_nothing_is_merged(tmp_path, star_dir):
    launcher = tmp_path / "launch.py"
    launcher.write_text(FAILING_LAUNCHER)
    out = tmp_path / "out"
    cfg = {"star": str(star_dir), "out": str(out), "backend": "template", "tasks": ["weather"], "per_task": 2}
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(free_port()),
        str(launcher),
        json.dumps(cfg),
    ]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert proc.returncode != 0
    assert "process 1: RuntimeError: simulated crash in process 1" in proc.stderr
    assert "process 0: GenerationError:" in proc.stderr and "another process failed" in proc.stderr
    assert not (out / "manifest.json").exists() and not (out / "weather.jsonl").exists()
    done = (out / "shards" / "shard-00000-of-00002.jsonl.part").read_text()
    assert done.count('{"_unit":') == 1  # process 0 finished its own shard, kept for the resume
