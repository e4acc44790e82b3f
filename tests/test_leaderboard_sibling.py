"""The leaderboard audit's sibling cheat and the blind-set size at which a gap becomes significant
(issue 37 item 9), on constructed blind sets: no corpus, no STAR."""

from __future__ import annotations

import numpy as np
import pytest

from leaderboard.leakcheck import ALPHA, DETECTOR_MARGIN, sibling_attack, sibling_predictions
from leaderboard.leakcheck.power import gap_at, main, significant_size, tiled
from leaderboard.leakcheck.scoring import _Detector, _detector_result

T = 6


def _dialogue(opening: str, system: list[str]) -> list[dict[str, str]]:
    turns = []
    for i, s in enumerate(system):
        turns += [
            {"speaker": "user", "text": opening if i == 0 else f"u{i}"},
            {"speaker": "system", "text": s},
        ]
    return turns


def _blind_set(families: int = 12, singles: int = 8):
    """``families`` families (D+ and forks at system turns 2, 3, 5, sharing D+'s opening) and
    ``singles`` dialogues alone with their opening (half conformant, half forks at turn 4)."""
    blind, gold = [], []

    def add(did, opening, system, fork_turn):
        blind.append(
            {"dialogue_id": did, "turns": _dialogue(opening, system), "num_system_turns": len(system)}
        )
        gold.append(
            {
                "dialogue_id": did,
                "num_system_turns": len(system),
                "fork_turn": fork_turn,
                "hallucination_type": None if fork_turn is None else "SSPC",
            }
        )

    for f in range(families):
        dplus = [f"s{f}-{j}" for j in range(1, T + 1)]
        add(f"f{f}-z", f"hi {f}", dplus, None)  # D+ ties with its latest fork: the larger id wins the tie
        for k in (2, 3, 5):
            add(f"f{f}-k{k}", f"hi {f}", dplus[: k - 1] + [f"X{f}-{j}" for j in range(k, T + 1)], k)
    for i in range(singles):
        system = [f"alone{i}-{j}" for j in range(1, T + 1)]
        add(f"s{i}", f"hello {i}", system, None if i % 2 == 0 else 4)
    return blind, gold


def test_groups_recover_every_fork_turn_and_call_dplus_conformant():
    blind, gold = _blind_set()
    truth = {g["dialogue_id"]: g["fork_turn"] for g in gold}
    pred = sibling_predictions(blind)
    grouped = {d: v for d, v in pred.items() if d.startswith("f")}
    assert grouped == {d: v for d, v in truth.items() if d.startswith("f")}  # exact: D+ None, forks t_k
    assert {d: pred[d] for d in pred if d.startswith("s")} == {f"s{i}": None for i in range(8)}  # own D+
    abstain = sibling_predictions(blind, singletons="abstain")
    assert abstain == grouped  # the singletons left to Random


def test_dplus_is_the_member_sharing_most_and_ties_go_to_the_larger_id():
    sys_ = ["a", "b", "c", "d"]

    def blind(ids):
        systems = (
            sys_,
            ["a", "b", "X", "Y"],
            ["a", "Q", "c", "d"],
            ["a", "b", "c", "W"],
            ["a", "P", "Z", "Z"],
        )
        return [
            {"dialogue_id": i, "turns": _dialogue("hi", s), "num_system_turns": 4}
            for i, s in zip(ids, systems)
        ]

    # shared leading system turns, summed: D+ 2+1+3+1 = 7, the fork at 4 3+2+1+1 = 7 (a tie: D+ and its
    # latest fork share the same with everyone), the fork at 3 6, at 2 4 and 4
    assert sibling_predictions(blind(["z", "a-k3", "b-k2", "c-k4", "d-k2"])) == {
        "z": None,
        "a-k3": 3,
        "b-k2": 2,
        "c-k4": 4,
        "d-k2": 2,
    }
    # the tie lost: the latest fork is taken for D+, D+ is flagged where they part, the rest unchanged
    assert sibling_predictions(blind(["a", "b-k3", "c-k2", "z-k4", "d-k2"])) == {
        "a": 4,
        "b-k3": 3,
        "c-k2": 2,
        "z-k4": None,
        "d-k2": 2,
    }


def test_the_issue_s_example_still_holds():
    def d(*texts):
        return _dialogue("u0", list(texts))

    blind = [
        {"dialogue_id": i, "turns": t, "num_system_turns": 4}
        for i, t in (("r", d("a", "b", "c", "d")), ("f", d("a", "b", "X", "Y")), ("g", d("a", "Q", "c", "d")))
    ]
    assert sibling_predictions(blind) == {"r": None, "f": 3, "g": 2}


def test_bad_arguments_say_what_to_pass():
    blind, _ = _blind_set(1, 0)
    with pytest.raises(ValueError, match="min_shared must be >= 1"):
        sibling_predictions(blind, min_shared=0)
    with pytest.raises(ValueError, match=r"singletons must be one of \('conformant', 'abstain'\)"):
        sibling_predictions(blind, singletons="random")


def test_attack_beats_random_and_fails_the_release():
    blind, gold = _blind_set()
    det = _Detector(gold, 400, 0)
    res = sibling_attack(blind, det)
    assert res.name == "sibling grouping (blind set)" and res.track == "detector"
    # every label recovered but the 4 singleton forks, called conformant: a3 = 36/40, the rest 1
    assert res.value == pytest.approx(100 * 0.9**0.15) and res.status == "FAIL"
    assert res.margin > DETECTOR_MARGIN and res.p_value < ALPHA
    assert res.value > det.random() + 50
    assert (
        "48/56 blind dialogues share an opening" in res.detail
        and "alone in its group called conformant" in res.detail
    )


