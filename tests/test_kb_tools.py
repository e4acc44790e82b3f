"""KB tools (generation/kb_tools.py): tool schemas from a source's APIs, the executor, the tool loop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from generation.kb_tools import (
    KBExecutor,
    field_schema,
    run_tool_loop,
    tool_messages,
)

INSURANCE = Path(__file__).resolve().parents[1] / "examples" / "workflows" / "insurance.yaml"
WEATHER_DAYS = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


@pytest.fixture(scope="module")
def star_tools(star_dir):
    return KBExecutor(str(star_dir), ["weather", "doctor_schedule", "restaurant_search", "hotel_search"])


@pytest.fixture(scope="module")
def claims():
    return KBExecutor(f"workflow:{INSURANCE}")


def test_field_schema_by_type():
    assert field_schema({"Name": "Day", "Type": "Categorical", "Categories": ["Mon", "Tue"]}) == {
        "type": "string",
        "enum": ["Mon", "Tue"],
        "description": "Day",
    }
    assert field_schema({"Name": "T", "Type": "Integer", "Min": -5, "Max": 30, "ReadableName": "Temp"}) == {
        "type": "integer",
        "minimum": -5,
        "maximum": 30,
        "description": "Temp",
    }
    assert field_schema({"Name": "B", "Type": "Boolean"})["type"] == "boolean"
    assert field_schema({"Name": "A", "Type": "CategoricalMultiple", "Categories": ["x"]})["items"] == {
        "type": "string",
        "enum": ["x"],
    }
    assert field_schema({"Name": "N", "Type": "ShortString"})["type"] == "string"


def test_star_tool_schemas(star_tools):
    # four STAR search APIs share the function name generic_sample: their tools take the API's name
    assert sorted(star_tools.by_name) == ["doctor_schedule", "hotel_search", "restaurant_search", "weather"]
    (w,) = star_tools.tools("weather")
    f = w["function"]
    assert w["type"] == "function" and f["name"] == "weather"
    assert f["parameters"]["required"] == ["Day"] and f["parameters"]["additionalProperties"] is False
    assert f["parameters"]["properties"]["Day"]["enum"] == WEATHER_DAYS
    assert star_tools.tools("no_such_task") == []
    assert len(star_tools.tools()) == 4


def test_valid_call_is_deterministic_and_respects_the_arguments(star_tools):
    a = star_tools.execute("weather", '{"Day": " monday ", "City": "chicago"}', seed=7)
    b = star_tools.execute("weather", {"City": "Chicago", "Day": "Monday"}, seed=7)
    assert a.ok and a.content == b.content  # canonical spelling: the same call
    body = json.loads(a.content)
    assert 1 <= body["count"] <= 3 and len(body["rows"]) == body["count"]
    for row in body["rows"]:
        assert row["Day"] == "Monday" and row["City"] == "Chicago"
        assert -5 <= row["TemperatureCelsius"] <= 30
        assert set(row) == {"City", "Weather", "TemperatureCelsius", "Day"}  # the API's outputs
    assert len({json.dumps(r, sort_keys=True) for r in body["rows"]}) == len(
        body["rows"]
    )  # no duplicate rows


def test_happy_lookups_succeed_unhappy_ones_fail_a_third_of_the_time(star_tools):
    happy = [
        json.loads(star_tools.execute("weather", {"Day": d}, seed=s).content)["count"]
        for d in WEATHER_DAYS
        for s in range(30)
    ]
    assert min(happy) >= 1
    unhappy = [
        json.loads(star_tools.execute("weather", {"Day": d}, happy=False, seed=s).content)["count"]
        for d in WEATHER_DAYS
        for s in range(30)
    ]
    share = sum(c == 0 for c in unhappy) / len(unhappy)
    assert 0.2 < share < 0.47, share  # 1/3 by the stable hash (210 calls)


@pytest.mark.parametrize(
    "args, fragments",
    [
        ('{"Day": "Funday"}', ["Day must be one of"]),
        ('{"City": "Chicago"}', ["missing required argument(s) ['Day']"]),
        ('{"Day": "Monday", "Foo": 1}', ["unknown argument(s) ['Foo']"]),
        ('{"Day": "Monday", "TemperatureCelsius": 99}', ["between -5 and 30"]),
        ('{"Day": "Monday", "TemperatureCelsius": "warm"}', ["must be an integer"]),
        ('{"Day": 3, "Foo": 1}', ["Day must be one of", "unknown argument"]),  # all problems at once
        ("{not json", ["not valid JSON"]),
        ("[1, 2]", ["must be a JSON object"]),
        ('"Monday"', ["must be a JSON object"]),
        ("x" * 20000, ["longer than"]),
        ("[" * 100000 + "]" * 100000, ["longer than"]),
    ],
)
def test_invalid_calls_get_an_error_result_never_an_exception(star_tools, args, fragments):
    r = star_tools.execute("weather", args)
    assert not r.ok and r.rows == ()
    msg = json.loads(r.content)["error"]
    assert msg == r.error
    for f in fragments:
        assert f in msg


def test_unknown_tool(star_tools):
    r = star_tools.execute("drop_tables", "{}")
    assert not r.ok and "unknown tool 'drop_tables'" in r.error and "weather" in r.error
    assert not star_tools.execute(None, "{}").ok


def test_stored_rows_are_filtered(claims):
    assert sorted(claims.by_name) == ["claim_status", "file_claim"]
    r = claims.execute("claim_status", {"FullName": "Ana Lopez", "ClaimNumber": 502377})
    body = json.loads(r.content)
    assert body["count"] == 1 and body["rows"][0]["ClaimStatus"] == "approved"
    assert body["rows"][0]["AdjusterName"] == "Tom Becker"
    none = json.loads(
        claims.execute("claim_status", {"FullName": "Ana Lopez", "ClaimNumber": 111111}).content
    )
    assert none == {"count": 0, "rows": []}


def test_an_action_gets_one_row(claims):
    args = {
        "FullName": "Ana Lopez",
        "PolicyNumber": "HM-30021",
        "IncidentType": "theft",
        "IncidentDate": "4 January",
    }
    a, b = claims.execute("file_claim", args), claims.execute("file_claim", json.dumps(args))
    assert a.ok and a.content == b.content
    body = json.loads(a.content)
    assert body["count"] == 1
    row = body["rows"][0]
    assert set(row) == {"ClaimNumber", "AdjusterName", "ResponseDays"}
    assert row["ClaimNumber"] in (381204, 502377, 640918, 733451) and 2 <= row["ResponseDays"] <= 5


def test_tool_messages_answer_every_call_in_order(star_tools):
    calls = [
        {"id": "a", "type": "function", "function": {"name": "weather", "arguments": '{"Day": "Monday"}'}},
        {"id": "b", "type": "function", "function": {"name": "weather", "arguments": "{oops"}},
        {"id": "c", "type": "function"},
        "garbage",
    ]
    msgs, res = tool_messages(star_tools, calls, seed=3)
    assert [m["role"] for m in msgs] == ["tool"] * 4
    assert [m["tool_call_id"] for m in msgs] == ["a", "b", "c", "call_3"]
    assert [r.ok for r in res] == [True, False, False, False]
    assert msgs[0]["content"] == star_tools.execute("weather", '{"Day": "Monday"}', seed=3).content
    assert tool_messages(star_tools, None) == ([], [])


def test_run_tool_loop_with_a_scripted_model(star_tools):
    seen = []

    def complete(messages, tools):
        seen.append((len(messages), [t["function"]["name"] for t in tools]))
        if messages[-1]["role"] != "tool":
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "x1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"Day": "Friday"}'},
                    }
                ],
            }
        return {
            "role": "assistant",
            "content": "It is " + json.loads(messages[-1]["content"])["rows"][0]["Weather"],
        }

    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "weather on Friday?"}]
    msg, results = run_tool_loop(complete, messages, star_tools, "weather", seed=1)
    expect = json.loads(star_tools.execute("weather", {"Day": "Friday"}, seed=1).content)["rows"][0][
        "Weather"
    ]
    assert msg["content"] == f"It is {expect}"
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool"]
    assert messages[2]["content"] is None and messages[3]["tool_call_id"] == "x1"
    assert seen == [(2, ["weather"]), (4, ["weather"])] and len(results) == 1


def test_run_tool_loop_stops_a_model_that_only_calls_tools(star_tools):
    offered = []

    def complete(messages, tools):
        offered.append(len(tools))
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
            ],
        }

    msg, results = run_tool_loop(
        complete, [{"role": "user", "content": "hi"}], star_tools, "weather", max_rounds=2
    )
    assert offered == [1, 1, 0]  # the last request offers no tool
    assert len(results) == 2 and not any(r.ok for r in results) and msg.get("tool_calls")


def test_bad_max_rows(star_dir):
    with pytest.raises(ValueError, match="max_rows"):
        KBExecutor(str(star_dir), ["weather"], max_rows=0)
