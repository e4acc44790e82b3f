"""Task 3 scoring (SPEC section 8): first deviating system turn.

Pure functions over plain Python values; no heavy imports, so the leaderboard can score a blind
submission of tens of thousands of dialogues in milliseconds.

Definitions (reconstructed from the paper's Table 4; the trivial baselines reproduce it):

* forked dialogues: flagged = prediction not null; ``cov_h`` = share flagged;
  ``mae_h`` = mean ``|pred - t_k|`` over flagged forks (also per hallucination type);
* conformant dialogues: ``cov_c`` = share flagged (false alarms); ``mae_c`` = mean
  ``|(T + 1) - pred|`` over flagged conformant dialogues (the dialogue end is ``T + 1``);
* references on the same gold set: ``mae_h_ref`` = MAE_h of always-last (each fork's own ``T``),
  ``mae_c_ref`` = MAE_c of always-first (= mean ``T`` of the conformant dialogues);
* ``a = (max(0, 1 - mae_h/mae_h_ref), max(0, 1 - mae_c/mae_c_ref), cov_h, 1 - cov_c)``,
  ``w = (0.35, 0.35, 0.15, 0.15)``, ``Score = 100 * exp(sum_i w_i log(max(a_i, 1e-12)))``;
  no flagged fork -> ``a_1 = 0``; no flagged conformant dialogue -> ``a_2 = 1``.

Units. Predictions, fork turns and the MAEs above are in **system turns** (the unit the Score is
computed in). The paper's Table 4 reports MAEs in **all turns** (user + system: its always-first
conformant MAE, 14.12, is about the conformant length of Table 5, 15.52 turns); when every gold row
carries its ``turns``, :func:`score_predictions` also returns ``all_turns``, the same MAEs and
references with each system turn placed at its position among all turns (1-based) and the
dialogue end at ``N + 1`` (N = number of turns). The Score is unit-free: it only uses MAE / MAE_ref
and the coverages, so the Score is reported once, from the system-turn MAEs.

Error messages never reveal gold labels (hallucination type, fork turn): they only use the
dialogue id and ``T`` (public: it is the number of system turns of the published transcript).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from dialfork_dataset import taxonomy
from dialfork_dataset.errors import MAX_ERRORS_IN_MESSAGE, CollectedErrors

from .rows import is_bool as _is_bool
from .rows import is_int as _is_int

#: Weights of the four components (paper: 0.35 per MAE component, 0.15 per coverage).
SCORE_WEIGHTS: tuple[float, float, float, float] = (0.35, 0.35, 0.15, 0.15)
#: Floor applied to each component before the log (SPEC section 8).
COMPONENT_FLOOR = 1e-12
#: Hallucination types in SPEC order (:mod:`dialfork_dataset.taxonomy`; the keys of ``mae_h_by_type``).


class PredictionError(CollectedErrors):
    """Invalid Task 3 predictions. ``errors`` lists every problem found (not just the first).

    Args:
        errors: One message per problem; the exception's message shows the first ones and
            says how many more there are.
    """

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        shown = self.errors[:MAX_ERRORS_IN_MESSAGE]
        more = len(self.errors) - len(shown)
        msg = f"{len(self.errors)} error(s) in the Task 3 predictions:\n  " + "\n  ".join(shown)
        if more:
            msg += f"\n  ... and {more} more (see the exception's .errors)"
        super().__init__(msg, self.errors)


def _describe_value(v: Any) -> str:
    if _is_bool(v):
        return f"a boolean ({v!r})"
    if isinstance(v, float):
        return f"a float ({v!r})"
    if isinstance(v, str):
        return f"a string ({v[:40]!r})"
    return f"a {type(v).__name__}"


def _gold_index(gold: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """``{dialogue_id: gold row}``, after checking the gold set itself (a ``ValueError``, not a
    :class:`PredictionError`: a bad gold set is the organiser's problem, not the submitter's)."""
    if isinstance(gold, Mapping) or isinstance(gold, str) or not isinstance(gold, Sequence):
        raise ValueError(f"gold must be a list of rows, got {type(gold).__name__}")
    out: dict[str, Mapping[str, Any]] = {}
    errs: list[str] = []
    for i, g in enumerate(gold):
        if not isinstance(g, Mapping):
            errs.append(f"gold row {i}: not a mapping")
            continue
        did = g.get("dialogue_id")
        T = g.get("num_system_turns")
        h = g.get("hallucination_type")
        tk = g.get("fork_turn")
        if not isinstance(did, str) or not did:
            errs.append(f"gold row {i}: dialogue_id must be a non-empty string")
            continue
        if did in out:
            errs.append(f"gold row {i}: duplicate dialogue_id {did!r}")
            continue
        if not _is_int(T) or T < 1:
            errs.append(f"gold row {i} ({did!r}): num_system_turns must be a positive integer")
        if h is None:
            if tk is not None:
                errs.append(f"gold row {i} ({did!r}): a conformant dialogue has no fork_turn")
        else:
            if h not in taxonomy.names():
                errs.append(f"gold row {i} ({did!r}): unknown hallucination_type")
            if not _is_int(tk) or tk < 1 or (_is_int(T) and tk > T):
                errs.append(f"gold row {i} ({did!r}): fork_turn must be an integer in 1..T")
        out[did] = g
    if errs:
        raise CollectedErrors(
            f"invalid gold set ({len(errs)} error(s)):\n  " + "\n  ".join(errs[:MAX_ERRORS_IN_MESSAGE]), errs
        )
    return out


def _collect(predictions: Any, errors: list[str], locations: Sequence[str] | None = None) -> dict[str, Any]:
    """Normalise predictions to ``{dialogue_id: value}``, recording shape errors.

    ``locations``: one label per row for the messages (e.g. ``path:line``); default ``row i``."""
    if isinstance(predictions, Mapping):
        out: dict[str, Any] = {}
        for k, v in predictions.items():
            if not isinstance(k, str):
                errors.append(f"prediction key {k!r}: dialogue ids must be strings")
                continue
            out[k] = v
        return out
    if isinstance(predictions, str | bytes) or not isinstance(predictions, Sequence):
        errors.append(
            "predictions must be a mapping {dialogue_id: turn or None} or a list of "
            f"{{'dialogue_id', 'prediction'}} rows, got {type(predictions).__name__}"
        )
        return {}
    out = {}
    first_row: dict[str, str] = {}
    for i, row in enumerate(predictions):
        where = locations[i] if locations is not None else f"row {i + 1}"
        if not isinstance(row, Mapping):
            errors.append(
                f"{where}: expected an object {{'dialogue_id', 'prediction'}}, got {type(row).__name__}"
            )
            continue
        did = row.get("dialogue_id")
        if not isinstance(did, str) or not did:
            errors.append(f"{where}: 'dialogue_id' must be a non-empty string, got {_describe_value(did)}")
            continue
        if "prediction" not in row:
            errors.append(f"{where}: dialogue {did!r} has no 'prediction' field (use null for no deviation)")
            continue
        extra = set(row) - {"dialogue_id", "prediction"}
        if extra:
            errors.append(
                f"{where}: dialogue {did!r}: unknown field(s) {sorted(extra)} (only 'dialogue_id', 'prediction')"
            )
        if did in first_row:
            errors.append(f"{where}: duplicate dialogue_id {did!r} (first given at {first_row[did]})")
            continue
        first_row[did] = where
        out[did] = row["prediction"]
    return out


def collect_prediction_rows(
    rows: Sequence[Any],
    locations: Sequence[str] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """``({dialogue_id: prediction}, errors)`` of prediction rows, before any gold is known: the
    shape checks of :func:`score_predictions` plus the value type (an integer or null).

    Args:
        rows: Prediction rows ``{"dialogue_id", "prediction"}``.
        locations: Names each row in errors (e.g. ``"file.jsonl:3"``); None: ``"row i"``.

    Returns:
        ``(predictions, errors)``: the first prediction of each dialogue id, and one message per
        problem (empty when all rows are valid).
    """
    errors: list[str] = []
    preds = _collect(rows, errors, locations)
    where: dict[Any, str] = {}
    for i, r in enumerate(rows):
        if isinstance(r, Mapping):  # the first row of an id is the one kept
            where.setdefault(r.get("dialogue_id"), locations[i] if locations is not None else f"row {i + 1}")
    for did, v in preds.items():
        if v is not None and not _is_int(v):
            errors.append(
                f"{where[did]}: prediction for {did!r} must be an integer system turn or null, "
                f"got {_describe_value(v)}"
            )
    return preds, errors


def _check_values(
    preds: Mapping[str, Any], gold_by_id: Mapping[str, Mapping[str, Any]], errors: list[str]
) -> None:
    unknown = [d for d in preds if d not in gold_by_id]
    for d in unknown:
        errors.append(f"unknown dialogue_id {d!r} (not in the gold set)")
    missing = [d for d in gold_by_id if d not in preds]
    for d in missing:
        errors.append(f"missing prediction for dialogue {d!r} (give null for 'no deviation')")
    for d, v in preds.items():
        g = gold_by_id.get(d)
        if g is None or v is None:
            continue
        if not _is_int(v):
            errors.append(
                f"prediction for dialogue {d!r} must be an integer system turn index or null, got {_describe_value(v)}"
            )
            continue
        T = g["num_system_turns"]
        if not 1 <= v <= T:
            errors.append(f"prediction {v} outside 1..T (T={T}) for dialogue {d!r}")


def validate_predictions(predictions: Any, gold: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every problem with ``predictions`` against ``gold`` (empty list when valid).

    Checks: the container shape, unknown ids, missing ids, duplicate ids (list of rows), values
    that are not an integer (``int`` or a numpy integer) or ``None`` (bools, floats and numeric
    strings are errors) and indices outside ``1..T``.

    Args:
        predictions: A mapping ``{dialogue_id: turn or None}`` or a list of
            ``{"dialogue_id", "prediction"}`` rows.
        gold: Rows with ``dialogue_id`` and ``num_system_turns`` (only public fields are read).

    Returns:
        One message per problem, naming the id (and line or index); empty when valid.
    """
    gold_by_id = _gold_index(gold)
    errors: list[str] = []
    preds = _collect(predictions, errors)
    _check_values(preds, gold_by_id, errors)
    return errors


