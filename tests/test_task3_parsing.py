"""Robust parsing of LLM answers for Task 3."""

from __future__ import annotations

import pytest

from dialfork_metrics.task3.llm.parsing import check_range, parse_turn_answer

CASES = [
    ("3", 3, "turn"),
    (" 3.", 3, "turn"),
    ("Turn 3", 3, "turn"),
    ("turn #12", 12, "turn"),
    ("System turn 3", 3, "turn"),
    ("Assistant turn 4", 4, "turn"),
    ("the 3rd assistant turn", 3, "turn"),
    ("The 2nd turn.", 2, "turn"),
    ("the third assistant turn", 3, "turn"),
    ("turn three", 3, "turn"),
    ("turn twenty-one", 21, "turn"),
    ("**Answer:** 5", 5, "turn"),
    ("I think the assistant derails.\nAnswer: 7", 7, "turn"),
    ("<think>maybe turn 2? no, wait</think>Turn 6", 6, "turn"),
    ("reasoning ... </think> 4", 4, "turn"),
    ("Assistant [turn 9]", 9, "turn"),
    ("No deviation before turn 4; it deviates at turn 4.", 4, "turn"),
    ("none", None, "none"),
    ("NONE", None, "none"),
    ("None.", None, "none"),
    ("no deviation", None, "none"),
    ("No deviation occurs.", None, "none"),
    ("The dialogue follows the workflow", None, "none"),
    ("The assistant does not deviate from the workflow.", None, "none"),
    ("N/A", None, "none"),
    ("null", None, "none"),
    ("Answer: none", None, "none"),
    ("", None, "unparsable"),
    ("lorem ipsum dolor", None, "unparsable"),
    ("<think>still thinking about turn 3 and", None, "unparsable"),
    ("!!!", None, "unparsable"),
]


@pytest.mark.parametrize("text,value,status", CASES)
def test_parse(text, value, status):
    p = parse_turn_answer(text)
    assert (p.value, p.status) == (value, status)
    assert p.raw == text


def test_check_range():
    assert check_range(parse_turn_answer("Turn 9"), 6).status == "out_of_range"
    assert check_range(parse_turn_answer("Turn 9"), 6).value is None
    assert check_range(parse_turn_answer("0"), 6).status == "out_of_range"
    assert check_range(parse_turn_answer("6"), 6).value == 6
    assert check_range(parse_turn_answer("none"), 6).status == "none"
    assert parse_turn_answer(None).status == "unparsable"
