"""Hostile submissions: each gets a line-numbered error, exit status 2 (bad input, as every DialFork CLI) and no traceback, and
nothing one submitter sends can change another submitter's results."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from leaderboard.__main__ import main
from leaderboard.render import render_html
from leaderboard.store import LocalStore, check_submitter
from leaderboard.submissions import submit
from leaderboard.synthetic import make_fixture, write_metadata, write_predictions
from leaderboard.validate import BlindSet, validate_submission

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_fixture(tmp_path_factory.mktemp("lbbad"), n_sources=2, seed=5, with_text=False)


def _lines(env, value_at_3: str | None = None) -> list[str]:
    out = [json.dumps({"dialogue_id": b["dialogue_id"], "prediction": None}) for b in env["blind"]]
    if value_at_3 is not None:
        out[2] = (
            '{"dialogue_id": '
            + json.dumps(env["blind"][2]["dialogue_id"])
            + ', "prediction": '
            + value_at_3
            + "}"
        )
    return out


def _write(tmp_path: Path, name: str, lines: list[str], **md) -> Path:
    p = tmp_path / f"{name}.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    write_metadata(tmp_path / f"{name}.metadata.json", method="Hostile", **md)
    return p


def _validate(env, path, capsys, *extra) -> tuple[int, str]:
    rc = main(["validate", str(path), "--blind", str(env["blind_dir"]), *map(str, extra)])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.out + cap.err
    return rc, cap.out + cap.err


@pytest.mark.parametrize("depth", [50, 5_000, 30_000])
def test_deeply_nested_json(env, tmp_path, capsys, depth):
    p = _write(tmp_path, "deep", _lines(env, "[" * depth + "]" * depth))
    rc, out = _validate(env, p, capsys)
    assert rc == 2 and ":3: " in out
    rep = validate_submission(p, "detector", BlindSet.from_dir(env["blind_dir"]))
    assert [e.line for e in rep.errors if e.line is not None] == [3]  # (+ its id counted as missing)
    assert rep.errors[0].message.endswith(
        (
            "is an array; write an integer system turn index or null",
            "nested too deeply to read; each line is one flat object",
        )
    )


@pytest.mark.parametrize("digits", [40, 4_000, 5_000, 20_000])
def test_integers_with_thousands_of_digits(env, tmp_path, capsys, digits):
    p = _write(tmp_path, "huge", _lines(env, "9" * digits))
    rc, out = _validate(env, p, capsys)
    assert rc == 2
    rep = validate_submission(p, "detector", BlindSet.from_dir(env["blind_dir"]))
    assert [(e.line, e.code) for e in rep.errors] == [(3, "out_of_range")]
    assert f"{digits:,} digits" in rep.errors[0].message and "9" * 40 not in out
    # negative, and as a metric distance or a confidence
    p = _write(tmp_path, "neg", _lines(env, "-" + "9" * digits))
    assert validate_submission(p, "detector", BlindSet.from_dir(env["blind_dir"])).errors[0].line == 3
    pair = sorted(env["pairs"], key=lambda x: x["pair_id"])
    lines = [json.dumps({"pair_id": x["pair_id"], "distance": 0.5}) for x in pair]
    lines[1] = '{"pair_id": ' + json.dumps(pair[1]["pair_id"]) + ', "distance": ' + "7" * digits + "}"
    m = _write(tmp_path, "dist", lines, track="metric")
    rc = main(["validate", str(m), "--track", "metric", "--blind", str(env["blind_dir"])])
    cap = capsys.readouterr()
    assert rc == 2 and "Traceback" not in cap.err and ":2: " in cap.err


def test_fifty_megabyte_line(env, tmp_path, capsys):
    p = tmp_path / "big.jsonl"
    with open(p, "wb") as fh:
        fh.write(b'{"dialogue_id": "' + b"x" * (50 * 1024 * 1024) + b'", "prediction": null}\n')
    write_metadata(tmp_path / "big.metadata.json", method="Big")
    rc, out = _validate(env, p, capsys)
    assert (
        rc == 2
        and "over the 33,554,432-byte cap" in out
        and ":1: line is longer than 65,536 characters" in out
    )
    # a cap raised by the maintainers: the line is still refused, by its number, without parsing it
    rc, out = _validate(env, p, capsys, "--max-bytes", 64 * 1024 * 1024)
    assert rc == 2 and ":1: line is 52,428," in out and "x" * 100 not in out


def test_fifty_megabyte_line_in_a_real_process(env, tmp_path):
    p = tmp_path / "big2.jsonl"
    good = _lines(env)
    with open(p, "w", encoding="utf-8") as fh:
        fh.write(good[0] + "\n" + '{"dialogue_id": "' + "y" * (50 * 1024 * 1024) + '"}\n')
    write_metadata(tmp_path / "big2.metadata.json", method="Big")
    r = subprocess.run(
        [sys.executable, "-m", "leaderboard", "validate", str(p), "--blind", str(env["blind_dir"])],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and ":2: line is longer than" in r.stderr


def test_submitter_with_a_trailing_newline(env, tmp_path, capsys):
    with pytest.raises(ValueError, match="not a valid id"):
        check_submitter("alice\n")
    sub = write_predictions({b["dialogue_id"]: 2 for b in env["blind"]}, tmp_path / "s.jsonl")
    write_metadata(tmp_path / "s.metadata.json", method="Newline")
    store = tmp_path / "store"
    rc = main(
        ["score", str(sub), "--gold", str(env["gold_dir"]), "--results", str(store), "--submitter", "alice\n"]
    )
    cap = capsys.readouterr()
    assert rc == 2 and "Traceback" not in cap.err and "not a valid id" in cap.err and "'alice\\n'" in cap.err
    # the same name in the metadata: a metadata error naming the field
    write_metadata(tmp_path / "s.metadata.json", method="Newline", submitter="alice\n")
    rc = main(["score", str(sub), "--gold", str(env["gold_dir"]), "--results", str(store)])
    cap = capsys.readouterr()
    assert (
        rc == 2
        and "metadata: submitter must be 1 to 64 letters" in cap.err
        and 'got a string ("alice\\n")' in cap.err
    )
    assert not (store / "results").exists()


@pytest.mark.parametrize("payload", ["[" * 100_000 + "]" * 100_000, '{"method": ' + "1" * 6000 + "}"])
def test_hostile_metadata(env, tmp_path, capsys, payload):
    p = _write(tmp_path, "md", _lines(env))
    (tmp_path / "md.metadata.json").write_text(payload, encoding="utf-8")
    rc, out = _validate(env, p, capsys)
    assert rc == 2 and "metadata" in out


def test_error_report_is_capped(env, tmp_path, capsys):
    lines = _lines(env) + [
        json.dumps({"dialogue_id": f"extra-{i}" + "q" * 500, "prediction": 1.5}) for i in range(5000)
    ]
    p = _write(tmp_path, "many", lines)
    rep = validate_submission(p, "detector", BlindSet.from_dir(env["blind_dir"]))
    assert len(rep.errors) == 100 and rep.n_errors == 10_000 and rep.to_dict()["errors_omitted"] == 9_900
    assert all(len(e.message) < 300 for e in rep.errors)  # ids shortened
    rc, out = _validate(env, p, capsys, "--max-errors", 5)
    assert rc == 2 and "10,000 error(s)" in out and "... and 9,995 more" in out


def test_nothing_one_submitter_sends_alters_another(env, tmp_path):
    t = iter(datetime(2026, 5, 4, 9, 0, s, tzinfo=timezone.utc) for s in range(60))
    store = LocalStore(tmp_path / "store", clock=lambda: next(t), max_per_day=50)
    sub = write_predictions({b["dialogue_id"]: 2 for b in env["blind"]}, tmp_path / "s.jsonl")
    write_metadata(tmp_path / "bob.metadata.json", method="Bob's method")
    bob = submit(
        sub,
        track="detector",
        gold=env["gold_dir"],
        store=store,
        submitter="bob",
        metadata=tmp_path / "bob.metadata.json",
        ci_resamples=0,
    )
    before = {p: p.read_bytes() for p in (tmp_path / "store").rglob("*.json")}
    hostile_methods = [
        "../../bob/bob-s-method",
        "bob's method",
        "..",
        "@FOOTER@",
        "@BODY@",
        "</script><b>x",
        "/etc/passwd",
        "bob/x",
    ]
    for i, method in enumerate(hostile_methods):
        md = tmp_path / f"m{i}.metadata.json"
        write_metadata(md, method=method, submitter="bob")  # claims to be bob; the submitter given wins
        own = write_predictions(  # a file of its own: one file is scored once per submitter
            {b["dialogue_id"]: (1 if j <= i else 2) for j, b in enumerate(env["blind"])},
            tmp_path / f"s{i}.jsonl",
        )
        st = submit(
            own,
            track="detector",
            gold=env["gold_dir"],
            store=store,
            submitter="mallory",
            metadata=md,
            ci_resamples=0,
        )
        assert st.key.startswith("mallory/") and st.result["metadata"]["submitter"] == "mallory"
    for bad in ("bob/..", "../bob", "bob\n", ".bob", "bob mallory", "b" * 65):
        with pytest.raises(ValueError):
            submit(sub, track="detector", gold=env["gold_dir"], store=store, submitter=bad, ci_resamples=0)
    # bob's files are byte for byte what they were; everything new is under mallory/
    for p, data in before.items():
        assert p.read_bytes() == data
    new = [p for p in (tmp_path / "store").rglob("*.json") if p not in before]
    rel = {p.relative_to(tmp_path / "store").parts[:2] for p in new}
    assert rel <= {("results", "mallory"), ("private", "mallory")} and len(new) == 2 * len(hostile_methods)
    assert store.count_today("bob") == 1 and bob.key in store.keys(submitter="bob")
    # the page keeps every name literal: no template token is substituted inside user data
    page = render_html(store.results())
    assert ">@FOOTER@<" in page and ">@BODY@<" in page and "</script><b>" not in page
    assert (
        page.count("Submit on the Space or check a file") == 1 and page.count('<section id="detector">') == 1
    )


def test_unterminated_string_says_at_column_once(env, tmp_path, capsys):
    """Issue 51: "Unterminated string starting at at column" read "at" twice; bad input exits 2."""
    lines = _lines(env)
    lines[1] = '{"dialogue_id": "abc'
    rc, out = _validate(env, _write(tmp_path, "unterminated", lines), capsys)
    assert rc == 2 and ":2: " in out
    assert "Unterminated string starting at column" in out and "at at" not in out
