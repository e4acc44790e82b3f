"""Leaderboard scoring: one code path with the Task 3 scorer, Kendall tau, public/private split,
the gold never leaks, and the CLI end to end (also through dialfork_dataset.export_hub_layout)."""

from __future__ import annotations

import json
import logging
import random
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import kendalltau

from dialfork_dataset.taxonomy import forks_per_source
from dialfork_metrics.task3.scorer import score_predictions
from leaderboard.score import (
    GoldError,
    _detector_strata,
    detector_score_ci,
    detector_score_statistic,
    kendall_tau_b_rows,
    metric_tau_ci,
    score_detector,
    score_metric,
    split_subsets,
)
from leaderboard.store import LocalStore
from leaderboard.submissions import evaluate, submit
from leaderboard.synthetic import make_fixture, write_distances, write_metadata, write_predictions
from leaderboard.validate import BlindSet, SubmissionError

ROOT = Path(__file__).resolve().parents[1]
SECRET_TASKS = ("zqsecrettaskalpha", "zqsecrettaskbeta")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    # no transcript text: the task names (gold-only here) must then appear nowhere but in the gold
    return make_fixture(
        tmp_path_factory.mktemp("lbs"), n_sources=6, seed=5, tasks=SECRET_TASKS, with_text=False
    )


def _random_predictions(env, seed=0, p_null=0.3):
    rng = random.Random(seed)
    return {
        b["dialogue_id"]: (None if rng.random() < p_null else rng.randint(1, b["num_system_turns"]))
        for b in env["blind"]
    }


def _submission(env, tmp_path, preds, name="sub", **md):
    p = write_predictions(preds, tmp_path / f"{name}.jsonl")
    write_metadata(tmp_path / f"{name}.metadata.json", **{"method": "Random detector", **md})
    return p


# ---- Task 3: one code path ------------------------------------------------------------------


def test_scores_equal_direct_scorer_calls(env, tmp_path):
    preds = _random_predictions(env)
    ev = evaluate(
        _submission(env, tmp_path, preds), track="detector", gold=env["gold_dir"], blind=env["blind_dir"]
    )
    parts = split_subsets(env["gold3"])
    assert parts["public"] and parts["private"]
    for s in ("public", "private"):
        direct = score_predictions({r["dialogue_id"]: preds[r["dialogue_id"]] for r in parts[s]}, parts[s])
        assert {k: v for k, v in ev.scores[s].items() if k != "score_ci"} == direct
        assert ev.scores[s]["score_ci"] == detector_score_ci(preds, env["gold3"])[s]
    assert ev.public["scores"] == {"public": ev.scores["public"]}
    assert ev.private["scores"] == {"private": ev.scores["private"]}
    assert ev.public["gold_revision"] == env["manifest"]["revision"]
    import hashlib

    assert (
        ev.public["submission"]["sha256"] == hashlib.sha256((tmp_path / "sub.jsonl").read_bytes()).hexdigest()
    )


def test_public_private_split_follows_gold_subset_by_source(env):
    parts = split_subsets(env["gold3"])
    family = 1 + forks_per_source()  # a source and its forks: 17 for the paper's types
    assert len(parts["public"]) % family == 0 and len(parts["private"]) % family == 0
    with pytest.raises(GoldError, match="subset"):
        split_subsets([{"dialogue_id": "x", "subset": "other"}])


def test_oracle_scores_100_and_trivial_baselines_0(env):
    gold = {g["dialogue_id"]: g for g in env["gold3"]}
    oracle = {d: g["fork_turn"] for d, g in gold.items()}
    res = score_detector(oracle, env["gold3"])
    for s in ("public", "private"):
        assert res[s]["score"] == pytest.approx(100.0)
        assert res[s]["mae_h"] == 0 and res[s]["cov_c"] == 0
    first = score_detector(dict.fromkeys(gold, 1), env["gold3"])
    assert round(first["public"]["score"], 2) == 0.0  # a2 = 0 is floored at 1e-12: Score 0.00 as in Table 4


