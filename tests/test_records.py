import copy

import pytest

from corpus_factory import make_records
from dialfork_dataset import (
    DialogueRecord,
    RecordError,
    normalize_record,
    record_features,
    validate_record,
    validate_records,
)

RECS = make_records(tasks=("weather",), per_task=1, T=6)
CONF = RECS[0]
FORK = next(r for r in RECS if r["hallucination_type"] == "WIC" and r["fork_position"] == 2)


def broken(base, **changes):
    r = copy.deepcopy(base)
    for k, v in changes.items():
        if v is KeyError:
            r.pop(k)
        else:
            r[k] = v
    return r


def test_valid_records_pass_and_roundtrip():
    for r in RECS:
        validate_record(r)
        assert DialogueRecord.from_dict(r).to_dict() == normalize_record(r)
    assert DialogueRecord.from_dict(CONF).is_conformant
    assert not DialogueRecord.from_dict(FORK).is_conformant


@pytest.mark.parametrize(
    "base, changes, fragment",
    [
        (CONF, {"dialogue_id": ""}, "dialogue_id: must be a non-empty string"),
        (CONF, {"dialogue_id": KeyError}, "dialogue_id: missing"),
        (CONF, {"source_id": KeyError}, "source_id: missing"),
        (CONF, {"turns": [{"speaker": "bot", "text": "hi"}]}, "turns[0].speaker: must be 'user' or 'system'"),
        (CONF, {"turns": [{"speaker": "user", "text": "  "}]}, "turns[0].text: empty text"),
        (CONF, {"turns": [{"speaker": "user", "text": 3}]}, "turns[0].text: must be a string"),
        (CONF, {"turns": []}, "turns: must be a non-empty list"),
        (CONF, {"num_system_turns": 5}, "num_system_turns: is 5 but turns hold 6 system turns"),
        (
            CONF,
            {"fork_position": 2},
            "fork_position: a conformant record (hallucination_type null) must not carry",
        ),
        (CONF, {"variant": "x"}, "variant: a conformant record"),
        (CONF, {"source_id": "other"}, "source_id: a conformant record's source_id must equal"),
        (FORK, {"hallucination_type": "XYZ"}, "hallucination_type: unknown type 'XYZ'"),
        (FORK, {"fork_position": None}, "fork_position: a forked record needs"),
        (FORK, {"fork_position": 5}, "fork_position: must be an integer in 1..4"),
        (FORK, {"fork_turn": None}, "fork_turn: a forked record needs"),
        (FORK, {"fork_turn": 7}, "fork_turn: must be an integer in 1..T (T=6)"),
        (FORK, {"fork_turn": 0}, "fork_turn: must be an integer in 1..T"),
        (FORK, {"substitute_task": None}, "substitute_task: a WIC fork must record"),
        (FORK, {"instruction": ""}, "instruction: a forked record needs"),
        (FORK, {"seed": "1"}, "seed: must be an integer"),
        (FORK, {"extra_field": 1}, "unknown field(s) ['extra_field']"),
    ],
)
def test_each_violation_names_id_and_field(base, changes, fragment):
    r = broken(base, **changes)
    with pytest.raises(ValueError) as ei:
        validate_record(r)
    msg = str(ei.value)
    assert fragment in msg
    assert f"dialogue_id={r.get('dialogue_id')!r}" in msg


def test_all_violations_collected():
    r = broken(FORK, fork_position=9, fork_turn=None, turns=[{"speaker": "bot", "text": ""}])
    with pytest.raises(RecordError) as ei:
        validate_record(r)
    assert len(ei.value.errors) >= 4


def test_validate_records_reports_every_bad_record_with_position():
    recs = [CONF, broken(CONF, dialogue_id=""), FORK, broken(FORK, fork_position=7), CONF]
    with pytest.raises(RecordError) as ei:
        validate_records(recs, source="x.jsonl")
    errs = ei.value.errors
    assert any(e.startswith("x.jsonl:2:") for e in errs)
    assert any(e.startswith("x.jsonl:4:") for e in errs)
    assert any("x.jsonl:5:" in e and "duplicate id" in e for e in errs)


def test_features_types():
    from datasets import List, Value

    f = record_features()
    assert isinstance(f["turns"], List)
    assert f["turns"].feature == {"speaker": Value("string"), "text": Value("string")}
    assert f["hallucination_type"] == Value("string")
    # conformant rows are null in the typed column
    enc = f.encode_example(normalize_record(CONF))
    assert enc["hallucination_type"] is None and enc["fork_turn"] is None
