"""Parse an LLM's answer to "which system turn first deviates?" (SPEC section 8).

:func:`parse_turn_answer` returns a :class:`ParsedAnswer` with ``status``:

* ``"turn"``: a turn number was found (``"3"``, ``"Turn 3"``, ``"System turn 3"``,
  ``"the 3rd assistant turn"``, ``"turn three"``, ``"the third turn"``, ``"**Answer:** 3"``);
* ``"none"``: an explicit no-deviation answer (``"none"``, ``"no deviation"``,
  ``"The dialogue follows the workflow"``, ``"null"``, ``"N/A"``);
* ``"unparsable"``: anything else (junk, an empty reply, reasoning cut off before an answer).

Reasoning blocks (``<think>...</think>``) are dropped; when the reply contains ``Answer:`` only
the text after its last occurrence is read. A turn reference wins over a no-deviation phrase
("no deviation before turn 4" -> 4). Range checking against ``T`` is the caller's job
(:func:`check_range`), since only the caller knows the dialogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_UNIT_ORD = [
    "zeroth",
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60}
_TENS_ORD = {"twentieth": 20, "thirtieth": 30, "fortieth": 40, "fiftieth": 50, "sixtieth": 60}


def _number_words() -> dict[str, int]:
    words: dict[str, int] = {}
    for i, w in enumerate(_UNITS):
        words[w] = i
    for i, w in enumerate(_UNIT_ORD):
        words[w] = i
    for tw, tv in _TENS.items():
        words[tw] = tv
        for i in range(1, 10):
            for sep in ("-", " "):
                words[f"{tw}{sep}{_UNITS[i]}"] = tv + i
                words[f"{tw}{sep}{_UNIT_ORD[i]}"] = tv + i
    words.update(_TENS_ORD)
    return words


NUMBER_WORDS: dict[str, int] = _number_words()
_WORD_ALT = "|".join(sorted((re.escape(w) for w in NUMBER_WORDS), key=len, reverse=True))
_NUM = rf"(\d+|{_WORD_ALT})"
_SPEAKER = r"(?:system|assistant|agent|bot|wizard|ai)"

# ordered: the first pattern that matches decides
_TURN_PATTERNS: list[re.Pattern[str]] = [
    # "system turn 3", "assistant turn #3", "turn no. 3", "turn number three", "turn 3"
    re.compile(rf"\b(?:{_SPEAKER}\s+)?turn\s*(?:#|no\.?\s*|number\s+|index\s+)?{_NUM}\b"),
    # "the 3rd assistant turn", "the third system turn", "3rd turn"
    re.compile(rf"\b(\d+)(?:st|nd|rd|th)\s+(?:{_SPEAKER}\s+)?(?:turn|response|reply|message|utterance)\b"),
    re.compile(rf"\b({_WORD_ALT})\s+(?:{_SPEAKER}\s+)?(?:turn|response|reply|message|utterance)\b"),
    # "[3]", "(3)", "assistant 3", "#3"
    re.compile(rf"\b{_SPEAKER}\s*(?:\[|\(|#)?\s*(\d+)\b"),
    re.compile(r"#\s*(\d+)\b"),
    # a bare number as the whole answer or at its start: "3", "3.", "3 - the assistant ..."
    re.compile(r"^\W*(\d+)\b"),
]

_NONE_PATTERNS: list[re.Pattern[str]] = [
    re.compile(p)
    for p in (
        r"^\W*(?:none|null|nil|n/?a|no|nothing|-)\W*$",
        r"\bnone\b",
        r"\bno\s+(?:deviation|deviations|derailment|hallucination|turn|such turn|divergence)\b",
        r"\b(?:does|did|do)\s*(?:not|n't)\s+(?:deviate|diverge|depart|go off)",
        r"\bnever\s+(?:deviates|deviated|diverges|departs)\b",
        r"\bfollows?\s+(?:the\s+|its\s+)?(?:intended\s+|given\s+|prescribed\s+)?(?:workflow|procedure|steps|process)\b",
        r"\b(?:is|remains|stays|was)\s+(?:fully\s+|entirely\s+)?(?:conformant|compliant|on[- ]track|on[- ]workflow)\b",
        r"\bnot\s+deviat",
    )
]

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"\b(?:final\s+)?answer\s*[:=]", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedAnswer:
    """One LLM reply, parsed.

    Args:
        value: The system turn number found (``status="turn"``), else None.
        status: ``"turn"``, ``"none"``, ``"unparsable"``, ``"out_of_range"`` (set by
            :func:`check_range`) or ``"too_long"`` (set by the LLM detector: the prompt did not
            fit the model).
        raw: The reply as received.
    """

    value: int | None
    status: str  # "turn" | "none" | "unparsable" | "out_of_range" (check_range) | "too_long" (LLMDetector)
    raw: str


def _to_int(tok: str) -> int:
    return int(tok) if tok.isdigit() else NUMBER_WORDS[tok]


def parse_turn_answer(text: str | None) -> ParsedAnswer:
    """Parse one LLM reply (see the module doc).

    Args:
        text: The reply; None is read as an empty reply.

    Returns:
        A :class:`ParsedAnswer` with status ``"turn"`` (``value`` the number, not range-checked),
        ``"none"`` or ``"unparsable"`` (``value`` None), and ``raw`` the reply.
    """
    raw = "" if text is None else str(text)
    s = _THINK.sub(" ", raw)
    if "</think>" in s.lower():  # an opening tag eaten by the chat template: keep what follows
        s = s[s.lower().rindex("</think>") + len("</think>") :]
    elif "<think>" in s.lower():  # reasoning cut off before the answer
        return ParsedAnswer(None, "unparsable", raw)
    m = list(_ANSWER.finditer(s))
    if m:
        s = s[m[-1].end() :]
    s = s.replace("*", " ").replace("`", " ").replace("_", " ").strip().lower()
    s = re.sub(r"\s+", " ", s)
    if not s:
        return ParsedAnswer(None, "unparsable", raw)
    for pat in _TURN_PATTERNS:
        hit = pat.search(s)
        if hit:
            return ParsedAnswer(_to_int(hit.group(1)), "turn", raw)
    for pat in _NONE_PATTERNS:
        if pat.search(s):
            return ParsedAnswer(None, "none", raw)
    return ParsedAnswer(None, "unparsable", raw)


def check_range(parsed: ParsedAnswer, T: int) -> ParsedAnswer:
    """A parsed turn outside ``1..T`` becomes ``status="out_of_range"`` with value ``None``.

    Args:
        parsed: A :func:`parse_turn_answer` result.
        T: The dialogue's number of system turns.

    Returns:
        ``parsed`` itself, or the out-of-range answer (same ``raw``).
    """
    if parsed.status == "turn" and not 1 <= int(parsed.value) <= T:
        return ParsedAnswer(None, "out_of_range", parsed.raw)
    return parsed