def test_attack_draws_as_one_attack_from_the_shared_stream():
    blind, gold = _blind_set()
    a, b = _Detector(gold, 400, 0), _Detector(gold, 400, 0)
    sibling_attack(blind, a)
    _detector_result("", b, sibling_predictions(blind, singletons="conformant"), "")  # the rule reported
    assert np.array_equal(a.rng.integers(0, 2**31, 8), b.rng.integers(0, 2**31, 8))


@pytest.mark.parametrize(("families", "singles"), [(12, 8), (2, 12), (0, 8)])
def test_the_stronger_singleton_rule_is_reported(families, singles):
    blind, gold = _blind_set(families, singles)
    if families == 2:  # the singletons all forks: Random's guess can beat calling them conformant
        for g in gold:
            if g["dialogue_id"].startswith("s"):
                g["hallucination_type"], g["fork_turn"] = "SSPC", 4
    res = sibling_attack(blind, _Detector(gold, 400, 0))
    margins = {}
    for rule in ("conformant", "abstain"):
        margins[rule] = _detector_result(
            "", _Detector(gold, 400, 0), sibling_predictions(blind, singletons=rule), ""
        ).margin
    assert res.margin == pytest.approx(max(margins.values()))
    best = max(margins, key=lambda r: (margins[r], r == "conformant"))
    assert ("called conformant" if best == "conformant" else "Random's guess") in res.detail


# ---- the size at which a gap becomes significant -----------------------------------------------------


def _two_flag_gold():
    """24 dialogues like the demo's blind set (4 conformant, 20 forks), and a cheat that calls all
    conformant but two forks, flagged one turn after their fork turn: Score 64.2 against a matched
    Random of 43.5, p = 0.12 (the profile of the issue's 69.1 against 38.0)."""
    gold = [
        {
            "dialogue_id": f"d{i:02d}",
            "num_system_turns": 10,
            "hallucination_type": None if i < 4 else "GR",
            "fork_turn": None if i < 4 else 2 + i % 8,
        }
        for i in range(24)
    ]
    pred = {g["dialogue_id"]: None for g in gold}
    pred["d10"], pred["d17"] = gold[10]["fork_turn"] + 1, gold[17]["fork_turn"] + 1  # one turn late
    return gold, pred


def test_tiled_repeats_rows_and_predictions():
    gold, pred = _two_flag_gold()
    rows, p = tiled(gold, {"d10": 4, "d00": None}, 50)
    assert len(rows) == 50 and rows[24]["dialogue_id"] == "d00#1" and rows[49]["dialogue_id"] == "d01#2"
    assert p == {"d00#0": None, "d10#0": 4, "d00#1": None, "d10#1": 4, "d00#2": None}
    with pytest.raises(ValueError, match="size must be >= 1"):
        tiled(gold, pred, 0)
    with pytest.raises(ValueError, match="no row to repeat"):
        tiled([], pred, 3)


def test_whole_copies_keep_the_cheat_s_score():
    gold, pred = _two_flag_gold()
    assert gap_at(gold, pred, 24)["value"] == pytest.approx(gap_at(gold, pred, 72)["value"])


def test_a_gap_not_significant_on_24_dialogues_becomes_so_on_more():
    gold, pred = _two_flag_gold()
    out = significant_size(gold, pred, alpha=0.05)
    assert out["measured"]["n"] == 24 and out["measured"]["p_value"] >= 0.05
    assert out["measured"]["margin"] > DETECTOR_MARGIN  # a large gap, yet not significant
    assert out["size"] is not None and out["size"] > 24 and out["size"] % 24 == 0
    assert out["at_size"]["p_value"] < 0.05 and out["at_size"]["n"] == out["size"]
    assert significant_size(gold, pred, alpha=0.05) == out  # seeded: the same answer every run
    strict = significant_size(gold, pred, alpha=ALPHA)
    assert strict["size"] >= out["size"]


def test_an_exact_cheat_is_significant_at_once_and_no_cheat_never():
    gold, _ = _two_flag_gold()
    exact = {g["dialogue_id"]: g["fork_turn"] for g in gold}
    assert significant_size(gold, exact, alpha=0.05)["size"] == 24
    assert significant_size(gold, exact, alpha=0.05)["at_size"]["value"] == pytest.approx(100.0)
    assert significant_size(gold, {}, alpha=0.05, max_copies=3)["size"] is None  # Random itself


def test_significant_size_validates_its_arguments():
    gold, pred = _two_flag_gold()
    with pytest.raises(ValueError, match=r"alpha must be in \(0, 1\)"):
        significant_size(gold, pred, alpha=5)
    with pytest.raises(ValueError, match="needs at least 100 draws"):
        significant_size(gold, pred, alpha=0.01, draws=50)
    with pytest.raises(ValueError, match="max_copies must be >= 1"):
        significant_size(gold, pred, max_copies=0)


def test_cli_bad_hub_is_exit_2(tmp_path, capsys):
    assert main([str(tmp_path), str(tmp_path)]) == 2
    assert "no parquet files; HUB must be a DialFork Hub layout" in capsys.readouterr().err
