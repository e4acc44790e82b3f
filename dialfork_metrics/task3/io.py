"""Task 3 data access and prediction files.

* :func:`load_examples`: the ``task3`` train/test split (or the blind set) of a corpus given as a
  Hub dataset id, a Hub-layout folder (``dialfork_dataset.export_hub_layout``) or a generator
  output folder (JSONL records + ``manifest.json``; split per SPEC section 4);
* :func:`load_gold_rows`: gold rows for scoring, from a gold folder / ``task3_gold.jsonl`` (blind
  ids) or from the labelled ``task3`` test split of a corpus;
* :func:`read_predictions` / :func:`write_predictions`: JSON Lines ``{"dialogue_id", "prediction"}``,
  read with every malformed line reported by line number, written atomically.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from dialfork_dataset.errors import CollectedErrors
from dialfork_dataset.jsonl import json_error_text

from .scorer import PredictionError

GOLD_FIELDS = ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")


def load_examples(data: str | os.PathLike, split: str = "test") -> list[dict[str, Any]]:
    """Task 3 examples of one split of a corpus.

    Args:
        data: A Hub-layout folder (``dialfork_dataset.export_hub_layout``), a generator output
            folder, or a Hub dataset id such as ``idiap/dialfork``.
        split: ``"train"`` (conformant dialogues), ``"test"`` (conformant + forks, labelled) or
            ``"blind"`` (the leaderboard's unlabelled set).

    Returns:
        One dict per dialogue: ``dialogue_id, turns, num_system_turns, hallucination_type,
        fork_position, fork_turn, task``; for ``"blind"`` only ``dialogue_id, turns, num_system_turns``.

    Raises:
        ValueError: An unknown split, ``data`` is not a corpus (a gold folder, say; see
            :func:`dialfork_dataset.hub.resolve_data`), or the data cannot be loaded (the message
            says what was being loaded).
        FileNotFoundError: No such folder, and ``data`` is no loadable Hub id either.
    """
    from dialfork_dataset.hub import load_blind, load_split, resolve_data
    from dialfork_dataset.views import task3_examples

    if split == "blind":
        src = resolve_data(data, accept=("layout", "hub"))  # a generator output folder has no blind set
        try:
            rows = (
                load_blind(src.path) if src.is_local else list(load_split(src.value, "blind", split="test"))
            )
        except (ValueError, FileNotFoundError):
            raise
        except Exception as e:  # datasets/hub errors: say what was being loaded
            raise ValueError(f"cannot load the blind set from {str(data)!r}: {type(e).__name__}: {e}") from e
        return [
            {"dialogue_id": r["dialogue_id"], "turns": r["turns"], "num_system_turns": r["num_system_turns"]}
            for r in rows
        ]
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train', 'test' or 'blind', got {split!r}")
    src = resolve_data(
        data
    )  # no such folder, a gold folder...: one clear message (dialfork_dataset.hub.resolve)
    try:
        ds = load_split(src.path if src.is_local else src.value, "task3", split=split)
    except ValueError as e:
        if "corresponds to no data" not in str(e):
            raise
        raise ValueError(
            f"{data}: its task3 {split!r} split is empty: a corpus is split by source dialogue (SPEC "
            "section 4), and this one has too few sources for both splits. To predict dialogues of "
            "your own, give them as one JSONL file (task3 predict --data FILE.jsonl: every dialogue "
            "predicted, none fitted on) and the fit data with --fit-data CORPUS; else generate more "
            "scenarios (python -m generation --per-task N)"
        ) from None
    except FileNotFoundError:
        raise
    except Exception as e:  # datasets/hub errors (offline, unknown id...): say what was being loaded
        raise ValueError(
            f"cannot load the task3 {split!r} split from {str(data)!r}: {type(e).__name__}: {e}"
        ) from e
    return task3_examples(ds)


def load_gold_rows(
    gold: str | os.PathLike | None = None, data: str | os.PathLike | None = None, subset: str = "all"
) -> list[dict[str, Any]]:
    """Gold rows ``{dialogue_id, num_system_turns, hallucination_type, fork_turn}``.

    Args:
        gold: A gold folder (``task3_gold.jsonl`` inside) or that file (blind ids).
        data: Else the corpus whose labelled ``task3`` test split is the gold.
        subset: ``"all"``, or ``"public"``/``"private"`` to keep one part of a blind gold file.

    Returns:
        The gold rows, in file order.

    Raises:
        FileNotFoundError: The gold file does not exist.
        ValueError: Neither ``gold`` nor ``data`` is given, an unknown ``subset``, or ``subset``
            used with ``data``.
    """
    from dialfork_dataset.jsonl import read_jsonl

    if gold is not None:
        g = Path(gold)
        f = g / "task3_gold.jsonl" if g.is_dir() else g
        if not f.is_file():
            raise FileNotFoundError(
                f"{f}: no such gold file (expected task3_gold.jsonl from export_hub_layout)"
            )
        rows = read_jsonl(f, collect=True)
        if subset != "all":
            if subset not in ("public", "private"):
                raise ValueError(f"subset must be 'all', 'public' or 'private', got {subset!r}")
            rows = [r for r in rows if r.get("subset") == subset]
        return [{k: r.get(k) for k in GOLD_FIELDS} for r in rows]
    if data is None:
        raise ValueError("give the gold labels: --gold (gold folder or task3_gold.jsonl) or --data (corpus)")
    if subset != "all":
        raise ValueError("subset applies to a blind gold file (--gold), not to the labelled test split")
    return [{k: r.get(k) for k in GOLD_FIELDS} for r in load_examples(data, "test")]


def read_predictions(
    path: str | os.PathLike,
    gold: Sequence[Mapping[str, Any]] | None = None,
    ignore: Iterable[str] = (),
) -> list[dict[str, Any]]:
    """Rows of a prediction file (JSON Lines ``{"dialogue_id", "prediction"}``).

    Args:
        path: The prediction file.
        gold: The gold rows (``dialogue_id``, ``num_system_turns``) to check the file against in the
            same pass: unknown ids and turns outside ``1..T`` at their ``path:line``, and the gold
            dialogues the file has no line for. None: the file's own checks only.
        ignore: Ids whose lines are dropped without a word (another part of a blind gold file).

    Returns:
        The rows, in file order.

    Raises:
        PredictionError: Lists every problem at once (``path:line: reason``), malformed lines first:
            bad JSON (the column on that line) or UTF-8, not an object, missing/extra fields,
            non-string id, a value that is not an integer or null, duplicate ids (both lines
            named), and with ``gold`` the checks above.
    """
    from .rows import check_prediction, is_int
    from .scorer import collect_prediction_rows

    path = Path(path)
    skip = set(ignore)
    objs: list[Any] = []
    locations: list[str] = []
    errors: list[str] = []
    for lineno, obj, problem in json_lines(path):
        if problem is not None:
            errors.append(problem)
        elif not (isinstance(obj, Mapping) and obj.get("dialogue_id") in skip):
            objs.append(obj)
            locations.append(f"{path}:{lineno}")
    preds, row_errors = collect_prediction_rows(objs, locations)
    errors += row_errors
    if gold is not None:
        errors += _gold_problems(path, preds, objs, locations, gold, check_prediction, is_int)
    if errors:
        raise PredictionError(_malformed_first(errors))
    return [{"dialogue_id": d, "prediction": int(v) if v is not None else None} for d, v in preds.items()]


def _gold_problems(path, preds, objs, locations, gold, check_prediction, is_int) -> list[str]:
    """The problems of valid-looking prediction rows against the gold, each at its ``path:line``."""
    first: dict[str, str] = {}
    for o, loc in zip(objs, locations):
        if isinstance(o, Mapping):
            first.setdefault(o.get("dialogue_id"), loc)
    T = {g["dialogue_id"]: g.get("num_system_turns") for g in gold}
    out = []
    for d, v in preds.items():
        if d not in T:
            out.append(
                f"{first[d]}: unknown dialogue_id {d!r} (not in the gold set); predict the gold's dialogues only"
            )
        elif is_int(v):
            problem = check_prediction(v, T[d] if is_int(T[d]) else None)
            if problem is not None:
                out.append(f"{first[d]}: dialogue {d!r}: {problem[1]}")
    missing = [d for d in T if d not in preds]
    if missing:
        shown = ", ".join(repr(d) for d in missing[:5]) + (", ..." if len(missing) > 5 else "")
        out.append(
            f"{path}: no line for {len(missing)} of the {len(T)} gold dialogue(s) ({shown}); give one line "
            "per dialogue, with \"prediction\": null for 'no deviation'"
        )
    return out


def write_predictions(path: str | os.PathLike, rows: Iterable[Mapping[str, Any]]) -> int:
    """Atomically write ``{"dialogue_id", "prediction"}`` rows as JSON Lines.

    Args:
        path: The output file (written through a temporary file and a rename).
        rows: Mappings with ``dialogue_id`` and ``prediction`` (an int or ``None``); other keys are
            dropped.

    Returns:
        The number of rows written.
    """
    from dialfork_dataset.jsonl import write_jsonl

    return write_jsonl(path, ({"dialogue_id": r["dialogue_id"], "prediction": r["prediction"]} for r in rows))


class TranscriptError(CollectedErrors):
    """A transcript file (``task3 predict --data FILE.jsonl``) with problems; ``errors`` lists every
    one as ``path:line: what: how to fix``.

    Args:
        message: The exception's text (the first problems and how many there are).
        errors: Every problem, one line each.
    """


def json_lines(path: str | os.PathLike) -> Iterator[tuple[int, Any, str | None]]:
    """``(line_number, object, problem)`` for every non-blank line of a JSON Lines file (``.gz`` read as
    gzip). ``problem`` is None for a good line, else ``"path:line: ..."`` (the object is then None).

    The line's end (``\\n``, ``\\r\\n``) is cut before decoding, so a column number is the column on
    that line (a line cut after ``{"turns": [`` is "column 12", not "column 1" of a next line); a
    UTF-8 byte-order mark at the start of the file, as some editors write, is skipped.

    Args:
        path: The file.

    Yields:
        tuple[int, Any, str | None]: 1-based line number, the parsed value, the problem.

    Raises:
        FileNotFoundError: No such file.
    """
    import gzip
    import json

    from .rows import _parse_int

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such file")
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            raw = raw.rstrip(b"\r\n")
            if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield (
                    lineno,
                    None,
                    f"{p}:{lineno}: not valid UTF-8 (byte {e.start + 1} of the line); save the file as UTF-8",
                )
                continue
            try:
                yield lineno, json.loads(text, parse_int=_parse_int), None
            except json.JSONDecodeError as e:
                yield (
                    lineno,
                    None,
                    f"{p}:{lineno}: malformed JSON ({json_error_text(e)}); one JSON object per line",
                )
            except RecursionError:
                yield lineno, None, f"{p}:{lineno}: malformed JSON (nested too deeply to parse)"


def _malformed_first(errors: list[str]) -> list[str]:
    """Lines that could not be read at all first (they hide whatever they held), then the rest in order."""
    bad = [e for e in errors if "malformed JSON" in e or "not valid UTF-8" in e]
    return bad + [e for e in errors if e not in bad]


def read_transcripts(path: str | os.PathLike) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Your own dialogues for Task 3 (``task3 predict --data FILE.jsonl``), one JSON object per line.

    Each line needs ``dialogue_id`` (a unique string) and ``turns`` (a list of ``{"speaker": "user" |
    "system", "text"}`` objects, or of strings alternating from the user), with at least one system
    turn; ``task`` (the workflow's task name) is optional. Any other field (a generator record's
    ``seed``, ``source_id``, labels...) is allowed and ignored: the file is never split, every
    dialogue in it is predicted.

    Args:
        path: The JSON Lines file (``.gz`` read as gzip).

    Returns:
        ``(examples, where)``: one dict per dialogue, in file order (``dialogue_id``, ``turns``,
        ``num_system_turns``, ``task``; ``hallucination_type`` and ``fork_turn`` when the line has
        them), and ``{dialogue_id: "path:line"}``.

    Raises:
        FileNotFoundError: No such file.
        TranscriptError: Every problem of the file at once (malformed lines first), each as
            ``path:line: what: how to fix``; a repeated ``dialogue_id`` names both lines.
    """
    from dialfork_dataset.turns import as_turns

    p = Path(path)
    examples: list[dict[str, Any]] = []
    where: dict[str, str] = {}
    errors: list[str] = []
    for lineno, obj, problem in json_lines(p):
        loc = f"{p}:{lineno}"
        if problem is not None:
            errors.append(problem)
            continue
        if not isinstance(obj, dict):
            errors.append(
                f"{loc}: expected a JSON object {{dialogue_id, turns, task}}, got {type(obj).__name__}"
            )
            continue
        did = obj.get("dialogue_id")
        if not isinstance(did, str) or not did.strip():
            errors.append(f"{loc}: dialogue_id: missing or not a non-empty string; give each dialogue an id")
            continue
        if did in where:
            errors.append(
                f"{loc}: duplicate dialogue_id {did!r} (first at {where[did]}); give each dialogue its own id"
            )
            continue
        where[did] = loc
        task = obj.get("task")
        if task is not None and (not isinstance(task, str) or not task.strip()):
            errors.append(
                f"{loc}: dialogue {did!r}: task must be a task name (a string) or left out, got {task!r}"
            )
            continue
        if "turns" not in obj:
            errors.append(
                f"{loc}: dialogue {did!r}: turns: missing; give the list of {{speaker, text}} turns"
            )
            continue
        try:
            turns = as_turns(obj["turns"], where=f"dialogue {did!r}")
        except ValueError as e:
            errors.append(f"{loc}: {e}")
            continue
        T = sum(t["speaker"] == "system" for t in turns)
        if T == 0:
            errors.append(
                f"{loc}: dialogue {did!r} has no system turn: Task 3 predicts the first deviating system "
                "turn (speaker 'system')"
            )
            continue
        ex = {"dialogue_id": did, "turns": turns, "num_system_turns": T, "task": task}
        for k in ("hallucination_type", "fork_turn"):
            if k in obj:
                ex[k] = obj[k]
        examples.append(ex)
    if errors:
        raise TranscriptError.from_errors(_malformed_first(errors), str(p))
    if not examples:
        raise TranscriptError(f"{p}: no dialogues (the file is empty); one JSON object per line")
    return examples, where
