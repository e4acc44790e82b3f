"""What every part of the STAR reader shares: constants, :class:`StarError`, reading a JSON file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import CollectedErrors

STAR_COMMIT = "3058975092cdd09798e4a3a9e4ae135755824545"
DEFAULT_STAR_URL = f"https://github.com/RasaHQ/STAR/archive/{STAR_COMMIT}.zip"
STAR_ENV = "DIALFORK_STAR_DIR"
START_NODE = "hello"

#: Query outcome families, with the query node each family prefers when several queries are open.
QUERY_OUTCOME_FAMILIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("available", "unavailable"), "query_check"),
    (("query_success", "query_failure"), "query_book"),
)
#: Answers of the user to a question of the system, attached in this order.
ANSWER_FAMILIES: tuple[tuple[str, ...], ...] = (
    ("correct", "incorrect", "noanswer"),
    ("yes", "no"),
    ("done",),
)
KNOWN_OUTCOMES = frozenset(n for fam, _ in QUERY_OUTCOME_FAMILIES for n in fam) | frozenset(
    n for fam in ANSWER_FAMILIES for n in fam
)
GLOBAL_RE = re.compile(r"(^|_)(anything_else|out_of_scope|nothing_found|bye|goodbye)(_|$)|goodbye|_bye$")
#: How many problems a :class:`StarError` message lists (``.errors`` holds all).
MAX_LISTED_ERRORS = 50


class StarError(CollectedErrors):
    """A STAR file is missing or wrong. ``errors`` lists every problem found (``file: problem``).

    Args:
        message: The exception's text.
        errors: Every problem, one ``file: problem`` line each; defaults to ``[message]``.
    """


def raise_collected(errors: list[str], what: str) -> None:
    """Raise one :class:`StarError` listing ``errors`` (found in ``what``); return when there are none.

    Args:
        errors: The problems, one ``file: problem`` line each.
        what: Where they were found, for the message.

    Raises:
        StarError: ``errors`` is not empty (the message lists at most :data:`MAX_LISTED_ERRORS`).
    """
    StarError.raise_if(errors, what, MAX_LISTED_ERRORS)


def read_json(path: Path, errors: list[str], what: str = "file") -> Any:
    """Parse ``path``; on failure append ``"path: problem"`` to ``errors`` and return None.

    Args:
        path: A JSON file.
        errors: The list that collects problems (missing, unreadable, malformed with line and
            column).
        what: What the file is, for the message (e.g. ``"API file"``).

    Returns:
        Any: The parsed JSON, or None when the file has a problem.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        errors.append(f"{path}: missing {what}")
        return None
    except (OSError, UnicodeDecodeError) as e:
        errors.append(f"{path}: unreadable {what} ({e})")
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        errors.append(f"{path}:{e.lineno}:{e.colno}: malformed JSON ({e.msg})")
        return None


def task_domain(task: str) -> str:
    """Domain of a STAR task: its name up to the first underscore (``ride_book`` -> ``ride``).

    Args:
        task: A STAR task name.

    Returns:
        str: The part before the first ``_`` (the whole name when it has none).
    """
    return task.split("_", 1)[0]


def is_star_dir(path: str | os.PathLike) -> bool:
    """True when ``path`` looks like a STAR copy (either layout): ``tasks/`` and ``apis/`` folders.

    Args:
        path: A folder (need not exist).

    Returns:
        bool: Whether ``path/tasks`` and ``path/apis`` are both folders (their contents are not
        checked).
    """
    p = Path(path)
    return (p / "tasks").is_dir() and (p / "apis").is_dir()
