"""Compound forks (SPEC section 3): plans, the ``injections`` field, and generation (a compound fork
follows D+ up to its first injection, the single fork of that injection up to its second, and
departs from both)."""

from __future__ import annotations

import json

import pytest

from dialfork_dataset.records import record_errors, validate_record
from generation.compound import compound_key, parse_compound_plan, plan_text


def test_plans():
    assert parse_compound_plan("SSPC@1,GR@3") == (("SSPC", 1), ("GR", 3))
    assert parse_compound_plan(" sspc@1 , gr@3 ,csc@4") == (("SSPC", 1), ("GR", 3), ("CSC", 4))
    assert plan_text((("SSPC", 1), ("GR", 3))) == "SSPC@1,GR@3"
    assert compound_key("weather-4", (("SSPC", 1), ("GR", 3))) == "weather-4-SSPC+GR-k1+k3"
    assert compound_key("weather-4", (("SSPC", 1), ("GR", 3))).rsplit("-", 2)[0] == "weather-4"
    for bad, why in (
        ("GR@3,SSPC@1", "increase strictly"),
        ("SSPC@1,GR@1", "increase strictly"),
        ("SSPC@1", "at least two"),
        ("XX@1,GR@2", "TYPE@K"),
        ("SSPC@5,GR@6", "TYPE@K"),
        ("SSPC1,GR@2", "TYPE@K"),
        ("", "at least two"),
    ):
        with pytest.raises(ValueError, match=why):
            parse_compound_plan(bad)


def _fork(**kw):
    r = {
        "dialogue_id": "t-1-SSPC+GR-k1+k3",
        "source_id": "t-1",
        "scenario_id": "1",
        "task": "t",
        "domain": "t",
        "hallucination_type": "SSPC",
        "variant": "sspc-repeat",
        "instruction": "Repeat a step.",
        "substitute_task": None,
        "fork_position": 1,
        "fork_turn": 1,
        "num_system_turns": 5,
        "turns": [{"speaker": s, "text": "x"} for s in ("user", "system") * 5],
        "seed": 1,
        "generator": "template",
        "injections": [
            {"type": "SSPC", "variant": "sspc-repeat", "turn": 1},
            {"type": "GR", "variant": "gr-upsell", "turn": 3},
        ],
    }
    r.update(kw)
    return r


def test_injections_field_validation():
    validate_record(_fork())
    validate_record(_fork(injections=None))  # a single fork
    assert any(
        "strictly" in e
        for e in record_errors(
            _fork(
                injections=[
                    {"type": "SSPC", "variant": "a", "turn": 1},
                    {"type": "GR", "variant": "b", "turn": 1},
                ]
            )
        )
    )
    assert any(
        "1..T (T=5)" in e
        for e in record_errors(
            _fork(
                injections=[
                    {"type": "SSPC", "variant": "sspc-repeat", "turn": 1},
                    {"type": "GR", "variant": "b", "turn": 6},
                ]
            )
        )
    )
    assert any(
        "at least 2" in e
        for e in record_errors(_fork(injections=[{"type": "SSPC", "variant": "a", "turn": 1}]))
    )
    assert any(
        "unknown type 'XX'" in e
        for e in record_errors(
            _fork(
                injections=[
                    {"type": "SSPC", "variant": "sspc-repeat", "turn": 1},
                    {"type": "XX", "variant": "b", "turn": 2},
                ]
            )
        )
    )
    assert any(
        "exactly type, variant, turn" in e
        for e in record_errors(
            _fork(
                injections=[{"type": "SSPC", "variant": "sspc-repeat", "turn": 1}, {"type": "GR", "turn": 2}]
            )
        )
    )
    errs = record_errors(_fork(fork_turn=3, variant="other"))
    assert any(
        e.startswith("fork_turn: a compound fork's fork_turn is its first injection's turn") for e in errs
    )
    assert any(e.startswith("variant: a compound fork's variant") for e in errs)
    conf = _fork(
        hallucination_type=None,
        variant=None,
        instruction=None,
        fork_position=None,
        fork_turn=None,
        dialogue_id="t-1",
    )
    assert any(e.startswith("injections: a conformant record") for e in record_errors(conf))


def _records(path):
    return {r["dialogue_id"]: r for r in map(json.loads, path.open())}


def _system_index(turns, t):
    return [i for i, x in enumerate(turns) if x["speaker"] == "system"][t - 1]


def test_compound_fork_diverges_at_each_injection(star_dir, tmp_path):
    from generation import GenerationConfig, generate_corpus

    common = {"star": str(star_dir), "tasks": ("weather", "bank_balance"), "per_task": 3}
    generate_corpus(GenerationConfig(out=str(tmp_path / "single"), **common), progress=False)
    m = generate_corpus(
        GenerationConfig(out=str(tmp_path / "compound"), compound=(("SSPC", 1), ("GR", 3)), **common),
        progress=False,
    )
    assert m["config"]["compound"] == "SSPC@1,GR@3"
    single = {
        **_records(tmp_path / "single" / "weather.jsonl"),
        **_records(tmp_path / "single" / "bank_balance.jsonl"),
    }
    comp = {
        **_records(tmp_path / "compound" / "weather.jsonl"),
        **_records(tmp_path / "compound" / "bank_balance.jsonl"),
    }
    forks = [r for r in comp.values() if r["hallucination_type"] is not None]
    assert len(forks) == 6 and m.counts["total"]["forks"] == 6
    for r in forks:
        validate_record(r)
        src = comp[r["source_id"]]
        assert src["turns"] == single[r["source_id"]]["turns"]  # the same D+ in both runs
        inj = r["injections"]
        t1, t3 = inj[0]["turn"], inj[1]["turn"]
        assert [x["type"] for x in inj] == ["SSPC", "GR"] and t1 == 1 and t1 < t3
        assert (r["hallucination_type"], r["fork_position"], r["fork_turn"], r["variant"]) == (
            "SSPC",
            1,
            t1,
            inj[0]["variant"],
        )
        first = single[f"{r['source_id']}-SSPC-k1"]
        assert first["variant"] == inj[0]["variant"]
        i1, i3 = _system_index(r["turns"], t1), _system_index(r["turns"], t3)
        # D+ up to the first injection, then not
        assert r["turns"][:i1] == src["turns"][:i1] and r["turns"][i1]["text"] != src["turns"][i1]["text"]
        # the single SSPC@1 fork up to the second injection, then not
        assert r["turns"][:i3] == first["turns"][:i3]
        assert r["turns"][i3]["text"] != first["turns"][i3]["text"]

    # Task 3 scores a compound fork on its earliest injection
    from dialfork_metrics.task3 import score_predictions

    gold = [
        {k: r[k] for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for r in comp.values()
    ]
    exact = score_predictions(
        {r["dialogue_id"]: r["injections"][0]["turn"] if r["injections"] else None for r in comp.values()},
        gold,
    )
    assert exact["mae_h"] == 0 and exact["cov_c"] == 0