def _component(mae: float | None, ref: float | None, none_value: float) -> float | None:
    if ref is None:
        return None
    if mae is None:
        return none_value
    if ref <= 0:  # degenerate reference (every fork at its last turn): exact -> 1, else 0
        return 1.0 if mae == 0 else 0.0
    return max(0.0, 1.0 - mae / ref)


def score_from_components(a: Sequence[float], weights: Sequence[float] = SCORE_WEIGHTS) -> float:
    """``100 * exp(sum_i w_i * log(max(a_i, 1e-12)))`` (weighted geometric mean, in percent).

    Args:
        a: The components ``a1..a4`` (real numbers, not NaN, meant to lie in [0, 1]; each is
            floored at :data:`COMPONENT_FLOOR` before the log).
        weights: One weight per component (default :data:`SCORE_WEIGHTS`).

    Returns:
        The Score, 0 to 100 for components in [0, 1] and weights summing to 1.

    Raises:
        ValueError: ``a`` and ``weights`` differ in length, or a component is not a real number
            (bools and NaN rejected).
    """
    if len(a) != len(weights):
        raise ValueError(f"need {len(weights)} components, got {len(a)}")
    for i, x in enumerate(a, 1):
        if isinstance(x, bool) or not isinstance(x, numbers.Real) or math.isnan(x):
            raise ValueError(f"component a{i} must be a number in [0, 1], got {x!r}")
    return 100.0 * math.exp(sum(w * math.log(max(float(x), COMPONENT_FLOOR)) for w, x in zip(weights, a)))