def test_bootstrap_statistic_equals_the_scorer_and_known_intervals(env):
    gold = {g["dialogue_id"]: g for g in env["gold3"]}
    parts = split_subsets(env["gold3"])
    for seed in range(5):  # the vectorised Score of the interval is the scorer's Score
        rng = random.Random(seed)
        preds = {
            d: (None if rng.random() < 0.4 else rng.randint(1, g["num_system_turns"]))
            for d, g in gold.items()
        }
        for rows in parts.values():
            fork, conf = _detector_strata(preds, rows)
            want = score_predictions({r["dialogue_id"]: preds[r["dialogue_id"]] for r in rows}, rows)["score"]
            got = detector_score_statistic(fork.sum(1), fork.shape[1], conf.sum(1), conf.shape[1])
            assert float(got) == pytest.approx(want, rel=1e-12, abs=1e-12)
    # an oracle scores 100 in every resample: the interval is [100, 100]; never flagging: [0, 0]
    oracle = {d: g["fork_turn"] for d, g in gold.items()}
    assert all(ci == pytest.approx([100.0, 100.0]) for ci in detector_score_ci(oracle, env["gold3"]).values())
    never = dict.fromkeys(gold)  # a1 = 0 (floored), a2 = 1, cov_h = 0 (floored), cov_c = 0 in every resample
    point = score_detector(never, env["gold3"])
    for s, ci in detector_score_ci(never, env["gold3"]).items():
        assert ci == pytest.approx([point[s]["score"]] * 2, rel=1e-9)
    g2 = {g["pair_id"]: g for g in env["gold2"]}
    perfect = {p: 5.0 - g["fork_position"] for p, g in g2.items()}
    assert metric_tau_ci(perfect, env["gold2"])["public"] == pytest.approx([1.0, 1.0])
    # deterministic (seeded), and no interval when asked for none
    rng = random.Random(7)
    preds = {d: rng.randint(1, g["num_system_turns"]) for d, g in gold.items()}
    assert detector_score_ci(preds, env["gold3"]) == detector_score_ci(preds, env["gold3"])
    assert detector_score_ci(preds, env["gold3"], n_resamples=0) == {"public": None, "private": None}


def test_scoring_rejects_predictions_from_another_blind_set(env):
    with pytest.raises(ValueError, match="do not cover the gold") as ei:
        score_detector({"dX": None}, env["gold3"])
    assert "dX" not in str(ei.value)


# ---- Task 2: Kendall tau -------------------------------------------------------------------


def test_kendall_rows_hand_worked():
    d = np.array([[4, 3, 2, 1], [1, 2, 3, 4], [4, 3, 1, 2], [1, 1, 1, 1], [2, 2, 1, 1]], dtype=float)
    tau = kendall_tau_b_rows(d)
    assert tau[:3].tolist() == pytest.approx([1.0, -1.0, 4 / 6])
    assert np.isnan(tau[3])
    # ties in x: concordant 4, discordant 0, tied-x pairs 2 -> 4 / sqrt(4 * 6)
    assert tau[4] == pytest.approx(4 / np.sqrt(24))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 3), min_size=4, max_size=4), min_size=1, max_size=20))
def test_kendall_rows_equal_scipy(rows):
    d = np.array(rows, dtype=float)
    ours = kendall_tau_b_rows(d)
    from dialfork_metrics.stats import exact_recovery, ranking_tau

    for row, t in zip(d, ours):
        ref = kendalltau(row, [4, 3, 2, 1]).statistic
        assert (np.isnan(ref) and np.isnan(t)) or t == pytest.approx(ref, abs=1e-12)
        # the library's per-unit definition (undefined -> 0) and exact recovery (tau == 1)
        assert (0.0 if np.isnan(t) else t) == pytest.approx(ranking_tau(row), abs=1e-12)
        assert exact_recovery(row) == bool(t >= 1.0 - 1e-12)


