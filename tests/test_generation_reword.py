"""The ``reword`` prefix mode (SPEC section 3, issue 13): the template backend realises each prefix
turn's dialogue act with another surface form at a set rate, and counts it in ``prefix_divergence``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dialfork_dataset.forks import system_turn_to_position
from dialfork_dataset.jsonl import read_jsonl
from dialfork_dataset.records import validate_record
from generation.backends.template import RewordRng, pick_phrasing
from generation.engine import (
    DEFAULT_REWORD_RATE,
    GenerationConfig,
    GenerationError,
    conformant_dialogue,
    generate_corpus,
    make_context,
    plan_units,
    run_dialogues,
    single_forks,
)
from generation.seeds import Rng

TASKS = ("weather", "bank_balance", "hotel_book", "trivia")


def _records(out: Path) -> list[dict]:
    return [r for f in sorted(out.glob("*.jsonl")) for r in read_jsonl(f)]


def _bytes(out: Path) -> dict[str, bytes]:
    return {f.name: f.read_bytes() for f in sorted(out.glob("*.jsonl"))}


def _cfg(star_dir, out, **kw) -> GenerationConfig:
    base = {"tasks": TASKS, "per_task": 4, "seed": 3}
    base.update(kw)
    return GenerationConfig(star=str(star_dir), out=str(out), **base)


def _prefix_diffs(recs: list[dict]) -> list[tuple[dict, dict, int, int]]:
    """(fork, source, prefix length in turns, prefix turns differing from D+) for every fork."""
    src = {r["dialogue_id"]: r for r in recs if r["hallucination_type"] is None}
    out = []
    for f in recs:
        if f["hallucination_type"] is None:
            continue
        s = src[f["source_id"]]
        cut = system_turn_to_position(s["turns"], f["fork_turn"])
        out.append((f, s, cut, sum(a != b for a, b in zip(f["turns"][:cut], s["turns"][:cut]))))
    return out


@pytest.fixture(scope="module")
def corpora(tmp_path_factory, star_dir):
    root = tmp_path_factory.mktemp("reword")
    generate_corpus(_cfg(star_dir, root / "replay"), progress=False)
    generate_corpus(_cfg(star_dir, root / "r30", prefix_mode="reword", reword_rate=0.3), progress=False)
    return root


def test_reworded_prefixes_differ_at_the_set_rate_and_are_counted(corpora):
    recs = _records(corpora / "r30")
    rows = _prefix_diffs(recs)
    n_prefix = sum(cut for _, _, cut, _ in rows)
    n_diff = sum(d for _, _, _, d in rows)
    assert n_prefix > 1000
    # the rewording cascades: the reworded turns are the last d turns of the prefix, so the first
    # rewording happens at turn cut - d; each turn at risk starts it with probability 0.3
    at_risk = sum(cut - d + 1 if d else cut for _, _, cut, d in rows)
    hits = sum(d > 0 for _, _, _, d in rows)
    assert at_risk > 500
    # binomial(at_risk, 0.3): 5 standard deviations; the draw is seeded, so no flakes
    assert abs(hits / at_risk - 0.3) < 5 * np.sqrt(0.3 * 0.7 / at_risk)
    for f, s, cut, d in rows:
        differs = [a != b for a, b in zip(f["turns"][:cut], s["turns"][:cut])]
        assert differs == [False] * (cut - d) + [True] * d  # once reworded, reworded to t_k
        validate_record(f)
        assert f["prefix_mode"] == "reword"
        assert f["prefix_divergence"] == d  # the record counts the reworded turns exactly
        # the prefix keeps its shape: same speakers, t_k at the same position, the fork still differs at t_k
        assert [t["speaker"] for t in f["turns"][:cut]] == [t["speaker"] for t in s["turns"][:cut]]
        assert system_turn_to_position(f["turns"], f["fork_turn"]) == cut
        assert f["turns"][cut]["text"] != s["turns"][cut]["text"]
    m = json.loads((corpora / "r30" / "manifest.json").read_text())
    assert m["config"]["prefix_mode"] == "reword" and m["config"]["reword_rate"] == 0.3
    assert m["counts"]["prefix_divergence"]["total_turns"] == n_diff
    # the 16 forks of a source are reworded independently
    by_src: dict[str, set] = {}
    for f, _, _, d in rows:
        by_src.setdefault(f["source_id"], set()).add(d)
    assert any(len(v) > 1 for v in by_src.values())


def test_reworded_forks_take_the_same_dialogue_acts(corpora):
    """Same decisions, other words: from t_k on, a reworded fork is the replayed fork, turn for turn
    (the simulator's state at t_k, which the whole suffix depends on, is the same), and each reworded
    prefix turn is another surface form of the same turn (same value mentioned)."""
    replay = {r["dialogue_id"]: r for r in _records(corpora / "replay")}
    for f, s, cut, _d in _prefix_diffs(_records(corpora / "r30")):
        r = replay[f["dialogue_id"]]
        assert f["turns"][cut:] == r["turns"][cut:]
        assert (f["variant"], f["instruction"], f["substitute_task"]) == (
            r["variant"],
            r["instruction"],
            r["substitute_task"],
        )
        for a, b in zip(f["turns"][:cut], s["turns"][:cut]):
            if a != b:
                digits = [w for w in b["text"].replace(".", " ").split() if w.isdigit()]
                assert all(w in a["text"] for w in digits), (b["text"], a["text"])


def test_workflow_path_is_unchanged(star_dir):
    """The simulator's trace (workflow node of every system turn) before t_k equals D+'s."""
    from dialfork_dataset.star import StarCorpus
    from generation.backends import get_backend

    corpus = StarCorpus(star_dir)
    cfg = GenerationConfig(
        star=str(star_dir),
        out="unused",
        tasks=("bank_balance", "apartment_search"),
        per_task=3,
        seed=5,
        prefix_mode="reword",
        reword_rate=0.5,
    )
    be = get_backend("template")
    ctx = make_context(corpus, cfg, be)
    sources = [conformant_dialogue(ctx, u) for u in plan_units(corpus, cfg)]
    run_dialogues(sources, be, False)
    forks = [f for s in sources for f in single_forks(ctx, s)]
    run_dialogues(forks, be, False)
    n_reworded = 0
    for f in forks:
        t = f.fork.turn
        assert f.reword_rate == 0.5
        assert f.scratch["sim"].trace[: t - 1] == f.reference.scratch["sim"].trace[: t - 1]
        cut = system_turn_to_position(f.reference.turns, t)
        n_reworded += sum(a != b for a, b in zip(f.turns[:cut], f.reference.turns[:cut]))
    assert n_reworded > 0


def test_determinism_rate_zero_and_default(corpora, tmp_path, star_dir):
    # same seed, same text
    again = tmp_path / "again"
    generate_corpus(
        _cfg(star_dir, again, prefix_mode="reword", reword_rate=0.3, workers=2, batch_size=3), progress=False
    )
    assert _bytes(again) == _bytes(corpora / "r30")
    # rate 0 is replay (only the records' prefix_mode says reword)
    zero = tmp_path / "zero"
    generate_corpus(_cfg(star_dir, zero, prefix_mode="reword", reword_rate=0.0), progress=False)
    for a, b in zip(_records(zero), _records(corpora / "replay"), strict=True):
        assert a["turns"] == b["turns"]
        if a["hallucination_type"]:
            assert a["prefix_mode"] == "reword" and a["prefix_divergence"] == 0
    # another rate, another corpus; the default rate is recorded in the manifest
    dflt = tmp_path / "default"
    m = generate_corpus(_cfg(star_dir, dflt, prefix_mode="reword"), progress=False)
    assert m["config"]["reword_rate"] == DEFAULT_REWORD_RATE
    assert _bytes(dflt) != _bytes(corpora / "r30")
    # replay and reuse do not record a rate
    assert json.loads((corpora / "replay" / "manifest.json").read_text())["config"]["reword_rate"] is None


def test_a_rate_change_is_refused_on_resume(corpora, star_dir):
    with pytest.raises(GenerationError, match="reword_rate: existing 0.3 vs requested 0.2"):
        generate_corpus(
            _cfg(star_dir, corpora / "r30", prefix_mode="reword", reword_rate=0.2), progress=False
        )


@pytest.mark.parametrize(
    "kw, msg",
    [
        ({"prefix_mode": "reword", "reword_rate": 1.5}, "reword_rate must be a number in"),
        ({"prefix_mode": "reword", "reword_rate": float("nan")}, "reword_rate must be a number in"),
        ({"prefix_mode": "reword", "reword_rate": True}, "reword_rate must be a number in"),
        ({"prefix_mode": "reword", "reword_rate": "0.1"}, "reword_rate must be a number in"),
        ({"prefix_mode": "replay", "reword_rate": 0.1}, "applies to prefix mode 'reword' only"),
    ],
)
def test_bad_rates_are_refused(tmp_path, star_dir, kw, msg):
    out = tmp_path / "o"
    with pytest.raises(GenerationError, match=msg):
        generate_corpus(_cfg(star_dir, out, **kw), progress=False)
    assert not out.exists()


def test_a_backend_without_rewords_refuses_reword(tmp_path, star_dir):
    """The LLM backends reword (another random stream for a reworded prefix turn:
    tests/test_gen_hf.py); a backend without ``rewords`` refuses ``reword`` before any work."""
    from generation.backends.openai_backend import OpenAIBackend

    assert OpenAIBackend.rewords

    class ChatBackend:
        name = "fake-llm"

        def decoding(self):
            return {}

        def generate(self, requests):  # pragma: no cover - never reached
            raise AssertionError("reword must be refused before generating")

    out = tmp_path / "llm"
    with pytest.raises(GenerationError, match="fake-llm does not"):
        generate_corpus(
            _cfg(star_dir, out, backend="fake", prefix_mode="reword"), backend=ChatBackend(), progress=False
        )
    assert not out.exists()


def test_surface_shift_keeps_the_draws():
    """RewordRng draws exactly what Rng draws (so the simulator decides the same), and its phrasing
    pick always lands on another entry of the pool."""
    for shift in (1, 2, 7, 12345):
        a, b = Rng(42, 3), RewordRng(42, 3, shift=shift)
        for n in (1, 2, 3, 5, 8):
            i, j = pick_phrasing(a, n), pick_phrasing(b, n)
            assert 0 <= j < n
            assert (j == i) if n == 1 else (j != i)
        assert a.next64() == b.next64()


def test_cli_options(tmp_path, star_dir, capsys):
    from generation.cli import main

    out = tmp_path / "cli"
    args = ["--star", str(star_dir), "--tasks", "weather", "--per-task", "2", "--no-progress"]
    assert main(args + ["--out", str(out), "--prefix-mode", "reword", "--reword-rate", "0.25"]) == 0
    m = json.loads((out / "manifest.json").read_text())
    assert m["config"]["prefix_mode"] == "reword" and m["config"]["reword_rate"] == 0.25
    assert all(r["prefix_mode"] == "reword" for r in _records(out) if r["hallucination_type"])
    capsys.readouterr()
    assert main(args + ["--out", str(tmp_path / "x"), "--reword-rate", "0.25"]) == 2
    assert "applies to prefix mode 'reword' only" in capsys.readouterr().err
    assert main(args + ["--out", str(tmp_path / "y"), "--prefix-mode", "reword", "--reword-rate", "2"]) == 2
    assert "reword_rate must be a number in [0, 1]" in capsys.readouterr().err


def test_default_rate_puts_the_shared_prefix_control_near_the_paper(tmp_path, star_dir, paper_types_only):
    """The calibration (benchmarks/bench_reword_calibration.py): at the default rate, the Shared-prefix
    control's Task 2 tau is near the paper's 0.682 (LLM replay), far from the oracle's 1.0; a fact of
    the paper's four types, so the corpus has those alone."""
    from dialfork_dataset.views import task2_quartets
    from dialfork_metrics.dialogue import score_quartets

    out = tmp_path / "calib"
    generate_corpus(
        GenerationConfig(
            star=str(star_dir),
            out=str(out),
            per_task=10,
            seed=0,
            tasks=("weather", "bank_balance", "hotel_book", "doctor_schedule", "apartment_search", "trivia"),
            prefix_mode="reword",
        ),
        progress=False,
    )
    paper = ("WIC", "SSPC", "GR", "CSC")  # (the fixture leaves out the toy type: a quicker corpus)
    units = [u for u in task2_quartets(_records(out)) if u["type"] in paper]
    rows = score_quartets(units, methods=["shared_prefix"])
    tau = float(np.mean([r["tau"]["shared_prefix"] for r in rows]))
    assert len(rows) == 6 * 10 * len(paper)  # one quartet per task, scenario and type
    assert 0.60 < tau < 0.76, tau


def test_prefix_rewording_summary_reads_the_rate_from_records(corpora):
    from generation.engine import prefix_rewording

    recs = _records(corpora / "r30")
    rows = _prefix_diffs(recs)
    s = prefix_rewording(recs)
    assert s["prefix_modes"] == {"reword": len(rows)} and s["forks"] == len(rows)
    assert s["prefix_turns"] == sum(cut for _, _, cut, _ in rows)
    assert s["diverging_turns"] == sum(d for _, _, _, d in rows)
    assert s["share"] == pytest.approx(s["diverging_turns"] / s["prefix_turns"])
    at_risk = sum(cut - d + 1 if d else cut for _, _, cut, d in rows)
    assert s["rate"] == pytest.approx(sum(d > 0 for _, _, _, d in rows) / at_risk)
    assert prefix_rewording(_records(corpora / "replay"))["rate"] == 0.0
    assert prefix_rewording([])["rate"] == 0.0