def score_from_stats(
    mae_h: float | None,
    cov_h: float,
    mae_c: float | None,
    cov_c: float,
    mae_h_ref: float,
    mae_c_ref: float,
    weights: Sequence[float] = SCORE_WEIGHTS,
) -> float:
    """The Score from summary statistics (coverages as fractions in [0, 1]).

    Args:
        mae_h: MAE on flagged forks, in system turns; ``None`` when no fork is flagged (``a_1 = 0``).
        cov_h: Share of forks flagged.
        mae_c: MAE on flagged conformant dialogues; ``None`` when none is flagged (``a_2 = 1``).
        cov_c: Share of conformant dialogues flagged.
        mae_h_ref: Reference MAE on forks (the random baseline's expectation).
        mae_c_ref: Reference MAE on conformant dialogues.
        weights: The four weights of ``a1..a4``.

    Returns:
        The Score (0 to 100).

    Raises:
        ValueError: A coverage is not a fraction in [0, 1], an MAE is negative, NaN or not a
            number (None allowed for ``mae_h``/``mae_c``), a reference is negative, NaN or not a
            number, or as :func:`score_from_components`.

    Example:
        >>> round(score_from_stats(6.60, 1.0, 7.50, 1.0, 12.52, 14.12), 2)  # Table 4, Random
        0.94
    """
    for name, v in (("cov_h", cov_h), ("cov_c", cov_c)):
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be a fraction in [0, 1] (not a percentage), got {v!r}")
    for name, v in (("mae_h", mae_h), ("mae_c", mae_c)):
        if v is not None and (
            isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or math.isnan(v)
        ):
            raise ValueError(f"{name} must be a non-negative number or None, got {v!r}")
    for name, v in (("mae_h_ref", mae_h_ref), ("mae_c_ref", mae_c_ref)):
        if isinstance(v, bool) or not isinstance(v, int | float) or v < 0 or math.isnan(v):
            raise ValueError(f"{name} must be a non-negative number, got {v!r}")
    a1 = _component(mae_h, mae_h_ref, 0.0)
    a2 = _component(mae_c, mae_c_ref, 1.0)
    return score_from_components((a1, a2, float(cov_h), 1.0 - float(cov_c)), weights)