def test_metric_track_scores(env, tmp_path):
    g2 = {g["pair_id"]: g for g in env["gold2"]}
    perfect = {p: 5.0 - g["fork_position"] for p, g in g2.items()}  # d_1 > d_2 > d_3 > d_4
    res = score_metric(perfect, env["gold2"])
    assert res["public"]["tau"] == 1.0 and res["public"]["exact_recovery"] == 1.0
    reverse = {p: float(g["fork_position"]) for p, g in g2.items()}
    assert score_metric(reverse, env["gold2"])["private"]["tau"] == -1.0
    flat = dict.fromkeys(g2, 0.5)
    r = score_metric(flat, env["gold2"])["public"]
    assert r["tau"] == 0.0 and r["undefined_units"] == r["counts"]["units"]  # undefined tau counts as 0
    # hand-check one type mean against scipy on the public units
    pub = [g for g in env["gold2"] if g["subset"] == "public"]
    rng = random.Random(1)
    dist = {p: rng.random() for p in g2}
    units: dict[str, dict[int, float]] = {}
    for g in pub:
        if g["hallucination_type"] == "GR":
            units.setdefault(g["unit_id"], {})[g["fork_position"]] = dist[g["pair_id"]]
    want = np.mean([kendalltau([u[k] for k in (1, 2, 3, 4)], [4, 3, 2, 1]).statistic for u in units.values()])
    got = score_metric(dist, env["gold2"])["public"]
    assert got["tau_by_type"]["GR"] == pytest.approx(want)
    assert got["tau"] == pytest.approx(np.mean(list(got["tau_by_type"].values())))
    # the whole pipeline
    p = write_distances(dist, tmp_path / "m.jsonl")
    write_metadata(tmp_path / "m.metadata.json", method="Random distance", track="metric")
    ev = evaluate(p, track="metric", gold=env["gold_dir"], blind=env["blind_dir"])
    ci = ev.scores["public"].pop("tau_ci")
    assert ev.scores["public"] == got
    assert ci == metric_tau_ci(dist, env["gold2"])["public"] and ci[0] <= got["tau"] <= ci[1]
    assert ev.public["configuration"]["interval"]["resamples"] == 1000


def test_malformed_task2_gold(env):
    bad = [dict(g) for g in env["gold2"]][:-1]  # a unit loses its k=4 (or another) pair
    dist = {g["pair_id"]: 0.0 for g in bad}
    with pytest.raises(GoldError, match="fork positions 1..4") as ei:
        score_metric(dist, bad)
    assert not re.search(r"\bu[0-9a-f]{20}\b", str(ei.value))


# ---- the gold never leaks ------------------------------------------------------------------


def _gold_only_values(env) -> list[str]:
    key = json.loads((Path(env["gold_dir"]) / "blind_key.json").read_text())["key"]
    vals = [*SECRET_TASKS, key, "fork_turn", "fork_position", "hallucination_type", "unit_id"]
    vals += sorted({g["unit_id"] for g in env["gold2"]})
    return vals


def _assert_no_gold(text: str, env, allow_blind_ids: bool = False):
    for v in _gold_only_values(env):
        assert v not in text, f"gold-only value {v!r} leaked"
    if not allow_blind_ids:  # results and pages hold no per-dialogue information at all
        for b in env["blind"]:
            assert b["dialogue_id"] not in text
        for p in env["pairs"]:
            assert p["pair_id"] not in text
    else:  # messages may name blind ids, but never next to a label
        labels = ("WIC", "SSPC", "GR", "CSC", "conformant", "forked", "private", "public")
        for line in text.splitlines():
            if any(b["dialogue_id"] in line for b in env["blind"]):
                assert not any(lab in line for lab in labels), line


