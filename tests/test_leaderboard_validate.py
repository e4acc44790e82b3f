"""Leaderboard validation: each error on its own crafted file, several at once, the schemas."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dialfork_dataset.taxonomy import forks_per_source
from leaderboard.synthetic import make_fixture, write_distances, write_metadata, write_predictions
from leaderboard.validate import (
    BlindSet,
    check_line_object,
    load_schema,
    metadata_problems,
    private_metadata_fields,
    schema_validator,
    validate_submission,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_fixture(tmp_path_factory.mktemp("lbv"), n_sources=2, seed=3)


@pytest.fixture(scope="module")
def blind(env):
    return BlindSet.from_dir(env["blind_dir"])


def _n_blind() -> int:
    """The fixture's blind dialogues: its 2 sources and all their forks (34 for the paper's types)."""
    return 2 * (1 + forks_per_source())


def _n_pairs() -> int:
    """The fixture's blind pairs: one per fork of its 2 sources (32 for the paper's types)."""
    return 2 * forks_per_source()


def _valid_lines(env):
    return [{"dialogue_id": b["dialogue_id"], "prediction": None} for b in env["blind"]]


def _write(path: Path, lines, raw: bytes | None = None, meta: bool = True) -> Path:
    if raw is not None:
        path.write_bytes(raw)
    else:
        path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    if meta:
        write_metadata(path.with_name(path.stem + ".metadata.json"), method="Test method")
    return path


def _codes(rep):
    return [p.code for p in rep.errors]


def test_blind_set_from_dir_matches_lead_loader(env, blind):
    from dialfork_dataset.hub import load_blind, load_blind_pairs

    rows = load_blind(env["blind_dir"])
    assert blind.turns == {r["dialogue_id"]: r["num_system_turns"] for r in rows}
    assert blind.pairs == {p["pair_id"] for p in load_blind_pairs(env["blind_dir"])}
    assert len(blind.turns) == _n_blind() and len(blind.pairs) == _n_pairs()
    assert len(blind.revision()) == 64


def test_valid_file_summary(env, blind, tmp_path):
    lines = _valid_lines(env)
    first = env["blind"][0]
    lines[0]["prediction"] = first["num_system_turns"]  # T itself is valid
    lines[1]["prediction"] = 1
    lines[2]["confidence"] = 0.3
    p = _write(tmp_path / "ok.jsonl", lines)
    rep = validate_submission(p, "detector", blind)
    assert rep.ok, rep.format_text()
    n = _n_blind()
    assert rep.summary == {
        "lines": n,
        "blind_size": n,
        "valid_ids": n,
        "flagged": 2,
        "not_flagged": n - 2,
        "share_flagged": round(2 / n, 4),
        "with_confidence": 1,
    }
    assert rep.values[first["dialogue_id"]] == first["num_system_turns"]
    assert len(rep.sha256) == 64 and rep.n_bytes == p.stat().st_size


def test_crlf_and_trailing_blank_lines_are_accepted(env, blind, tmp_path):
    text = "".join(json.dumps(x) + "\r\n" for x in _valid_lines(env)) + "\r\n"
    p = _write(tmp_path / "crlf.jsonl", None, raw=text.encode())
    rep = validate_submission(p, "detector", blind)
    assert rep.ok, rep.format_text()
    assert [w.code for w in rep.warnings] == ["blank_lines"]


# ---- one crafted file per error --------------------------------------------------------------


def _single(env, blind, tmp_path, mutate, name="f.jsonl"):
    lines = _valid_lines(env)
    mutate(lines)
    p = _write(tmp_path / name, lines)
    return validate_submission(p, "detector", blind)


@pytest.mark.parametrize(
    "value, code, needle",
    [
        (True, "bad_value", "boolean (true)"),
        (False, "bad_value", "boolean (false)"),
        (3.0, "bad_value", "float (3.0); turn indices are JSON integers (write 3)"),
        (2.5, "bad_value", "float (2.5)"),
        ("3", "bad_value", 'string ("3"); write the number without quotes'),
        ("null", "bad_value", "write null without quotes"),
        ("abc", "bad_value", 'string ("abc")'),
        ([1], "bad_value", "an array"),
        (-1, "out_of_range", "write null for 'no deviation' (never -1)"),
        (0, "out_of_range", "indices start at 1"),
        (99, "out_of_range", "outside 1..T"),
    ],
)
def test_each_bad_prediction_value(env, blind, tmp_path, value, code, needle):
    def m(lines):
        lines[4]["prediction"] = value

    rep = _single(env, blind, tmp_path, m)
    assert _codes(rep) == [code], rep.format_text()
    assert rep.errors[0].line == 5 and needle in rep.errors[0].message
    assert env["blind"][4]["dialogue_id"] in rep.errors[0].message


def test_prediction_above_T_names_T(env, blind, tmp_path):
    T = env["blind"][0]["num_system_turns"]

    def m(lines):
        lines[0]["prediction"] = T + 1

    rep = _single(env, blind, tmp_path, m)
    assert rep.errors[0].message.endswith(
        f"prediction {T + 1} outside 1..T (T={T} system turns in this dialogue)"
    )


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity(env, blind, tmp_path, token):
    lines = [json.dumps(x) for x in _valid_lines(env)]
    lines[2] = lines[2].replace("null", token)
    p = _write(tmp_path / "nan.jsonl", None, raw=("\n".join(lines) + "\n").encode())
    rep = validate_submission(p, "detector", blind)
    assert _codes(rep) == ["bad_value"]
    assert rep.errors[0].line == 3 and f"{token}, which is not valid JSON" in rep.errors[0].message


def test_missing_and_unknown_fields(env, blind, tmp_path):
    def m(lines):
        del lines[0]["prediction"]
        lines[1]["turn"] = 3
        lines[2] = {"prediction": None}

    rep = _single(env, blind, tmp_path, m)
    by_line = {(p.line, p.code) for p in rep.errors}
    assert (
        (1, "missing_field") in by_line
        and (2, "unknown_field") in by_line
        and (3, "missing_field") in by_line
    )
    # line 3 has no id: its blind id is then missing from the file
    assert ("missing_ids" in _codes(rep)) and f"1 of {_n_blind()} blind dialogues have no prediction" in str(
        rep.errors[-1]
    )
    assert "use null for 'no deviation'" in str(rep.errors[0])


def test_bad_id_types(env, blind, tmp_path):
    def m(lines):
        lines[0]["dialogue_id"] = 17
        lines[1]["dialogue_id"] = ""

    rep = _single(env, blind, tmp_path, m)
    assert [(p.line, p.code) for p in rep.errors if p.code == "bad_id"] == [(1, "bad_id"), (2, "bad_id")]
    assert f"2 of {_n_blind()} blind dialogues have no prediction" in rep.errors[-1].message


def test_duplicate_ids_name_both_lines(env, blind, tmp_path):
    def m(lines):
        lines.append(dict(lines[6]))

    rep = _single(env, blind, tmp_path, m)
    assert _codes(rep) == ["duplicate_id"]
    e = rep.errors[0]
    n = _n_blind() + 1  # the appended line
    assert (e.other_line, e.line) == (7, n) and f"on lines 7 and {n}" in e.message


def test_duplicate_key_inside_object(env, blind, tmp_path):
    lines = [json.dumps(x) for x in _valid_lines(env)]
    lines[0] = lines[0][:-1] + ', "prediction": 2}'
    p = _write(tmp_path / "dk.jsonl", None, raw=("\n".join(lines)).encode())
    rep = validate_submission(p, "detector", blind)
    assert _codes(rep) == ["duplicate_key"] and "['prediction']" in rep.errors[0].message


def test_unknown_ids_and_missing_blind_ids(env, blind, tmp_path):
    lines = _valid_lines(env)[:20]
    lines.append({"dialogue_id": "weather-1000-WIC-k1", "prediction": 2})
    p = _write(tmp_path / "u.jsonl", lines)
    rep = validate_submission(p, "detector", blind)
    assert _codes(rep) == ["unknown_id", "missing_ids"]
    assert rep.errors[0].line == 21 and "not in the blind test set" in rep.errors[0].message
    miss = rep.errors[1].message
    assert miss.startswith(f"{_n_blind() - 20} of {_n_blind()} blind dialogues have no prediction (first: ")
    assert miss.count("'d") == 10  # the first ten ids are named


def test_not_json_and_not_object(env, blind, tmp_path):
    lines = [json.dumps(x) for x in _valid_lines(env)]
    lines[3] = lines[3][:-1]  # truncated
    lines[5] = json.dumps([lines[5]])
    p = _write(tmp_path / "nj.jsonl", None, raw=("\n".join(lines) + "\n").encode())
    rep = validate_submission(p, "detector", blind)
    assert [(e.line, e.code) for e in rep.errors[:2]] == [(4, "not_json"), (6, "not_an_object")]
    assert _codes(rep)[2:] == ["missing_ids"]


def test_bom(env, blind, tmp_path):
    raw = b"\xef\xbb\xbf" + "".join(json.dumps(x) + "\n" for x in _valid_lines(env)).encode()
    rep = validate_submission(_write(tmp_path / "bom.jsonl", None, raw=raw), "detector", blind)
    assert _codes(rep) == ["bom"] and rep.errors[0].line == 1


def test_utf16(env, blind, tmp_path):
    raw = "".join(json.dumps(x) + "\n" for x in _valid_lines(env)).encode("utf-16")
    rep = validate_submission(_write(tmp_path / "u16.jsonl", None, raw=raw), "detector", blind)
    assert _codes(rep) == ["not_utf8"] and "UTF-16" in rep.errors[0].message


def test_not_utf8_names_each_line(env, blind, tmp_path):
    lines = ["".join(json.dumps(x)).encode() for x in _valid_lines(env)]
    lines[1] = lines[1].replace(b"null", b"\xff")
    lines[8] = b"\xc3(" + lines[8]
    rep = validate_submission(_write(tmp_path / "l1.jsonl", None, raw=b"\n".join(lines)), "detector", blind)
    bad = [e for e in rep.errors if e.code == "not_utf8"]
    assert [e.line for e in bad] == [2, 9]
    assert "missing_ids" in _codes(rep)


@pytest.mark.parametrize("raw", [b"", b"\n\n  \n"])
def test_empty_file(env, blind, tmp_path, raw):
    rep = validate_submission(_write(tmp_path / "e.jsonl", None, raw=raw), "detector", blind)
    assert _codes(rep) == ["empty_file"] and f"{_n_blind()} lines" in rep.errors[0].message


def test_size_cap_is_checked_before_reading(env, blind, tmp_path):
    p = _write(tmp_path / "big.jsonl", _valid_lines(env))
    rep = validate_submission(p, "detector", blind, max_bytes=100)
    assert _codes(rep) == ["too_large"] and "over the 100-byte cap" in rep.errors[0].message
    assert rep.sha256 is None  # not read


def test_missing_file(blind, tmp_path):
    rep = validate_submission(tmp_path / "nope.jsonl", "detector", blind, require_metadata=False)
    assert _codes(rep) == ["file_missing"]


# ---- metadata ---------------------------------------------------------------------------------


def test_metadata_missing_and_optional(env, blind, tmp_path):
    p = _write(tmp_path / "nm.jsonl", _valid_lines(env), meta=False)
    rep = validate_submission(p, "detector", blind)
    assert _codes(rep) == ["metadata_missing"] and "nm.metadata.json" in rep.errors[0].message
    assert validate_submission(p, "detector", blind, require_metadata=False).ok


def test_metadata_not_json(env, blind, tmp_path):
    p = _write(tmp_path / "mj.jsonl", _valid_lines(env), meta=False)
    (tmp_path / "mj.metadata.json").write_text("{method: x}", encoding="utf-8")
    rep = validate_submission(p, "detector", blind)
    assert _codes(rep) == ["metadata_not_json"]


def test_metadata_invalid_fields_all_reported():
    md = {
        "method": "",
        "regime": "online",
        "used_conformant_train": "yes",
        "model_name": None,
        "model_size": "big",
        "code_url": "ftp://x",
        "open_source": True,
        "contact": "secret-address",
        "colour": "red",
    }
    probs = metadata_problems(md, "detector")
    fields = sorted({p.field or "" for p in probs})
    assert fields == ["", "code_url", "contact", "method", "model_size", "regime", "used_conformant_train"]
    assert all("secret-address" not in p.message for p in probs)  # never echo the private contact
    assert any("colour" in p.message for p in probs)


def test_metadata_regime_required_for_detector_not_metric():
    md = {
        "method": "m",
        "used_conformant_train": False,
        "model_name": None,
        "model_size": None,
        "code_url": None,
        "open_source": False,
        "contact": "a@b.org",
    }
    assert [p.field for p in metadata_problems(md, "detector")] == ["regime"]
    assert "regime" in metadata_problems(md, "detector")[0].message
    assert metadata_problems(md, "metric") == []
    assert "track 'metric'" in metadata_problems({**md, "track": "metric"}, "detector")[0].message


def test_private_fields_come_from_schema():
    assert private_metadata_fields() == {"contact"}


def test_several_errors_at_once(env, blind, tmp_path):
    lines = [json.dumps(x) for x in _valid_lines(env)]
    lines[0] = lines[0].replace("null", "true")
    lines[1] = lines[1].replace("null", '"4"')
    lines[2] = "{oops"
    lines.append(lines[5])
    lines.append(json.dumps({"dialogue_id": "not-a-blind-id", "prediction": None}))
    lines[6] = lines[6].replace("null", "NaN")
    raw = b"\xef\xbb\xbf" + ("\n".join(lines) + "\n").encode()
    p = _write(tmp_path / "many.jsonl", None, raw=raw, meta=False)
    (tmp_path / "many.metadata.json").write_text(json.dumps({"method": "x"}), encoding="utf-8")
    rep = validate_submission(p, "detector", blind)
    codes = _codes(rep)
    for c in (
        "bom",
        "bad_value",
        "not_json",
        "duplicate_id",
        "unknown_id",
        "missing_ids",
        "metadata_invalid",
    ):
        assert c in codes, (c, rep.format_text())
    assert codes.count("bad_value") == 3
    assert [e.line for e in rep.errors if e.code != "metadata_invalid"][:7] == [
        1,
        1,
        2,
        3,
        7,
        _n_blind() + 1,
        _n_blind() + 2,
    ]


# ---- metric track -----------------------------------------------------------------------------


def test_metric_track(env, blind, tmp_path):
    dist = {p["pair_id"]: float(i) for i, p in enumerate(env["pairs"])}
    p = write_distances(dist, tmp_path / "m.jsonl")
    write_metadata(tmp_path / "m.metadata.json", method="M", track="metric")
    assert validate_submission(p, "metric", blind).ok
    lines = p.read_text().splitlines()
    lines[0] = lines[0].replace(lines[0].split(":")[-1], '"0.3"}')
    lines[1] = lines[1].replace(lines[1].split(":")[-1], "NaN}")
    lines[2] = lines[2].replace(lines[2].split(":")[-1], "true}")
    p.write_text("\n".join(lines[:-1]) + "\n")
    rep = validate_submission(p, "metric", blind)
    assert [(e.line, e.code) for e in rep.errors] == [
        (1, "bad_value"),
        (2, "bad_value"),
        (3, "bad_value"),
        (None, "missing_ids"),
    ]
    assert f"1 of {_n_pairs()} blind pairs have no distance" in rep.errors[-1].message


# ---- the hand-written line checks accept exactly what the JSON Schema accepts ------------------

_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)
_keys = st.sampled_from(["dialogue_id", "prediction", "confidence", "pair_id", "distance", "other"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=st.dictionaries(_keys, _values, max_size=4), track=st.sampled_from(["detector", "metric"]))
def test_line_checks_agree_with_json_schema(obj, track):
    from leaderboard.validate.lines import _NonFinite

    # what json.loads gives us: NaN/Infinity become the non-finite marker, ids strings mostly
    parsed = {
        k: (_NonFinite("NaN") if isinstance(v, float) and not math.isfinite(v) else v) for k, v in obj.items()
    }
    ok_hand = not check_line_object(parsed, track, T=None)
    schema_obj = {k: (float("nan") if isinstance(v, _NonFinite) else v) for k, v in parsed.items()}
    ok_schema = schema_validator(track).is_valid(schema_obj)
    # the schema has no -1 / 0 hint distinction: both reject; the blind-set range needs T (None here)
    assert ok_hand == ok_schema, (obj, check_line_object(parsed, track))


def test_schemas_are_valid_draft_2020_12():
    from jsonschema import Draft202012Validator

    for name in ("detector", "metric", "metadata", "result"):
        Draft202012Validator.check_schema(load_schema(name))
        assert load_schema(name)["x-version"] == 1


# ---- CLI ---------------------------------------------------------------------------------------


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "leaderboard", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or ROOT,
        timeout=120,
    )


def test_cli_validate_exit_codes_and_json(env, tmp_path):
    good = write_predictions({b["dialogue_id"]: None for b in env["blind"]}, tmp_path / "g.jsonl")
    write_metadata(tmp_path / "g.metadata.json", method="CLI method")
    r = _cli("validate", good, "--track", "detector", "--blind", env["blind_dir"])
    assert r.returncode == 0, r.stderr
    assert "valid detector submission" in r.stdout and "share_flagged: 0.0" in r.stdout
    bad = tmp_path / "b.jsonl"
    bad.write_text('{"dialogue_id": "zz", "prediction": 1.5}\n', encoding="utf-8")
    r = _cli("validate", bad, "--blind", env["blind_dir"], "--json")
    assert r.returncode == 2  # bad input exits 2, as every DialFork CLI
    rep = json.loads(r.stdout)
    assert rep["ok"] is False and rep["n_errors"] == len(rep["errors"]) == 4
    assert [e["code"] for e in rep["errors"]] == [
        "bad_value",
        "unknown_id",
        "missing_ids",
        "metadata_missing",
    ]
    r = _cli("validate", bad, "--blind", tmp_path / "nowhere")
    assert r.returncode == 2 and f"error: --blind {tmp_path / 'nowhere'}: no such folder or file" in r.stderr
