"""The template simulator's system side says only what the user has said (or the knowledge base's
answer), never the user's goal (issue 46, item 9: README's fork weather-4-GR-k2 named "Detroit"
before the user had said a city, and gave the forecast "in Chicago" after the user said Detroit)."""

from __future__ import annotations

import json
import re

import pytest

from generation.cli import main


@pytest.fixture(scope="module")
def corpus(star_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("sysvals") / "corpus"
    argv = [
        "--backend",
        "template",
        "--star",
        str(star_dir),
        "--out",
        str(out),
        "--tasks",
        "weather,doctor_schedule",
    ]
    assert main([*argv, "--per-task", "10", "--seed", "0", "--no-progress"]) == 0
    rows = [json.loads(x) for p in sorted(out.glob("*.jsonl")) for x in p.read_text().splitlines()]
    return {r["dialogue_id"]: r for r in rows}


CITIES = ("Detroit", "Chicago", "New York City", "San Francisco", "Los Angeles", "Seattle", "Boston", "Miami")


def _named_before_said(turns, pattern):
    """System turns naming a value (``pattern``'s match) that no earlier user turn has said."""
    said, bad = "", []
    for t in turns:
        if t["speaker"] == "user":
            said += " " + t["text"]
        else:
            bad += [m for m in re.findall(pattern, t["text"]) if m not in said]
    return bad


def test_readme_fork_names_no_city_before_the_user_and_keeps_the_users_city(corpus):
    gr = corpus["weather-4-GR-k2"]
    system = [t["text"] for t in gr["turns"] if t["speaker"] == "system"]
    assert gr["variant"] == "gr-partner-service"
    assert system[2] == "Let me pass your request for this to our partner service instead."
    forecast = next(t for t in system if "degrees" in t)
    assert " in Detroit," in forecast, forecast
    # D+ is unchanged: the forecast is the scenario's knowledge-base answer for the user's day and city
    d_plus = [t["text"] for t in corpus["weather-4"]["turns"] if t["speaker"] == "system"]
    assert d_plus[3] == (
        "It will be Partly Cloudy all day on Tuesday in Detroit, with temperatures of around 13 degrees celsius."
    )


def test_no_system_turn_names_a_city_or_doctor_the_user_has_not_said(corpus):
    city = "(" + "|".join(re.escape(c) for c in CITIES) + ")"
    bad = {}
    for did, r in corpus.items():
        # the alternative it pushes ({alt}); a skipped question's value is invented (SSPC, and any type
        # that jumps over steps, e.g. a premature close): D+ and the paper's types that keep the questions
        if r["variant"] in ("gr-other-item",) or r["hallucination_type"] not in (None, "GR", "CSC"):
            continue
        found = _named_before_said(r["turns"], city) + _named_before_said(r["turns"], r"Dr\. [A-Z][a-z]+")
        if found:
            bad[did] = found
    assert not bad, dict(list(bad.items())[:5])


def test_a_corrected_value_wins_over_the_first_one(corpus):
    """A user who declines the offered booking and names another doctor gets that doctor booked."""
    checked = 0
    for r in corpus.values():
        if r["hallucination_type"] is not None or r["task"] != "doctor_schedule":
            continue
        last = None
        for t in r["turns"]:
            names = re.findall(r"Dr\. [A-Z][a-z]+", t["text"])
            if t["speaker"] == "user" and names:
                last = names[-1]
            elif (
                t["speaker"] == "system"
                and names
                and ("is available at" in t["text"] or "is booked" in t["text"])
            ):
                assert names == [last], (r["dialogue_id"], t["text"], last)
                checked += 1
    assert checked
