"""The calibrated LLM judge next to the people (paper, Table 11).

:func:`run_judge` has :class:`dialfork_metrics.judge.LLMJudge` answer the three steps on the
study's conversations (each shown the cue stored for it, as the annotators saw it) and,
optionally, on a whole corpus (cues assigned from the study seed, as they would have been),
calibrates its ratings against the people's (isotonic, cross-fitted on the study), and returns
the judge's answers as judgment rows of the export format, so that the same analyses
(:func:`annotation.analysis.analyse`) give the judge's column of Table 11.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .design import FOIL_SHARE_FORKED, assign_cue

logger = logging.getLogger(__name__)

JUDGE_ANNOTATOR = "llm-judge"


def _item(record: Mapping[str, Any], cue: Mapping[str, Any]) -> dict[str, Any]:
    forked = record.get("hallucination_type") is not None
    tk = record.get("fork_turn")
    return {
        "dialogue_id": record["dialogue_id"],
        "task": record["task"],
        "turns": record["turns"],
        "cue": cue["cue_text"],
        "fork_turn": tk,
        "step3": bool(forked and tk and int(tk) > 1),
        "injected_instruction": " ".join(str(record.get("instruction") or "").split()),
        "record": record,
        **cue,
    }


def study_items(study: Any) -> list[dict[str, Any]]:
    """Judge items of the conversations people completed, with the cue stored for each.

    Args:
        study: The study (:class:`annotation.store.Study`; its ``engine`` is read).

    Returns:
        One item per conversation with at least one completed assignment, by conversation row
        id: ``dialogue_id``, ``task``, ``turns``, ``cue``, ``fork_turn``, ``step3`` (whether
        step 3 applies), ``injected_instruction``, ``record`` and the stored ``cue_kind``,
        ``cue_type``, ``cue_variant``, ``cue_text``.
    """
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from .db import DONE, Assignment, Conversation

    with Session(study.engine) as s:
        ids = set(s.scalars(select(Assignment.conversation_id).where(Assignment.state == DONE)))
        convs = [s.get(Conversation, i) for i in sorted(ids)]
        return [
            _item(
                c.record,
                {
                    "cue_kind": c.cue_kind,
                    "cue_type": c.cue_type,
                    "cue_variant": c.cue_variant,
                    "cue_text": c.cue_text,
                },
            )
            for c in convs
        ]


def corpus_items(
    records: Iterable[Mapping[str, Any]],
    study_seed: int,
    pool: Any,
    tasks: Mapping[str, str] | None = None,
    foil_share: float = FOIL_SHARE_FORKED,
) -> list[dict[str, Any]]:
    """Judge items of every record, each with the cue the study would assign it.

    Args:
        records: The corpus records.
        study_seed: The study seed the cues are drawn from (:func:`assign_cue`).
        pool: The variant pool.
        tasks: Task -> one-line description, for substitute-task cues.
        foil_share: Share of forks shown a foil instead of their true instruction (default
            :data:`FOIL_SHARE_FORKED`).

    Returns:
        One item per record, in order, with the fields of :func:`study_items`.
    """
    out = []
    for r in records:
        cue = assign_cue(r, study_seed, pool, foil_share, tasks=tasks)
        out.append(
            _item(
                r,
                {
                    "cue_kind": cue.kind,
                    "cue_type": cue.htype,
                    "cue_variant": cue.variant,
                    "cue_text": cue.text,
                },
            )
        )
    return out


def people_mean_slider(judgments: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Mean slider per conversation over the people who judged it.

    Args:
        judgments: Judgment rows (``dialogue_id``, ``slider``); rows without a slider (None or
            ``""``) are skipped.

    Returns:
        ``{dialogue_id: mean slider (0..100)}`` over the conversations with at least one slider.
    """
    acc: dict[str, list[float]] = defaultdict(list)
    for j in judgments:
        if j.get("slider") not in (None, ""):
            acc[str(j["dialogue_id"])].append(float(j["slider"]))
    return {d: float(np.mean(v)) for d, v in acc.items()}


def judge_rows(
    items: Sequence[Mapping[str, Any]], answers: Sequence[Mapping[str, Any]], sliders: Sequence[float | None]
) -> list[dict[str, Any]]:
    """The judge's answers as completed judgment rows (the export format; annotator
    :data:`JUDGE_ANNOTATOR`). Conversations with an unusable rating or step-2 answer are left
    out (the judge's report counts them).

    Args:
        items: The judge items (:func:`study_items` / :func:`corpus_items`).
        answers: The judge's answer per item (``slider_raw``, ``cue_answer``, ``onset_turn``,
            ``prefix_answer``).
        sliders: The calibrated slider per item (0..100), None when unusable.

    Returns:
        One row per usable item; ``position`` is the item's 1-based index, ``slider`` is rounded
        to 3 decimals, ``prefix_answer`` is None where step 3 does not apply.
    """
    rows = []
    for pos, (it, a, sl) in enumerate(zip(items, answers, sliders), 1):
        if sl is None or a["cue_answer"] is None:
            continue
        r = it["record"]
        rows.append(
            {
                "annotator": JUDGE_ANNOTATOR,
                "annotator_id": 0,
                "position": pos,
                "dialogue_id": r["dialogue_id"],
                "source_id": r["source_id"],
                "task": r["task"],
                "hallucination_type": r.get("hallucination_type"),
                "variant": r.get("variant"),
                "fork_position": r.get("fork_position"),
                "fork_turn": r.get("fork_turn"),
                "num_system_turns": r.get("num_system_turns"),
                "cue_kind": it["cue_kind"],
                "cue_type": it["cue_type"],
                "cue_variant": it["cue_variant"],
                "cue_text": it["cue_text"],
                "state": 3,
                "slider": round(float(sl), 3),
                "slider_raw": a["slider_raw"],
                "cue_answer": a["cue_answer"],
                "onset_turn": a["onset_turn"],
                "prefix_answer": a["prefix_answer"] if it["step3"] else None,
                "note": None,
            }
        )
    return rows


