import json

import pytest

from corpus_factory import make_records
from dialfork_dataset import (
    JsonlAppender,
    JsonlError,
    RecordError,
    read_jsonl,
    repair_torn_tail,
    validate_jsonl_file,
    write_jsonl,
)


def test_atomic_write_and_read(tmp_path):
    p = tmp_path / "a" / "x.jsonl"
    rows = [{"a": 1, "t": "é"}, {"a": 2}]
    assert write_jsonl(p, rows) == 2
    assert read_jsonl(p) == rows
    assert [q.name for q in p.parent.iterdir()] == ["x.jsonl"]  # no temp file left


def test_failed_write_keeps_old_file(tmp_path):
    p = tmp_path / "x.jsonl"
    write_jsonl(p, [{"a": 1}])

    def gen():
        yield {"a": 2}
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_jsonl(p, gen())
    assert read_jsonl(p) == [{"a": 1}]
    assert [q.name for q in tmp_path.iterdir()] == ["x.jsonl"]


def test_malformed_line_reports_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"a": 1}\n{"a": \n\n[1,\n')
    with pytest.raises(JsonlError) as ei:
        read_jsonl(p)
    assert f"{p}:2:" in str(ei.value)
    with pytest.raises(JsonlError) as ei:
        read_jsonl(p, collect=True)
    assert len(ei.value.errors) == 2 and f"{p}:4:" in ei.value.errors[1]


def test_torn_tail_repair_and_append(tmp_path):
    p = tmp_path / "x.jsonl"
    with JsonlAppender(p) as ap:
        ap.append({"i": 1})
        ap.extend([{"i": 2}, {"i": 3}])
    with open(p, "ab") as fh:
        fh.write(b'{"i": 4, "tor')
    assert repair_torn_tail(p) > 0
    assert read_jsonl(p) == [{"i": 1}, {"i": 2}, {"i": 3}]
    assert repair_torn_tail(p) == 0
    with JsonlAppender(p) as ap:  # appender repairs on open too
        ap.append({"i": 4})
    assert [r["i"] for r in read_jsonl(p)] == [1, 2, 3, 4]
    # a complete-looking but unparsable last line is also torn
    with open(p, "ab") as fh:
        fh.write(b'{"i": 5,}\n')
    repair_torn_tail(p)
    assert len(read_jsonl(p)) == 4


def test_validate_file_reports_every_bad_line(tmp_path):
    recs = make_records(tasks=("weather",), per_task=1)
    lines = [json.dumps(r) for r in recs[:3]]
    bad1 = dict(recs[3], fork_position=9)
    bad2 = dict(recs[4], turns=[])
    lines += [json.dumps(bad1), "not json", json.dumps(bad2), json.dumps(recs[0])]
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError) as ei:
        validate_jsonl_file(p)
    errs = "\n".join(ei.value.errors)
    assert f"{p}:4:" in errs and "fork_position" in errs
    assert f"{p}:5:" in errs and "malformed JSON" in errs
    assert f"{p}:6:" in errs and "turns" in errs
    assert f"{p}:7:" in errs and "duplicate id (first on line 1)" in errs
