"""Task 3 MAE units: system turns (the Score's unit) and all turns (the paper's Table 4)."""

import numpy as np
import pytest

from dialfork_metrics.task3.scorer import score_from_stats, score_predictions, system_turn_positions


def _turns(speakers: str) -> list[dict]:
    return [{"speaker": "system" if c == "S" else "user", "text": f"t{i}"} for i, c in enumerate(speakers)]


def test_all_turns_hand_worked():
    # conformant "USUSUS": system turns at 2, 4, 6; N = 6, end = 7
    # forked "USSUSU" forked at system turn 2 (position 3); system turns at 2, 3, 5
    gold = [
        {
            "dialogue_id": "c",
            "num_system_turns": 3,
            "hallucination_type": None,
            "fork_turn": None,
            "turns": _turns("USUSUS"),
        },
        {
            "dialogue_id": "f",
            "num_system_turns": 3,
            "hallucination_type": "GR",
            "fork_turn": 2,
            "turns": _turns("USSUSU"),
        },
    ]
    r = score_predictions({"c": 2, "f": 3}, gold)
    assert (r["mae_h"], r["mae_c"], r["mae_h_ref"], r["mae_c_ref"]) == (1, 2, 1, 3)  # |3-2|, 4-2, |3-2|, 3
    a = r["all_turns"]
    assert a["unit"] == "all turns"
    assert a["mae_h"] == 2  # |pos(3) - pos(2)| = |5 - 3|
    assert a["mae_h_by_type"] == {"GR": 2}
    assert a["mae_c"] == 3  # 7 - pos(2) = 7 - 4
    assert a["mae_h_ref"] == 2  # |pos(T) - pos(t_k)| = |5 - 3|
    assert a["mae_c_ref"] == 5  # 7 - pos(1) = 7 - 2
    assert system_turn_positions(gold[1]["turns"]) == [2, 3, 5]
    # the Score is computed once, in system turns, whatever is reported next to it
    assert (
        r["score"]
        == score_predictions({"c": 2, "f": 3}, [{k: v for k, v in g.items() if k != "turns"} for g in gold])[
            "score"
        ]
    )


def test_no_turns_or_inconsistent_turns_give_no_all_turns_block():
    gold = [{"dialogue_id": "c", "num_system_turns": 2, "hallucination_type": None, "fork_turn": None}]
    assert "all_turns" not in score_predictions({"c": 1}, gold)
    gold[0]["turns"] = _turns("USUSUS")  # 3 system turns, but num_system_turns says 2
    assert "all_turns" not in score_predictions({"c": 1}, gold)


def test_score_is_unit_free():
    # The Score uses MAE / MAE_ref only: rescaling every MAE and reference leaves it unchanged.
    rng = np.random.default_rng(0)
    for _ in range(50):
        mh, mc, rh, rc = rng.uniform(0.1, 20, size=4)
        ch, cc = rng.uniform(0, 1, size=2)
        c = rng.uniform(0.2, 5)
        assert score_from_stats(c * mh, ch, c * mc, cc, c * rh, c * rc) == pytest.approx(
            score_from_stats(mh, ch, mc, cc, rh, rc), rel=1e-12
        )
    # On dialogues that open with the system and alternate strictly ("SUSU..."), all turns are exactly
    # twice the system turns, so the Score from the all-turn MAEs is the Score.
    gold, preds = [], {}
    for i in range(40):
        T = int(rng.integers(2, 9))
        turns = _turns("SU" * T)
        if i % 2:
            gold.append(
                {
                    "dialogue_id": f"c{i}",
                    "num_system_turns": T,
                    "hallucination_type": None,
                    "fork_turn": None,
                    "turns": turns,
                }
            )
        else:
            gold.append(
                {
                    "dialogue_id": f"f{i}",
                    "num_system_turns": T,
                    "hallucination_type": "WIC",
                    "fork_turn": int(rng.integers(1, T + 1)),
                    "turns": turns,
                }
            )
        preds[gold[-1]["dialogue_id"]] = None if i % 7 == 0 else int(rng.integers(1, T + 1))
    r = score_predictions(preds, gold)
    a = r["all_turns"]
    for k in ("mae_h", "mae_c", "mae_h_ref", "mae_c_ref"):
        assert a[k] == pytest.approx(2 * r[k])
    assert score_from_stats(
        a["mae_h"], r["cov_h"], a["mae_c"], r["cov_c"], a["mae_h_ref"], a["mae_c_ref"]
    ) == pytest.approx(r["score"], rel=1e-12)
