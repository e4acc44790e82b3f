"""Corpus and record validation never crashes (issue 14, section 3): hostile record files give
``file:line: dialogue_id=...: field: reason`` and exit 2, never a traceback."""

from __future__ import annotations

import copy
import gzip
import json

import numpy as np
import pytest

from corpus_factory import make_records
from dialfork_dataset import RecordError, normalize_record, validate_records
from dialfork_dataset.__main__ import main
from dialfork_dataset.builder import load_records
from dialfork_dataset.jsonl import JsonlError, iter_jsonl, read_jsonl
from dialfork_dataset.records import record_errors, show

RECS = make_records(tasks=("weather",), per_task=1, T=6)
CONF = RECS[0]
DID = CONF["dialogue_id"]


def line_with(raw_value: str, field: str = "seed") -> str:
    """CONF as one JSON line with ``field`` holding the literal JSON text ``raw_value``."""
    r = copy.deepcopy(CONF)
    r[field] = "__PLACEHOLDER__"
    return json.dumps(r).replace('"__PLACEHOLDER__"', raw_value)


def changed(**kw) -> str:
    r = copy.deepcopy(CONF)
    r.update(kw)
    return json.dumps(r)


# (case id, JSON line, field in the message, reason fragment)
CASES = [
    ("turns-string", changed(turns="hello"), "turns", "must be a non-empty list of {speaker, text}"),
    (
        "turns-strings",
        changed(turns=["hi", "hello"]),
        "turns[0]",
        "must be an object with 'speaker' and 'text'",
    ),
    ("turns-null", changed(turns=[None]), "turns[0]", "must be an object"),
    (
        "turns-nested",
        changed(turns=[[["hi"]], [{"speaker": "user", "text": "x"}]]),
        "turns[0]",
        "must be an object",
    ),
    (
        "speaker-list",
        changed(turns=[{"speaker": ["user"], "text": "x"}]),
        "turns[0].speaker",
        "must be 'user' or",
    ),
    (
        "nan",
        changed(decoding={"temperature": float("nan")}),
        "decoding.temperature",
        "NaN is not a JSON number",
    ),
    ("infinity", line_with("Infinity", "seed"), "seed", "inf is not a JSON number"),
    ("decoding-list", changed(decoding=[1, 2]), "decoding", "must be an object"),
    ("decoding-string-k", changed(decoding={"top_k": "5"}), "decoding.top_k", "must be an integer"),
    ("int-5000-digits", line_with("9" * 5000), "seed", "an integer of 5000 digits is out of range"),
    (
        "int-3000-digits",
        line_with("9" * 3000),
        "seed",
        "must fit in a signed 64-bit integer, got an integer of about",
    ),
    (
        "int-t-3000-digits",
        line_with("9" * 3000, "num_system_turns"),
        "num_system_turns",
        "must be an integer in 0..",
    ),
    ("deep-100000", line_with("[" * 100_000 + "]" * 100_000), "seed", "nested too deeply to parse"),
    (
        "deep-500",
        line_with("[" * 500 + "]" * 500, "turns"),
        "turns[0][0][0][0][0][0][0]",
        "nested deeper than",
    ),
    (
        "deep-object",
        line_with('{"a":' * 300 + "1" + "}" * 300, "decoding"),
        "decoding" + ".a" * 7,
        "nested deeper than 7",
    ),
]


@pytest.mark.parametrize("case, text, field, fragment", CASES, ids=[c[0] for c in CASES])
def test_hostile_line_is_reported_with_file_line_id_and_field(tmp_path, capsys, case, text, field, fragment):
    good = json.dumps(RECS[1])
    path = tmp_path / "records.jsonl"
    path.write_text(good + "\n" + good.replace(RECS[1]["dialogue_id"], "other-id") + "\n" + text + "\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err) < 20_000
    expected = f"{path}:3: dialogue_id={DID!r}: {field}: "
    lines = [ln for ln in err.splitlines() if ln.startswith(expected)]
    assert lines and fragment.lower() in " ".join(lines).lower(), err[:2000]


def test_bad_utf8_byte_is_reported_on_its_own_line(tmp_path, capsys):
    lines = [json.dumps(r, ensure_ascii=False).encode() for r in RECS[:3]]
    lines[2] = lines[2].replace(b'"text": "', b'"text": "\xff', 1)
    path = tmp_path / "r.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: dialogue_id={RECS[2]['dialogue_id']!r}: turns: not valid UTF-8 (byte 0xff" in err
    assert f"{path}:1:" not in err and "Traceback" not in err
    # gzip: the same, line by line
    gz = tmp_path / "r.jsonl.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(JsonlError, match=r"r\.jsonl\.gz:3: .*not valid UTF-8"):
        read_jsonl(gz)
    # collect mode yields the good lines first, then lists the bad one
    got = []
    with pytest.raises(JsonlError) as ei:
        for lineno, _ in iter_jsonl(path, collect=True):
            got.append(lineno)
    assert got == [1, 2] and len(ei.value.errors) == 1


def test_normalize_record_never_raises_on_malformed_records():
    for _, text, _, _ in CASES:
        try:
            obj = json.loads(text)
        except (ValueError, RecursionError):
            continue
        normalize_record(obj)  # passes malformed values through unchanged
    assert normalize_record({"turns": "abc", "decoding": [1]})["turns"] == "abc"


def test_python_values_that_are_not_json(tmp_path):
    bad = [
        (dict(CONF, seed=np.int64(3)), "seed: a numpy.int64 is not JSON-serialisable"),
        (dict(CONF, task={"weather"}), "task: a builtins.set is not JSON-serialisable"),
        (dict(CONF, decoding={"top_p": float("inf")}), "decoding.top_p: inf is not a JSON number"),
        (dict(CONF, generator=b"template"), "generator: a builtins.bytes is not JSON-serialisable"),
        (
            dict(CONF, seed=10**5000),
            "seed: must fit in a signed 64-bit integer, got an integer of about 5001 digits",
        ),
        ({**CONF, 3: "x"}, "record: field names must be strings"),
    ]
    for rec, fragment in bad:
        assert any(fragment in e for e in record_errors(rec)), (fragment, record_errors(rec))
    with pytest.raises(RecordError) as ei:
        validate_records([b for b, _ in bad], source="mem")
    assert "mem:5: dialogue_id=" in str(ei.value)
    with pytest.raises(RecordError, match=r"<records>\[1\]: dialogue_id="):
        load_records([bad[0][0], "not a record"])


def test_show_is_always_printable():
    deep: list = []
    cur = deep
    for _ in range(10_000):
        cur.append([])
        cur = cur[0]
    assert len(show(deep)) < 100
    assert show(10**5000) == "an integer of about 5001 digits"
    assert show([10**5000]).startswith("a value of type list") or "digits" in show([10**5000])
    assert "..." in show("x" * 10_000) and len(show("x" * 10_000)) < 100
