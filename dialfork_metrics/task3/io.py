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
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

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
    except (ValueError, FileNotFoundError):
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


def read_predictions(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a prediction file (JSON Lines ``{"dialogue_id", "prediction"}``).

    Args:
        path: The prediction file.

    Returns:
        The rows, in file order.

    Raises:
        PredictionError: Lists every malformed line (``path:line: reason``): bad JSON or UTF-8, not
            an object, missing/extra fields, non-string id, a value that is not an integer or null,
            duplicate ids (checks shared with the scorer).
    """
    from dialfork_dataset.jsonl import JsonlError, iter_jsonl

    from .scorer import collect_prediction_rows

    path = Path(path)
    objs: list[Any] = []
    locations: list[str] = []
    errors: list[str] = []
    try:
        for lineno, obj in iter_jsonl(path, collect=True):
            objs.append(obj)
            locations.append(f"{path}:{lineno}")
    except JsonlError as e:
        errors.extend(e.errors)
    except UnicodeDecodeError as e:
        errors.append(f"{path}: not valid UTF-8 ({e.reason})")
    preds, row_errors = collect_prediction_rows(objs, locations)
    errors = sorted(errors + row_errors, key=_line_of)
    if errors:
        raise PredictionError(errors)
    return [{"dialogue_id": d, "prediction": int(v) if v is not None else None} for d, v in preds.items()]


def _line_of(message: str) -> int:
    """The line number of a ``path:line: reason`` message (0 when it names no line)."""
    head = message.split(": ", 1)[0]
    tail = head.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 0


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
