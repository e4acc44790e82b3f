"""Task 3 scorer (SPEC section 8): Table 4 check, hand-worked gold sets, validation."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dialfork_metrics.task3 import (
    PredictionError,
    read_predictions,
    score_from_stats,
    score_predictions,
    validate_predictions,
)
from dialfork_metrics.task3.scorer import format_table


# -- SPEC section 8: the paper's Table 4 -------------------------------------------------------
def test_table4_random():
    assert round(score_from_stats(6.60, 1.0, 7.50, 1.0, 12.52, 14.12), 2) == 0.94


def test_table4_always_first_and_last():
    assert round(score_from_stats(5.64, 1.0, 14.12, 1.0, 12.52, 14.12), 2) == 0.00
    assert round(score_from_stats(12.52, 1.0, 1.00, 1.0, 12.52, 14.12), 2) == 0.00


def test_score_from_stats_special_cases():
    # nothing flagged at all: a1 = 0 (no flagged fork), a2 = 1, a3 = 0, a4 = 1
    assert score_from_stats(None, 0.0, None, 0.0, 10.0, 10.0) == pytest.approx(100 * 1e-12**0.5)
    # perfect localisation, full coverage, no false alarm
    assert score_from_stats(0.0, 1.0, None, 0.0, 10.0, 10.0) == pytest.approx(100.0)
    # MAE worse than the reference clips at 0
    assert score_from_stats(20.0, 1.0, None, 0.0, 10.0, 10.0) == pytest.approx(100 * 1e-12**0.35)
    with pytest.raises(ValueError, match="fraction"):
        score_from_stats(1.0, 93.8, 1.0, 0.05, 10.0, 10.0)  # a percentage, not a fraction
    with pytest.raises(ValueError, match="mae_h"):
        score_from_stats(-1.0, 1.0, 1.0, 0.05, 10.0, 10.0)


# -- a hand-built gold set with a worked answer --------------------------------------------------
GOLD = [
    {"dialogue_id": "c1", "num_system_turns": 5, "hallucination_type": None, "fork_turn": None},
    {"dialogue_id": "c2", "num_system_turns": 4, "hallucination_type": None, "fork_turn": None},
    {"dialogue_id": "f1", "num_system_turns": 6, "hallucination_type": "WIC", "fork_turn": 1},
    {"dialogue_id": "f2", "num_system_turns": 6, "hallucination_type": "SSPC", "fork_turn": 3},
    {"dialogue_id": "f3", "num_system_turns": 8, "hallucination_type": "GR", "fork_turn": 7},
    {"dialogue_id": "f4", "num_system_turns": 4, "hallucination_type": "CSC", "fork_turn": 2},
]
PRED = {"c1": None, "c2": 3, "f1": 2, "f2": 3, "f3": None, "f4": 4}


def test_worked_example():
    r = score_predictions(PRED, GOLD)
    # forks: errors |2-1|=1, |3-3|=0, f3 unflagged, |4-2|=2 -> MAE_h = 1, cov_h = 3/4
    assert r["mae_h"] == pytest.approx(1.0)
    assert r["cov_h"] == pytest.approx(0.75)
    assert r["mae_h_by_type"] == {"WIC": 1.0, "SSPC": 0.0, "GR": None, "CSC": 2.0}
    assert r["cov_h_by_type"] == {"WIC": 1.0, "SSPC": 1.0, "GR": 0.0, "CSC": 1.0}
    # conformant: c2 flagged at 3 with T=4 -> |(4+1)-3| = 2; cov_c = 1/2
    assert r["mae_c"] == pytest.approx(2.0)
    assert r["cov_c"] == pytest.approx(0.5)
    # refs: always-last MAE_h = mean(T - t_k) = (5+3+1+2)/4; always-first MAE_c = mean T = 4.5
    assert r["mae_h_ref"] == pytest.approx(11 / 4)
    assert r["mae_c_ref"] == pytest.approx(4.5)
    a = r["components"]
    assert a["a1"] == pytest.approx(7 / 11) and a["a2"] == pytest.approx(5 / 9)
    assert a["a3"] == pytest.approx(0.75) and a["a4"] == pytest.approx(0.5)
    expected = 100 * (7 / 11) ** 0.35 * (5 / 9) ** 0.35 * 0.75**0.15 * 0.5**0.15
    assert r["score"] == pytest.approx(expected)
    assert round(r["score"], 2) == 59.99
    assert r["counts"] == {
        "dialogues": 6,
        "forked": 4,
        "conformant": 2,
        "forked_flagged": 3,
        "conformant_flagged": 1,
        "forked_by_type": {"WIC": 1, "SSPC": 1, "GR": 1, "CSC": 1},
    }
    # list-of-rows input gives the same result, and the result is JSON-serialisable
    rows = [{"dialogue_id": k, "prediction": v} for k, v in PRED.items()]
    assert score_predictions(rows, GOLD) == r
    json.dumps(r)
    assert "59.99" in format_table(r)


def test_trivial_predictors_on_gold_reproduce_references():
    first = {g["dialogue_id"]: 1 for g in GOLD}
    last = {g["dialogue_id"]: g["num_system_turns"] for g in GOLD}
    rf, rl = score_predictions(first, GOLD), score_predictions(last, GOLD)
    assert rf["mae_c"] == rf["mae_c_ref"] and rf["components"]["a2"] == 0.0
    assert rl["mae_h"] == rl["mae_h_ref"] and rl["components"]["a1"] == 0.0
    assert round(rf["score"], 2) == 0.0 and round(rl["score"], 2) == 0.0
    # last turn: MAE_c = 1 exactly (T+1 - T), as in Table 4
    assert rl["mae_c"] == 1.0


def test_oracle_scores_100_and_silence_scores_0():
    oracle = {g["dialogue_id"]: g["fork_turn"] for g in GOLD}
    assert score_predictions(oracle, GOLD)["score"] == pytest.approx(100.0)
    silent = score_predictions(dict.fromkeys(oracle), GOLD)
    assert silent["mae_h"] is None and silent["mae_c"] is None
    assert silent["components"] == {"a1": 0.0, "a2": 1.0, "a3": 0.0, "a4": 1.0}
    assert silent["score"] < 1e-3


def test_gold_without_conformant_has_no_score():
    forks = [g for g in GOLD if g["hallucination_type"]]
    r = score_predictions({g["dialogue_id"]: 2 for g in forks}, forks)
    assert r["score"] is None and r["mae_c_ref"] is None and r["cov_c"] is None
    assert r["mae_h"] is not None


# -- validation ----------------------------------------------------------------------------------
def test_validation_collects_every_error_without_leaking_gold():
    rows = [
        {"dialogue_id": "c1", "prediction": True},  # bool
        {"dialogue_id": "c2", "prediction": 2.0},  # float
        {"dialogue_id": "f1", "prediction": "3"},  # numeric string
        {"dialogue_id": "f2", "prediction": 9},  # outside 1..T
        {"dialogue_id": "f2", "prediction": 1},  # duplicate
        {"dialogue_id": "zz", "prediction": 1},  # unknown
        {"dialogue_id": "f3", "prediction": 0},  # outside 1..T
        # f4 missing
    ]
    errs = validate_predictions(rows, GOLD)
    text = "\n".join(errs)
    assert len(errs) == 8, errs
    for needle in (
        "boolean",
        "float",
        "string",
        "prediction 9 outside 1..T (T=6) for dialogue 'f2'",
        "duplicate dialogue_id 'f2'",
        "unknown dialogue_id 'zz'",
        "missing prediction for dialogue 'f4'",
        "prediction 0 outside",
    ):
        assert needle in text, needle
    for secret in ("WIC", "SSPC", "GR", "CSC", "fork"):
        assert secret not in text
    with pytest.raises(PredictionError) as ei:
        score_predictions(rows, GOLD)
    assert ei.value.errors == errs and isinstance(ei.value, ValueError)
    assert validate_predictions(PRED, GOLD) == []


def test_validation_of_container_shapes():
    assert "mapping" in validate_predictions("nope", GOLD)[0]
    errs = validate_predictions([["c1", 1], {"dialogue_id": "c2"}], GOLD)
    assert any("expected an object" in e for e in errs) and any("no 'prediction'" in e for e in errs)
    with pytest.raises(ValueError, match="gold"):
        score_predictions(
            PRED, [{"dialogue_id": "x", "num_system_turns": 4, "hallucination_type": "WIC", "fork_turn": 9}]
        )


def test_scorer_is_fast_on_18000_dialogues():
    # not a timing assertion (see benchmarks/task3_scorer.py); a smoke test at full blind-set scale
    gold = [
        {
            "dialogue_id": f"d{i}",
            "num_system_turns": 12,
            "hallucination_type": None if i % 17 == 0 else "GR",
            "fork_turn": None if i % 17 == 0 else 1 + i % 12,
        }
        for i in range(18000)
    ]
    r = score_predictions({g["dialogue_id"]: 1 + i % 12 for i, g in enumerate(gold)}, gold)
    assert r["counts"]["dialogues"] == 18000


# -- prediction files ----------------------------------------------------------------------------
def test_read_predictions_reports_line_numbers(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text(
        '{"dialogue_id": "a", "prediction": 1}\n{bad json\n[1, 2]\n{"dialogue_id": "b", "prediction": 1.5}\n'
        '{"dialogue_id": "a", "prediction": null}\n{"prediction": 2}\n',
        encoding="utf-8",
    )
    with pytest.raises(PredictionError) as ei:
        read_predictions(f)
    errs = "\n".join(ei.value.errors)
    for line in (2, 3, 4, 5, 6):
        assert f"p.jsonl:{line}:" in errs, line
    assert "p.jsonl:1:" not in errs


def test_cli_score(tmp_path):
    pred = tmp_path / "p.jsonl"
    pred.write_text("".join(json.dumps({"dialogue_id": k, "prediction": v}) + "\n" for k, v in PRED.items()))
    gold = tmp_path / "task3_gold.jsonl"
    gold.write_text("".join(json.dumps({**g, "subset": "public"}) + "\n" for g in GOLD))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "dialfork_metrics.task3",
            "score",
            str(pred),
            "--gold",
            str(gold),
            "--json-out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "59.99" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["score"] == pytest.approx(59.985, abs=0.01)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"dialogue_id": "c1", "prediction": "3"}\n')
    out = subprocess.run(
        [sys.executable, "-m", "dialfork_metrics.task3", "score", str(bad), "--gold", str(gold)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "bad.jsonl:1:" in out.stderr


def test_cli_score_subset_scores_one_part_of_a_whole_blind_prediction_file(tmp_path):
    """A prediction file for the whole blind set scored on its public part: the private part's
    predictions are set aside (scoring them would need their gold), ids in no part stay errors."""
    from dialfork_metrics.task3.__main__ import main

    pred = tmp_path / "p.jsonl"
    pred.write_text("".join(json.dumps({"dialogue_id": k, "prediction": v}) + "\n" for k, v in PRED.items()))
    gold = tmp_path / "task3_gold.jsonl"
    gold.write_text(
        "".join(json.dumps({**g, "subset": "public"}) + "\n" for g in GOLD)
        + "".join(
            json.dumps({**g, "dialogue_id": "priv-" + g["dialogue_id"], "subset": "private"}) + "\n"
            for g in GOLD
        )
    )
    with_private = tmp_path / "p_all.jsonl"
    with_private.write_text(
        pred.read_text()
        + "".join(json.dumps({"dialogue_id": "priv-" + k, "prediction": None}) + "\n" for k in PRED)
    )
    assert (
        main(
            [
                "score",
                str(with_private),
                "--gold",
                str(gold),
                "--subset",
                "public",
                "--json-out",
                str(tmp_path / "pub.json"),
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "score",
                str(pred),
                "--gold",
                str(gold),
                "--subset",
                "all",
                "--json-out",
                str(tmp_path / "x.json"),
            ]
        )
        == 2
    )
    public = json.loads((tmp_path / "pub.json").read_text())
    assert public["score"] == pytest.approx(59.985, abs=0.01)  # the public part alone, as test_cli_score
    stray = tmp_path / "stray.jsonl"
    stray.write_text(
        with_private.read_text() + json.dumps({"dialogue_id": "nowhere", "prediction": 1}) + "\n"
    )
    assert main(["score", str(stray), "--gold", str(gold), "--subset", "public"]) == 2