def run_judge(
    judge: Any,
    study: Any,
    records: Sequence[Mapping[str, Any]] | None = None,
    calibration: str = "isotonic",
    n_folds: int = 5,
    seed: int = 0,
    cache: str | Path | None = None,
) -> dict[str, Any]:
    """Judge the study's conversations (and ``records``, the whole corpus, when given).

    Args:
        judge: The LLM judge (:class:`dialfork_metrics.judge.LLMJudge`, or any object with
            ``judge(items, cache=...)`` returning one answer dict per item and ``last_report``).
        study: The :class:`~annotation.store.Study` whose completed conversations are judged
            (with the cue stored for each) and whose people's mean sliders are the calibration
            target.
        records: The whole corpus to judge as well (cues assigned from the study seed, as the
            study would); None judges the study's conversations only.
        calibration: ``"isotonic"`` (the judge's raw slider mapped onto the people's by
            isotonic regression, cross-fitted on the study) or ``"none"`` (raw sliders).
        n_folds: Folds of the cross-fitting (grouped by source dialogue).
        seed: Seed of the fold assignment.
        cache: A JSONL file of the judge's answers, appended as it goes (a rerun resumes);
            None: no cache.

    Returns:
        ``{"study": rows, "all": rows or None, "calibration": {...}, "report": {...}}``:
        judgment rows in the export format (annotator :data:`JUDGE_ANNOTATOR`) with calibrated
        sliders (out-of-fold on the study, the map fitted on the whole study for ``all``);
        ``calibration`` holds ``method``, ``n_folds``, ``seed``, ``n`` (conversations rated by
        both) and, for isotonic, the fitted ``map`` (``x``/``y`` thresholds); ``report`` holds
        the judge's ``last_report`` for ``study`` (and ``all``). See
        :mod:`dialfork_metrics.judge`.

    Raises:
        ValueError: ``calibration`` is unknown, the study has no completed judgment yet, or
            isotonic calibration has fewer than 2 conversations rated by both the judge and
            people.
    """
    from dialfork_metrics.judge import CALIBRATIONS, cross_fit, fit_calibration

    if calibration not in CALIBRATIONS:
        raise ValueError(f"calibration must be one of {CALIBRATIONS}, got {calibration!r}")
    people = people_mean_slider(study.judgments())
    items = study_items(study)
    if not items:
        raise ValueError(
            "the study has no completed judgments yet: the judge is calibrated on the people's answers"
        )
    answers = judge.judge(items, cache=cache)
    report = {"study": dict(judge.last_report or {})}
    raw = np.array([np.nan if a["slider_raw"] is None else float(a["slider_raw"]) for a in answers])
    target = np.array([people.get(it["dialogue_id"], np.nan) for it in items])
    ok = ~np.isnan(raw) & ~np.isnan(target)
    cal: dict[str, Any] = {"method": calibration, "n_folds": n_folds, "seed": seed, "n": int(ok.sum())}
    sliders: list[float | None] = [None if np.isnan(v) else float(v) for v in raw]
    full = None
    if calibration == "isotonic":
        if ok.sum() < 2:
            raise ValueError(
                "isotonic calibration needs at least 2 conversations rated by both the judge and people"
            )
        groups = [it["record"]["source_id"] for it, k in zip(items, ok) if k]
        oof = cross_fit(raw[ok], target[ok], groups, n_folds=n_folds, seed=seed)
        for i, v in zip(np.flatnonzero(ok), oof):
            sliders[i] = float(v)
        full = fit_calibration(raw[ok], target[ok])
        cal["map"] = {
            "x": [float(x) for x in full.X_thresholds_],
            "y": [float(y) for y in full.y_thresholds_],
        }
    out: dict[str, Any] = {"study": judge_rows(items, answers, sliders), "all": None, "calibration": cal}
    if records is not None:
        catalog = study.task_catalog() or None
        foil_share = float(study.meta("foil_share") or FOIL_SHARE_FORKED)
        all_items = corpus_items(records, study.study_seed, study.variants, catalog, foil_share)
        all_answers = judge.judge(all_items, cache=cache)
        report["all"] = dict(judge.last_report or {})
        raw_all = np.array(
            [np.nan if a["slider_raw"] is None else float(a["slider_raw"]) for a in all_answers]
        )
        mapped = raw_all.copy()
        have = ~np.isnan(raw_all)
        if full is not None and have.any():
            mapped[have] = full.predict(raw_all[have])
        sl_all = [None if np.isnan(v) else float(v) for v in mapped]
        out["all"] = judge_rows(all_items, all_answers, sl_all)
    out["report"] = report
    return out


__all__ = ["JUDGE_ANNOTATOR", "corpus_items", "judge_rows", "people_mean_slider", "run_judge", "study_items"]
