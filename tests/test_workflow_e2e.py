"""The example workflow file (examples/workflows/insurance.yaml, a domain written for DialFork, not
from STAR) end to end: template generation -> Hub export -> load_dataset -> the benchmark's Tasks 1
to 3 (packaged MiniLM) -> a streaming detector's prediction on the blind set, scored against the
gold."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import forks_per_source

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workflows" / "insurance.yaml"
TASKS = ("insurance_claim_status", "insurance_file_claim")
PER_TASK = 8  # sources per task (of 14), every registered type x four forks each
HIDDEN = 2  # per task, reserved by the key for the blind sets (20% of 8, rounded up; SPEC 4)
PUBLIC = PER_TASK - HIDDEN  # per task: halves of 3 for Task 3


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    from dialfork_dataset.hub import export_hub_layout
    from generation import GenerationConfig, generate_corpus

    root = tmp_path_factory.mktemp("workflow_e2e")
    manifest = generate_corpus(
        GenerationConfig(star=f"workflow:{EXAMPLE}", out=str(root / "corpus"), per_task=PER_TASK),
        progress=False,
    )
    info = export_hub_layout(root / "corpus", root / "hub", root / "gold", blind_key="00" * 32)
    return {"root": root, "manifest": manifest, "info": info}


def test_generation_from_the_workflow_file(pipeline):
    m = pipeline["manifest"]
    assert m["config"]["star"] == f"workflow:{EXAMPLE}"  # as given
    forks = forks_per_source()  # 16 for the paper's four types
    assert m.counts["total"] == {
        "scenarios": 2 * PER_TASK,
        "kept": 2 * PER_TASK,
        "dropped": 0,
        "conformant": 2 * PER_TASK,
        "forks": 2 * PER_TASK * forks,
        "records": 2 * PER_TASK * (1 + forks),
    }
    recs = [json.loads(line) for t in TASKS for line in (pipeline["root"] / "corpus" / f"{t}.jsonl").open()]
    assert {r["domain"] for r in recs} == {"insurance"}
    wic = [r for r in recs if r["hallucination_type"] == "WIC"]
    assert {(r["task"], r["substitute_task"]) for r in wic} == {
        TASKS,
        TASKS[::-1],
    }  # the other task of the domain
    conf = {r["dialogue_id"]: r for r in recs if r["hallucination_type"] is None}
    first = conf["insurance_file_claim-fc01"]
    assert first["turns"][1]["text"] in (
        "Hello, this is the claims service. How can I help you today?",
        "Good day, you've reached the claims service. What can I do for you?",
        "Hi there, how can I help you?",
    )
    text = " ".join(t["text"] for t in first["turns"])
    for value in ("Anna Keller", "MV-48213", "car accident", "3 March"):  # the scenario's slot values
        assert value in text
    assert Counter(r["fork_position"] for r in recs if r["hallucination_type"]) == {
        k: 2 * PER_TASK * forks // 4
        for k in (1, 2, 3, 4)  # every type at each of the 4 positions
    }


def test_load_dataset_every_config(pipeline):
    from datasets import load_dataset

    hub, cache = pipeline["root"] / "hub", pipeline["root"] / "hf_cache"
    n = {
        cfg: {s: len(d) for s, d in load_dataset(str(hub), cfg, cache_dir=str(cache)).items()}
        for cfg in ("conformant", "forked", "task3")
    }
    # two tasks, each PUBLIC public sources split in halves
    forks = forks_per_source()
    assert n["conformant"] == {"train": PUBLIC, "test": PUBLIC}
    assert n["forked"] == {"train": PUBLIC * forks, "test": PUBLIC * forks}
    assert n["task3"] == {"train": PUBLIC, "test": PUBLIC + PUBLIC * forks}
    # the hidden sources: one per task feeds the detector track (one dialogue each), one the metric track
    counts = pipeline["info"]["counts"]
    assert counts["blind"] == {"test": 2} and counts["blind_task2"] == {"test": 2 * forks}


def test_benchmark_tasks_1_to_3_and_a_streaming_detector(pipeline):
    from dialfork_metrics.bench import run_benchmark
    from dialfork_metrics.task3.__main__ import main as task3_main

    root = pipeline["root"]
    rep = run_benchmark(
        root / "hub",
        tasks=(1, 2, 3),
        encoders=("minilm",),
        task1_methods=("flowkl", "turn_count_diff", "random"),
        task2_methods=("mean_turn", "flowscore", "shared_prefix", "random"),
        task3_detectors=("first", "last", "random", "ss+nc"),
        n_resamples=200,
        plots=False,
        progress=False,
        cache_dir=str(root / "emb"),
    )
    units1 = rep["task1"]["units"]
    assert {(u["task"], u["type"]) for u in units1 if u["method"] == "flowkl"} == {
        (t, h) for t in TASKS for h in taxonomy.names()
    }
    assert all(-1 <= u["tau"] <= 1 for u in units1 if u["tau"] is not None)
    t2 = rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]
    assert t2["random"]["Avg"] == 0
    assert t2["flowscore"]["Avg"] > 0.3  # FlowScore orders the forks of a workflow it never saw
    t3 = rep["task3"]["minilm"]["results"]
    assert t3["ss+nc"]["counts"]["dialogues"] == PUBLIC + PUBLIC * forks_per_source()
    assert max(t3[b]["score"] for b in ("first", "last")) < 1

    out = root / "submission" / "ss_nc.jsonl"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        rc = task3_main(
            [
                "predict",
                "--data",
                str(root / "hub"),
                "--split",
                "blind",
                "--detector",
                "ss+nc",
                "--encoder",
                "minilm",
                "--cache-dir",
                str(root / "emb"),
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        assert rc == 0
        rc = task3_main(
            ["score", str(out), "--gold", str(root / "gold"), "--json-out", str(root / "score.json")]
        )
    assert rc == 0
    preds = [json.loads(line) for line in out.open()]
    assert len(preds) == 2  # the blind set: one dialogue per detector-track hidden source
    assert any(p["prediction"] is not None for p in preds)
    score = json.loads((root / "score.json").read_text())
    assert score["counts"]["dialogues"] == len(preds)
    # two blind dialogues: the Score needs a fork and a conformant one, which such a set may lack
    assert score["score"] is None or 0 <= score["score"] <= 100
