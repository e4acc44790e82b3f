"""The cross-reference protocol of Tasks 1 and 2 beside the paper's same-source one (issue 38):
no reference turn is shared with the forks, so the Shared-prefix control ranks nothing."""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from corpus_factory import make_records
from dialfork_dataset import taxonomy
from dialfork_dataset.views import task2_quartets
from dialfork_metrics.bench import (
    TASK2_METHODS,
    BenchError,
    Corpus,
    cross_references,
    main,
    parse_task2_protocol,
    run_benchmark,
    run_task1,
    run_task2,
    task1_cross_units,
)
from dialfork_metrics.dialogue import score_quartets
from dialfork_metrics.report import control_beats_sentence, report_markdown

CORE = ("mean_turn", "flowdtw", "flowscore", "turn_count_diff", "word_count_diff", "shared_prefix", "random")


class WordHashEncoder:
    """Bag of hashed words, L2-normalised: deterministic stand-in embeddings, no model."""

    def __init__(self, dim: int = 32):
        self.dim = dim

    def _one(self, text: str) -> np.ndarray:
        v = np.zeros(self.dim)
        for w in re.findall(r"\w+", text.lower()):
            h = int.from_bytes(hashlib.blake2b(w.encode(), digest_size=8).digest(), "little")
            v[h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        v[0] += 1e-3
        return v / np.linalg.norm(v)

    def encode(self, texts, **_):
        return np.stack([self._one(t) for t in texts]).astype(np.float32)

    def encode_dialogues(self, dialogues, names=None):
        return [self.encode([t["text"] for t in d]) for d in dialogues]


@pytest.fixture(scope="module")
def corpus():
    recs = make_records(tasks=("weather", "trivia"), per_task=5)
    return Corpus(
        recs, {r["dialogue_id"]: "test" for r in recs if r["hallucination_type"] is None}, "factory"
    )


def _tau(res, method):
    return res["summary"]["tau"][method]["Avg"]


def test_shared_prefix_is_an_oracle_under_same_source_and_scores_zero_under_cross(corpus):
    enc = WordHashEncoder()
    same = run_task2(corpus, enc, CORE)
    cross = run_task2(corpus, enc, CORE, protocol="cross", n_references=3)
    assert _tau(same, "shared_prefix") == 1.0
    assert _tau(cross, "shared_prefix") == 0.0  # tau's no-information value: all four forks share nothing
    rows = [r for r in cross["units"] if r["method"] == "shared_prefix"]
    assert len(rows) == 2 * 5 * len(taxonomy.names())  # tasks x sources x types
    assert all(r["distances"] == [0.0] * 4 and r["tau"] == 0.0 for r in rows)
    assert cross["protocol"] == "cross" and cross["n_references"] == 3
    # no reference is the fork's own source, and every reference is a conformant dialogue of the same task
    by_id = corpus.by_id
    for r in cross["units"]:
        assert len(r["references"]) == 3 and r["source_id"] not in r["references"]
        assert all(
            by_id[i]["hallucination_type"] is None and by_id[i]["task"] == by_id[r["source_id"]]["task"]
            for i in r["references"]
        )


def test_same_source_is_unchanged(corpus):
    """The default is the paper's protocol, computed exactly as before (score_quartets on D+ and its forks)."""
    enc = WordHashEncoder()
    res = run_task2(corpus, enc, CORE)
    assert res == run_task2(corpus, enc, CORE, protocol="same-source")
    direct = score_quartets(
        task2_quartets(corpus.records), methods=[m for m in CORE if m != "random"], encoder=enc
    )
    got = {(r["source_id"], r["type"], r["method"]): (r["distances"], r["tau"]) for r in res["units"]}
    for s in direct:
        for m, d in s["distances"].items():
            assert got[(s["source_id"], s["type"], m)] == (d, s["tau"][m])  # bit-identical floats


def test_cross_is_seeded_and_the_mean_over_references(corpus):
    enc = WordHashEncoder()
    a = run_task2(corpus, enc, CORE, protocol="cross", seed=7, n_references=2)
    assert a == run_task2(corpus, enc, CORE, protocol="cross", seed=7, n_references=2)
    b = run_task2(corpus, enc, CORE, protocol="cross", seed=8, n_references=2)
    assert [r["references"] for r in a["units"]] != [r["references"] for r in b["units"]]
    row = next(r for r in a["units"] if r["method"] == "flowscore")
    q = next(
        q
        for q in task2_quartets(corpus.records)
        if q["source"]["dialogue_id"] == row["source_id"] and q["type"] == row["type"]
    )
    per_ref = score_quartets(
        [{"source": corpus.by_id[i], "type": q["type"], "forks": q["forks"]} for i in row["references"]],
        methods=["flowscore"],
        encoder=enc,
    )
    want = [float(np.mean([p["distances"]["flowscore"][k] for p in per_ref])) for k in range(4)]
    assert row["distances"] == pytest.approx(want, abs=1e-12)
    refs = cross_references(corpus.conformant, 2, seed=7)
    assert refs == cross_references(
        list(reversed(corpus.conformant)), 2, seed=7
    )  # record order does not matter


def test_a_task_with_a_single_source_is_skipped_with_a_reason():
    recs = make_records(tasks=("weather",), per_task=1) + make_records(tasks=("trivia",), per_task=3)
    corpus = Corpus(recs, {}, "factory")
    skipped: list[str] = []
    res = run_task2(
        corpus, WordHashEncoder(), ("flowscore", "shared_prefix"), protocol="cross", skipped=skipped
    )
    assert {r["source_id"].split("-")[0] for r in res["units"]} == {"trivia"}
    assert len(skipped) == len(taxonomy.names())
    assert all("cross protocol" in s and "no conformant dialogue from another source" in s for s in skipped)
    assert cross_references(corpus.conformant, 3)[recs[0]["dialogue_id"]] == []


def test_bad_protocol_and_reference_count():
    assert parse_task2_protocol("both") == ("same-source", "cross")
    assert parse_task2_protocol("Cross") == ("cross",)
    with pytest.raises(BenchError, match="same-source, cross, both"):
        parse_task2_protocol("crossed")
    with pytest.raises(BenchError, match="n_references"):
        cross_references([], 0)
    with pytest.raises(BenchError, match="protocol"):
        run_task2(Corpus([], {}, "x"), None, ("random",), protocol="other")


def test_cli_rejects_a_bad_protocol(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["--data", str(tmp_path), "--task2-protocol", "crossed"])
    assert e.value.code == 2
    assert "--task2-protocol" in capsys.readouterr().err
    assert main(["--data", str(tmp_path), "--task2-protocol", "cross", "--n-references", "0"]) == 2
    assert "--n-references" in capsys.readouterr().err


def test_task1_cross_units_split_sources():
    from dialfork_dataset.views import task1_sets

    recs = make_records(tasks=("weather", "trivia"), per_task=6)
    units = task1_sets(recs)
    cross = task1_cross_units(units, seed=0)
    assert set(cross) == set(units)
    for unit in cross.values():
        ref = {r["source_id"] for r in unit["reference"]}
        forks = {r["source_id"] for k in (1, 2, 3, 4) for r in unit[k]}
        assert ref and forks and not ref & forks
        assert len(ref) == 3 and len(forks) == 3
    assert task1_cross_units(units, seed=0) == cross
    skipped: list[str] = []
    few = task1_cross_units(task1_sets(make_records(tasks=("weather",), per_task=2)), skipped=skipped)
    assert few == {} and skipped and "too few sources" in skipped[0]


def test_task1_cross_length_controls_only():
    recs = make_records(tasks=("weather",), per_task=6)
    res = run_task1(
        Corpus(recs, {}, "f"), None, ("turn_count_diff", "random"), protocol="cross", progress=False
    )
    assert res["protocol"] == "cross" and res["summary"]["n_units"] == len(taxonomy.names())


def test_control_sentence_says_what_a_control_beating_a_method_means():
    tau = {
        "flowscore": {"Avg": 0.575},
        "flowdtw": {"Avg": 0.625},
        "shared_prefix": {"Avg": 0.653},
        "turn_count_diff": {"Avg": 0.1},
    }
    s = control_beats_sentence(
        tau, "same-source", ("flowscore", "flowdtw"), ("shared_prefix", "turn_count_diff")
    )
    assert "Shared prefix (tau 0.653) beats FlowScore (0.575) and FlowDTW (0.625)" in s
    assert "rewards copying" in s
    tau["shared_prefix"]["Avg"] = 0.5752
    assert "Shared prefix (tau 0.575) ties with FlowScore (0.575)" in control_beats_sentence(
        tau, "same-source", ("flowscore", "flowdtw"), ("shared_prefix",)
    )
    tau["shared_prefix"]["Avg"] = 0.0
    s = control_beats_sentence(tau, "cross", ("flowscore", "flowdtw"), ("shared_prefix", "turn_count_diff"))
    assert s.startswith("Under the cross-reference protocol") and "no control" in s


def test_end_to_end_both_protocols_on_a_template_corpus(template_corpus, tmp_path):
    out = tmp_path / "rep"
    rep = run_benchmark(
        template_corpus,
        tasks=(2,),
        encoders=("minilm",),
        out=out,
        n_resamples=200,
        plots=False,
        progress=False,
        task2_protocol="both",
        n_references=3,
    )
    same = rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]
    cross = rep["task2_cross"]["per_encoder"]["minilm"]["summary"]["tau"]
    assert list(same) == list(cross) == list(TASK2_METHODS)
    assert rep["meta"]["task2_protocols"] == ["same-source", "cross"] and rep["meta"]["n_references"] == 3
    # under cross the copied prefix is gone: Shared prefix carries (almost) no ranking
    assert abs(cross["shared_prefix"]["Avg"]) < 0.25 < same["shared_prefix"]["Avg"]
    assert cross["flowscore"]["Avg"] > cross["shared_prefix"]["Avg"]
    only = run_benchmark(
        template_corpus, tasks=(2,), encoders=("minilm",), n_resamples=200, plots=False, progress=False
    )
    assert (
        only["task2"]["per_encoder"] == rep["task2"]["per_encoder"]
    )  # same-source bit-identical under "both"
    assert "task2_cross" not in only and only["meta"]["task2_protocols"] == ["same-source"]
    md = (out / "report.md").read_text()
    assert "same-source (" in md and "cross-reference (" in md and md.count("### Table 3.") == 1
    assert "### Table 7." in md and "| Shared prefix |" in md
    assert "Under the cross-reference protocol" in md
    assert (out / "task2_cross_summary.csv").is_file() and (out / "task2_cross_units_minilm.csv").is_file()
    back = json.loads((out / "report.json").read_text())
    assert back["task2_cross"]["protocol"] == "cross"
    assert "cross-reference (" in report_markdown(back)