def _mean(xs: list[int]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def score_predictions(
    predictions: Mapping[str, int | None] | Sequence[Mapping[str, Any]],
    gold: Sequence[Mapping[str, Any]],
    weights: Sequence[float] = SCORE_WEIGHTS,
) -> dict[str, Any]:
    """Score Task 3 predictions against ``gold`` (SPEC section 8).

    Args:
        predictions: ``{dialogue_id: system turn index or None}`` or a list of
            ``{"dialogue_id", "prediction"}`` rows; ``None`` means "no deviation".
        gold: Rows with ``dialogue_id``, ``num_system_turns``, ``hallucination_type`` (None for
            conformant) and ``fork_turn``.
        weights: The four weights of the Score's components ``a1..a4`` (default: SPEC 8's).

    Returns:
        A dict with ``score``, ``components`` (``a1``..``a4``), ``weights``, ``mae_h``,
        ``mae_h_by_type``, ``cov_h``, ``cov_h_by_type``, ``mae_c``, ``cov_c``, ``mae_h_ref``,
        ``mae_c_ref`` and ``counts``, all MAEs in system turns; when every gold row has its
        ``turns``, also ``all_turns``: the MAEs and references in all turns (``mae_all_turns``). MAEs
        over no flagged dialogue are ``None``; when the gold set has no forked (or no conformant)
        dialogue the references, the components that need them and the score are ``None``.
        Coverages are fractions in [0, 1].

    Raises:
        PredictionError: The predictions are invalid; its ``errors`` lists every problem (see
            ``validate_predictions``). Messages use ids and T only, never gold labels.
    """
    gold_by_id = _gold_index(gold)
    errors: list[str] = []
    preds = _collect(predictions, errors)
    _check_values(preds, gold_by_id, errors)
    if errors:
        raise PredictionError(errors)

    err_h: dict[str, list[int]] = {h: [] for h in taxonomy.names()}
    n_h: dict[str, int] = dict.fromkeys(taxonomy.names(), 0)
    ref_h: list[int] = []
    err_c: list[int] = []
    ref_c: list[int] = []
    for did, g in gold_by_id.items():
        p = preds[did]
        p = None if p is None else int(p)  # numpy integers -> int (JSON-serialisable results)
        T = int(g["num_system_turns"])
        h = g.get("hallucination_type")
        if h is None:
            ref_c.append(T)  # always-first: |(T + 1) - 1|
            if p is not None:
                err_c.append(T + 1 - p)
        else:
            tk = int(g["fork_turn"])
            n_h[h] += 1
            ref_h.append(T - tk)  # always-last: |T - t_k|
            if p is not None:
                err_h[h].append(abs(p - tk))

    all_err_h = [e for h in taxonomy.names() for e in err_h[h]]
    n_forked = sum(n_h.values())
    n_conf = len(ref_c)
    mae_h = _mean(all_err_h)
    mae_c = _mean(err_c)
    cov_h = len(all_err_h) / n_forked if n_forked else None
    cov_c = len(err_c) / n_conf if n_conf else None
    mae_h_ref = _mean(ref_h)
    mae_c_ref = _mean(ref_c)
    a1 = _component(mae_h, mae_h_ref, 0.0)
    a2 = _component(mae_c, mae_c_ref, 1.0)
    a3 = cov_h
    a4 = None if cov_c is None else 1.0 - cov_c
    all_turns = mae_all_turns(preds, gold_by_id)
    comps = (a1, a2, a3, a4)
    score = None if any(c is None for c in comps) else score_from_components(comps, weights)  # type: ignore[arg-type]
    return {
        "score": score,
        "components": {"a1": a1, "a2": a2, "a3": a3, "a4": a4},
        "weights": list(weights),
        "mae_h": mae_h,
        "mae_h_by_type": {h: _mean(err_h[h]) for h in taxonomy.names() if n_h[h]},
        "cov_h": cov_h,
        "cov_h_by_type": {h: len(err_h[h]) / n_h[h] for h in taxonomy.names() if n_h[h]},
        "mae_c": mae_c,
        "cov_c": cov_c,
        "mae_h_ref": mae_h_ref,
        "mae_c_ref": mae_c_ref,
        "counts": {
            "dialogues": len(gold_by_id),
            "forked": n_forked,
            "conformant": n_conf,
            "forked_flagged": len(all_err_h),
            "conformant_flagged": len(err_c),
            "forked_by_type": {h: n_h[h] for h in taxonomy.names() if n_h[h]},
        },
        **({"all_turns": all_turns} if all_turns is not None else {}),
    }


def system_turn_positions(turns: Sequence[Mapping[str, Any]]) -> list[int]:
    """1-based positions, among all turns, of the system turns of ``turns`` (in order).

    Args:
        turns: The dialogue's ``{"speaker", ...}`` turns.

    Returns:
        The positions, ascending.

    Example:
        >>> system_turn_positions([{"speaker": "user"}, {"speaker": "system"}, {"speaker": "user"},
        ...                        {"speaker": "system"}])
        [2, 4]
    """
    return [i for i, t in enumerate(turns, 1) if t.get("speaker") == "system"]


def mae_all_turns(
    predictions: Mapping[str, int | None],
    gold_by_id: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any] | None:
    """The MAEs and references of :func:`score_predictions` in all turns (user + system).

    A system turn ``s`` sits at position ``pos(s)`` among the ``N`` turns of its dialogue; the
    dialogue end is ``N + 1``. Forked: ``|pos(pred) - pos(t_k)|``, reference ``|pos(T) - pos(t_k)|``
    (always-last); conformant: ``N + 1 - pos(pred)``, reference ``N + 1 - pos(1)`` (always-first).

    Args:
        predictions: Valid predictions by dialogue id.
        gold_by_id: Gold rows by dialogue id, with ``turns`` and ``num_system_turns``.

    Returns:
        The all-turns MAEs and references, or ``None`` when a gold row has no ``turns`` or its
        turns do not hold ``num_system_turns`` system turns (the all-turns unit is then undefined).
    """
    err_h: dict[str, list[int]] = {h: [] for h in taxonomy.names()}
    present: set[str] = set()
    ref_h: list[int] = []
    err_c: list[int] = []
    ref_c: list[int] = []
    for did, g in gold_by_id.items():
        turns = g.get("turns")
        if not isinstance(turns, Sequence) or isinstance(turns, str):
            return None
        pos = system_turn_positions([t if isinstance(t, Mapping) else {} for t in turns])
        T = int(g["num_system_turns"])
        if len(pos) != T:
            return None
        p = predictions.get(did)
        end = len(turns) + 1
        h = g.get("hallucination_type")
        if h is None:
            ref_c.append(end - pos[0])
            if p is not None:
                err_c.append(end - pos[int(p) - 1])
        else:
            present.add(h)
            fk = pos[int(g["fork_turn"]) - 1]
            ref_h.append(abs(pos[T - 1] - fk))
            if p is not None:
                err_h[h].append(abs(pos[int(p) - 1] - fk))
    all_err_h = [e for h in taxonomy.names() for e in err_h[h]]
    return {
        "unit": "all turns",
        "mae_h": _mean(all_err_h),
        "mae_h_by_type": {h: _mean(err_h[h]) for h in taxonomy.names() if h in present},
        "mae_c": _mean(err_c),
        "mae_h_ref": _mean(ref_h),
        "mae_c_ref": _mean(ref_c),
    }


def format_table(result: Mapping[str, Any]) -> str:
    """A one-row text table in the layout of the paper's Table 4 (coverages in percent).

    Args:
        result: A :func:`score_predictions` result.

    Returns:
        Three lines: the header (MAE per type present, ``MAE_h``, ``cov_h%``, ``MAE_c``,
        ``cov_c%``, ``Score``), the values (``-`` for None) and a footer with the counts and
        the reference MAEs.
    """

    def f(v: float | None, pct: bool = False) -> str:
        if v is None:
            return "-"
        return f"{100 * v:.2f}" if pct else f"{v:.2f}"

    types = [h for h in taxonomy.names() if h in result["mae_h_by_type"]]
    head = [*(f"MAE_{h}" for h in types), "MAE_h", "cov_h%", "MAE_c", "cov_c%", "Score"]
    row = [
        *(f(result["mae_h_by_type"][h]) for h in types),
        f(result["mae_h"]),
        f(result["cov_h"], True),
        f(result["mae_c"]),
        f(result["cov_c"], True),
        f(result["score"]),
    ]
    widths = [max(len(a), len(b)) for a, b in zip(head, row)]
    line1 = "  ".join(a.rjust(w) for a, w in zip(head, widths))
    line2 = "  ".join(b.rjust(w) for b, w in zip(row, widths))
    c = result["counts"]
    foot = (
        f"{c['dialogues']} dialogues: {c['forked']} forked ({c['forked_flagged']} flagged), "
        f"{c['conformant']} conformant ({c['conformant_flagged']} flagged); "
        f"refs MAE_h_ref={f(result['mae_h_ref'])}, MAE_c_ref={f(result['mae_c_ref'])}"
    )
    return f"{line1}\n{line2}\n{foot}"