def test_gold_appears_in_no_output(env, tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    outputs: list[str] = []
    preds = _random_predictions(env, seed=7)
    sub = _submission(env, tmp_path, preds, submitter="carol")
    store = LocalStore(tmp_path / "store")
    st_ = submit(sub, track="detector", gold=env["gold_dir"], blind=env["blind_dir"], store=store)
    outputs.append(json.dumps(st_.result))
    dist = {p["pair_id"]: random.random() for p in env["pairs"]}
    msub = write_distances(dist, tmp_path / "m.jsonl")
    write_metadata(tmp_path / "m.metadata.json", method="D", track="metric", submitter="carol")
    submit(msub, track="metric", gold=env["gold_dir"], blind=env["blind_dir"], store=store)
    for f in (tmp_path / "store").rglob("*.json"):
        outputs.append(f.read_text(encoding="utf-8"))
    # the CLI: score (stdout, --json), render, and an invalid submission's errors
    r = subprocess.run(
        [sys.executable, "-m", "leaderboard", "score", str(sub), "--gold", str(env["gold_dir"])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    outputs += [r.stdout, r.stderr]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "-v",
            "render",
            "--results",
            str(tmp_path / "store"),
            "--out",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    outputs += [r.stdout, r.stderr, (tmp_path / "site" / "index.html").read_text(encoding="utf-8")]
    for text in outputs:
        _assert_no_gold(text, env)
    # errors: invalid values, out of range for every dialogue, scored against the gold
    bad = {d: (b + 100 if b is not None else "x") for d, b in preds.items()}
    bsub = _submission(env, tmp_path, bad, name="bad")
    with pytest.raises(SubmissionError) as ei:
        evaluate(bsub, track="detector", gold=env["gold_dir"])
    r = subprocess.run(
        [sys.executable, "-m", "leaderboard", "score", str(bsub), "--gold", str(env["gold_dir"]), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 2
    for text in (str(ei.value), "\n".join(str(p) for p in ei.value.report.errors), r.stdout, r.stderr):
        _assert_no_gold(text, env, allow_blind_ids=True)
    _assert_no_gold("\n".join(rec.getMessage() for rec in caplog.records), env)


# ---- CLI score ---------------------------------------------------------------------------


def test_cli_score_stores_and_json(env, tmp_path):
    sub = _submission(env, tmp_path, _random_predictions(env, seed=2))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "score",
            str(sub),
            "--gold",
            str(env["gold_dir"]),
            "--blind",
            str(env["blind_dir"]),
            "--results",
            str(tmp_path / "st"),
            "--submitter",
            "dave",
            "--json",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["submitter"] == "dave" and res["key"].startswith("dave/random-detector/")
    assert (tmp_path / "st" / "results" / res["key"]).is_file()
    assert (tmp_path / "st" / "private" / res["key"]).is_file()
    assert "contact" not in res["metadata"]
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "score",
            str(sub),
            "--gold",
            str(env["gold_dir"]),
            "--results",
            str(tmp_path / "st"),
            "--submitter",
            "dave",
            "--max-per-day",
            "1",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 3 and "limit 1 per UTC day" in r.stderr


# ---- end to end through export_hub_layout -------------------------------------------------


def test_end_to_end_through_export_hub_layout(tmp_path):
    from dialfork_dataset.hub import export_hub_layout, load_gold
    from leaderboard.synthetic import synthetic_task3_test, to_records

    recs = to_records(synthetic_task3_test(4, seed=11, tasks=("weather",)))
    export_hub_layout(recs, tmp_path / "hub", tmp_path / "hub-gold", blind_key="ab" * 32)
    blind = BlindSet.from_dir(tmp_path / "hub")
    gold = load_gold(tmp_path / "hub-gold")
    assert set(blind.turns) == {g["dialogue_id"] for g in gold["task3"]}
    assert blind.pairs == {g["pair_id"] for g in gold["task2"]}
    preds = {d: min(2, T) for d, T in blind.turns.items()}
    sub = write_predictions(preds, tmp_path / "p.jsonl")
    write_metadata(tmp_path / "p.metadata.json", method="Always second")
    ev = evaluate(sub, track="detector", gold=tmp_path / "hub-gold", blind=tmp_path / "hub")
    parts = split_subsets(gold["task3"])
    for s in ("public", "private"):
        if parts[s]:
            assert {k: v for k, v in ev.scores[s].items() if k != "score_ci"} == score_predictions(
                {r["dialogue_id"]: preds[r["dialogue_id"]] for r in parts[s]}, parts[s]
            )


def test_demo_round_trip(env, tmp_path):
    from leaderboard.submissions import demo_round_trip

    preds = {b["dialogue_id"]: None for b in env["blind"]}
    md = {
        "method": "Streaming demo",
        "regime": "streaming",
        "used_conformant_train": True,
        "model_name": "minilm",
        "model_size": "22M",
        "code_url": None,
        "open_source": True,
        "contact": "demo@example.org",
    }
    out = demo_round_trip(
        preds, blind=env["blind_dir"], gold=env["gold_dir"], out_dir=tmp_path / "demo", metadata=md
    )
    assert out["validation"]["flagged"] == 0 and out["key"].startswith("demo/streaming-demo/")
    page = out["page"].read_text(encoding="utf-8")
    assert "Streaming demo" in page and page.count('<tr class="result"') == 1
    assert out["result"]["scores"]["public"]["cov_h"] == 0.0
    with pytest.raises(SubmissionError):
        demo_round_trip(
            {}, blind=env["blind_dir"], gold=env["gold_dir"], out_dir=tmp_path / "d2", metadata=md
        )


# ---- issue 46 item 8: one file, one row; a metric-track file checked as a detector file ------------


def test_the_same_file_scored_twice_is_refused_as_result_exists(env, tmp_path):
    from leaderboard.__main__ import main
    from leaderboard.store import ResultExistsError

    sub = _submission(env, tmp_path, _random_predictions(env, seed=3), submitter="dora")
    store = LocalStore(tmp_path / "store")
    first = submit(sub, track="detector", gold=env["gold_dir"], store=store, ci_resamples=0)
    with pytest.raises(ResultExistsError, match=r"result exists: .* stored as " + re.escape(first.key)):
        submit(sub, track="detector", gold=env["gold_dir"], store=store, ci_resamples=0)
    assert len(store.keys()) == 1
    # the CLI: exit 3, "refused: result exists", one row
    argv = ["score", str(sub), "--gold", str(env["gold_dir"]), "--results", str(tmp_path / "cli")]
    assert main(argv) == 0
    assert main(argv) == 3
    assert len(LocalStore(tmp_path / "cli").keys()) == 1
    # another file of the same submitter is a new result
    other = _submission(env, tmp_path, _random_predictions(env, seed=4), name="other", submitter="dora")
    submit(other, track="detector", gold=env["gold_dir"], store=store, ci_resamples=0)
    assert len(store.keys()) == 2


def test_a_metric_file_checked_on_the_detector_track_names_the_fix(env, tmp_path):
    from leaderboard.validate import validate_submission

    dist = {p["pair_id"]: random.random() for p in env["pairs"]}
    p = write_distances(dist, tmp_path / "m.jsonl")
    rep = validate_submission(
        p, track="detector", blind=BlindSet.from_dir(env["blind_dir"]), require_metadata=False
    )
    assert not rep.ok and rep.errors[0].code == "wrong_track"
    assert "looks like a metric-track submission" in rep.errors[0].message
    assert "pass --track metric" in rep.errors[0].message
    assert (
        rep.format_text(max_errors=20)
        .splitlines()[1]
        .strip()
        .endswith("(the errors below are what checking it as a detector-track file finds)")
    )
    # a detector file is not taken for a metric one, and the right track has no such hint
    ok = validate_submission(
        p, track="metric", blind=BlindSet.from_dir(env["blind_dir"]), require_metadata=False
    )
    assert all(e.code != "wrong_track" for e in ok.errors)


def test_export_hint_for_pair_diffing_names_prefix_mode_reword():
    """Issue 46 item 10: a corpus generated without --prefix-mode reword fails pair diffing; the export
    says the fix."""
    from leaderboard.__main__ import export_hints
    from leaderboard.leakcheck import AttackResult, AuditReport

    rep = AuditReport(baselines={}, plumbing_only=True)
    rep.attacks.append(AttackResult("pair diffing (metric track)", "metric", 1.0, status="FAIL"))
    hints = export_hints(rep, plumbing_only=True)
    assert len(hints) == 1 and "--prefix-mode reword" in hints[0] and "Regenerate" in hints[0]
    rep.attacks[0].status = "pass"
    assert export_hints(rep, plumbing_only=True) == []
