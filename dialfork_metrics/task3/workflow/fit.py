"""How the workflow-aware detector ``wf`` learns from what the user has: labels, logs, or the workflow alone.

Kept apart from :mod:`.workflow_detector` to keep that module small. Three parts:

* **Which step each fit turn says** (:func:`fit_labels`). A record's ``system_nodes`` (gold step
  labels, e.g. STAR's action labels or SGD's acts) are used as given, for the turns whose
  ``system_node_tasks`` (when present) name the record's task. An unlabelled turn is *self-trained*:
  it joins the step the assigner is sure of (its best step leads the second by at least
  ``self_train_margin`` and no other workflow fits it better), in two rounds (the first round's
  turns help the second); a turn the assigner is unsure of joins no step, so a wrong guess ("Where
  are you flying from?" taken for ask-destination) neither teaches the step a wrong text nor makes
  the task look as if it loops.
* **Calibration that sees the rivals** (:func:`cross_fit_statistics`). Each conformant fit dialogue
  is scored with the texts of every *other* fit dialogue (all tasks, its own task's other folds):
  the texts it will be judged against at test time, rivals included.
* **An operating point that holds** (:func:`operating_point`). A task with fewer than
  ``min_task_dialogues`` fit dialogues calibrates on the pooled statistics of every task (borrowing
  strength instead of taking its threshold from one dialogue); the floor (``threshold_floor``) is
  an option, and where it overrides the calibrated threshold the detector says so. With no
  dialogues at all (:func:`workflow_statistics`), the statistics come from the workflow's own
  phrasings: pseudo-dialogues of one phrasing per step, each phrasing scored without itself.

Every function takes the detector being fitted and sets or returns plain values.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .nodes import NodeAssigner, node_similarities

logger = logging.getLogger("dialfork_metrics.task3.workflow.detector")

#: How the expected false-alarm rate of a fit was estimated, by kind of fit.
ESTIMATES = {
    "cross_fit": "share of conformant fit dialogues (each scored without its own fold's texts) that alarm",
    "in_sample": "share of conformant fit dialogues (scored with every fit text, its own included) that alarm",
    "workflow": (
        "share of pseudo-dialogues (one phrasing per step, each phrasing scored without itself) that "
        "alarm: steps with a single phrasing cannot be left out and are not counted"
    ),
}


def gold_labels(record: Any, task: str, n_system: int, nodes: frozenset[str]) -> list[str | None] | None:
    """A record's own step labels for its system turns, or None when it carries none that fit.

    Args:
        record: A fit record (``system_nodes``, optionally ``system_node_tasks``).
        task: Its task.
        n_system: Its number of system turns.
        nodes: The task's steps.

    Returns:
        list[str | None] | None: Per system turn its labelled step (None: a label of another task
        or not a step of the task); None when the record has no labels or they do not match its
        system turns.

    Example:
        >>> r = {"system_nodes": ["ask_day", "inform", "other"], "system_node_tasks": ["w", "w", "x"]}
        >>> gold_labels(r, "w", 3, frozenset({"ask_day", "inform"}))
        ['ask_day', 'inform', None]
    """
    labels = record.get("system_nodes") if isinstance(record, Mapping) else None
    if not isinstance(labels, Sequence) or isinstance(labels, str) or len(labels) != n_system:
        return None
    owners = record.get("system_node_tasks")
    if not isinstance(owners, Sequence) or len(owners) != n_system:
        owners = [task] * n_system
    return [n if (o == task and n in nodes) else None for n, o in zip(labels, owners)]


def fit_labels(
    det: Any,
    base: NodeAssigner,
    rows: Sequence[Any],
    task_of: Sequence[str],
    turns: Sequence[Sequence[Mapping[str, str]]],
    emb: Sequence[np.ndarray],
    sys_rows: Sequence[list[int]],
) -> tuple[list[list[str | None]], dict[str, int]]:
    """The step of every fit dialogue's system turn: gold labels first, then self-training.

    Args:
        det: The detector being fitted (``self_training``, ``self_train_margin``, ``reject_margin``).
        base: The assigner fitted on the workflow's own texts.
        rows: The fit records.
        task_of: Each record's task.
        turns: Each record's turns.
        emb: Each record's turn embeddings.
        sys_rows: Each record's system-turn positions.

    Returns:
        ``(labels, counts)``: per dialogue the step of each system turn (None: unsure, joins no
        step); counts of ``gold``, ``self_trained`` and ``unsure`` turns.
    """
    counts = {"gold": 0, "self_trained": 0, "unsure": 0}
    labels: list[list[str | None] | None] = []
    for i, r in enumerate(rows):
        g = gold_labels(r, task_of[i], len(sys_rows[i]), frozenset(base.task_nodes(task_of[i])))
        labels.append(g)
        counts["gold"] += sum(x is not None for x in g) if g is not None else 0
    todo = [i for i, g in enumerate(labels) if g is None]
    cur = base.with_examples(
        labelled_parts([i for i, g in enumerate(labels) if g is not None], task_of, emb, sys_rows, labels)
    )
    guess: dict[int, list[str | None]] = {}
    for _ in range(2 if det.self_training else 1):
        for i in todo:
            texts = [turns[i][k]["text"] for k in sys_rows[i]]
            a = cur.assign(task_of[i], emb[i][sys_rows[i]], texts)
            if not det.self_training:  # every turn joins its nearest step, as before self-training
                guess[i] = list(a.best)
                continue
            sure = (a.own_similarity - a.second_similarity >= det.self_train_margin) & ~(
                a.rival_similarity >= a.own_similarity + det.reject_margin
            )
            guess[i] = [b if ok else None for b, ok in zip(a.best, sure)]
        steps = [labels[i] if labels[i] is not None else guess.get(i, []) for i in range(len(rows))]
        cur = base.with_examples(labelled_parts(range(len(rows)), task_of, emb, sys_rows, steps))
    out = [labels[i] if labels[i] is not None else guess.get(i, []) for i in range(len(rows))]
    for i in todo:
        counts["self_trained"] += sum(x is not None for x in out[i])
        counts["unsure"] += sum(x is None for x in out[i])
    return out, counts


def labelled_parts(
    idx: Sequence[int],
    task_of: Sequence[str],
    emb: Sequence[np.ndarray],
    sys_rows: Sequence[list[int]],
    labels: Sequence[Sequence[str | None]],
) -> list[tuple[str, np.ndarray, Sequence[str | None]]]:
    """``(task, system-turn embeddings, steps)`` of the given fit dialogues, for
    :meth:`~.workflow_nodes.NodeAssigner.with_examples`.

    Args:
        idx: The dialogues to take.
        task_of: Each dialogue's task.
        emb: Each dialogue's turn embeddings.
        sys_rows: Each dialogue's system-turn positions.
        labels: Each dialogue's steps (:func:`fit_labels`).

    Returns:
        list[tuple]: One triple per dialogue.
    """
    return [(task_of[i], emb[i][sys_rows[i]], labels[i]) for i in idx]


def cross_fit_statistics(
    det: Any,
    base: NodeAssigner,
    final: NodeAssigner,
    task_of: Sequence[str],
    turns: Sequence[Any],
    emb: Sequence[np.ndarray],
    sys_rows: Sequence[list[int]],
    labels: Sequence[Sequence[str | None]],
    hits: dict[str, list[set[str]]] | None = None,
) -> dict[str, list[float]]:
    """Each fit dialogue's statistic (its largest deviation), scored as a test dialogue would be.

    ``calibration="cross_fit"``: with the texts of every other fit dialogue, the rival tasks'
    included, and of its own task's other folds; ``"in_sample"``: with every fit text.

    Args:
        det: The detector being fitted.
        base: The assigner of the workflow's own texts.
        final: The assigner with every fit text.
        task_of: Each dialogue's task.
        turns: Each dialogue's turns.
        emb: Each dialogue's turn embeddings.
        sys_rows: Each dialogue's system-turn positions.
        labels: Each dialogue's steps (:func:`fit_labels`).
        hits: When given, filled with task -> per fit dialogue of the task (in fit order) the set
            of rules that flag one of its turns.

    Returns:
        dict[str, list[float]]: task -> the statistics of its fit dialogues (in fit order).
    """
    from ..streaming.decision import calibration_fold_ids

    tasks = sorted(set(task_of))
    stats: dict[str, list[float]] = {t: [] for t in tasks}
    by_task = {t: [i for i, x in enumerate(task_of) if x == t] for t in tasks}
    for t, idx in by_task.items():
        got: list[set[str]] = [set() for _ in idx]
        if det.calibration != "cross_fit" or len(idx) < 2:
            stats[t].extend(
                det._statistic(final, t, turns[i], emb[i], sys_rows[i], got[k]) for k, i in enumerate(idx)
            )
        else:
            fold = calibration_fold_ids(len(idx), det.calibration_folds, det.calibration_seed)
            others = [i for i, x in enumerate(task_of) if x != t]
            vals = [0.0] * len(idx)
            for f in np.unique(fold):
                keep = others + [idx[j] for j in np.flatnonzero(fold != f)]
                a = det._with_train_texts(base, labelled_parts(keep, task_of, emb, sys_rows, labels))
                for j in np.flatnonzero(fold == f):
                    vals[j] = det._statistic(a, t, turns[idx[j]], emb[idx[j]], sys_rows[idx[j]], got[j])
            stats[t].extend(vals)
        if hits is not None:
            hits[t] = got
    return stats


MAX_NAMED = 10
"""The most dialogue ids a rule-budget log line names (then "and N more")."""


def misfire_evidence(n_misfires: int, n_dialogues: int, false_alarm_rate: float, min_misfires: int) -> bool:
    """Whether a rule's misfires on a task's conformant fit dialogues are evidence enough to switch
    it off for the task: at least ``min_misfires`` dialogues, and more than half
    ``false_alarm_rate`` of them (ours: 3 and 2.5% by default).

    Args:
        n_misfires: The conformant fit dialogues of the task the rule flags.
        n_dialogues: The task's conformant fit dialogues.
        false_alarm_rate: The detector's target rate.
        min_misfires: The fewest misfiring dialogues that count as evidence.

    Returns:
        bool: True when the rule should be switched off.

    Example:
        >>> misfire_evidence(1, 6, 0.05, 3), misfire_evidence(3, 6, 0.05, 3), misfire_evidence(3, 200, 0.05, 3)
        (False, True, False)
    """
    return n_dialogues > 0 and n_misfires >= min_misfires and n_misfires / n_dialogues > false_alarm_rate / 2


def _named(ids: Sequence[str]) -> str:
    more = len(ids) - MAX_NAMED
    return ", ".join(ids[:MAX_NAMED]) + (f" and {more} more" if more > 0 else "")


def rule_budget(
    det: Any, statistics: Any, task_of: Sequence[str] = (), ids: Sequence[str] = ()
) -> dict[str, list[float]]:
    """The calibration statistics, each step rule switched off only for the tasks where it misfires.

    A rule (the role-free ``repeat`` and ``order``; ``skip-requires``, ``skip-closing``,
    ``repeat-slot``, ``repeat-confirmation``) adds a whole unit of deviation where it fires, so a
    rule that flags a conformant fit dialogue makes it alarm. A rule is switched off for a task
    (``det.rules_off_[task]``, one warning per task and rule naming the rule, the task, the count
    and the dialogue ids) only with enough evidence (:func:`misfire_evidence`: at least
    ``det.rule_min_misfires`` of the task's own conformant fit dialogues, and more than half
    ``false_alarm_rate`` of them); the task's other rules stay on. With fewer misfires a rule stays
    on and an info line names the dialogues. So a few logs never switch a rule off: with fewer fit
    dialogues than the evidence threshold, detection is that of the workflow file's rules.

    The thresholds are calibrated on the statistics without the step rules (the similarity
    deviations), so the misfires of a rule kept on do not lift a task's threshold over every
    similarity deviation (a task switch or an inserted sub-goal would then go unseen); the
    dialogues a kept rule flags are counted in the expected false-alarm rate instead
    (``det.rule_misfires_``: task -> per fit dialogue whether a rule left on flags it).

    Args:
        det: The detector being fitted (``false_alarm_rate``, ``rule_min_misfires``).
        statistics: A function ``statistics(hits=None)`` computing the statistics (task -> list, in
            fit order) with the detector as it is, filling ``hits`` (task -> per dialogue the rules
            that flag it) when given.
        task_of: The task of each fit dialogue (to name them).
        ids: The id of each fit dialogue.

    Returns:
        dict[str, list[float]]: The statistics to calibrate on.
    """
    from .rules import SWITCHABLE_RULES

    det.rules_off_ = {}
    hits: dict[str, list[set[str]]] = {}
    full = statistics(hits)
    names = {t: [ids[i] for i, x in enumerate(task_of) if x == t] for t in full} if len(ids) else {}
    off: dict[str, frozenset[str]] = {}
    for t in sorted(full):
        per = hits.get(t, [])
        who = names.get(t) or [f"#{k}" for k in range(len(per))]
        rules = sorted({r for h in per for r in h})
        gone = []
        for r in rules:
            bad = [who[k] for k, h in enumerate(per) if r in h]
            if misfire_evidence(len(bad), len(per), det.false_alarm_rate, det.rule_min_misfires):
                gone.append(r)
                logger.warning(
                    "wf detector: task %r: rule %r alarms on %d of its %d conformant fit dialogues (%.1f%% > "
                    "%.1f%%, at least %d needed): switched off for this task (its other rules stay on); it "
                    "misfired on %s",
                    t,
                    r,
                    len(bad),
                    len(per),
                    100 * len(bad) / len(per),
                    100 * det.false_alarm_rate / 2,
                    det.rule_min_misfires,
                    _named(bad),
                )
            else:
                logger.info(
                    "wf detector: task %r: rule %r alarms on %d of its %d conformant fit dialogues (%s): kept "
                    "(switched off only at %d or more dialogues and over %.1f%%)",
                    t,
                    r,
                    len(bad),
                    len(per),
                    _named(bad),
                    det.rule_min_misfires,
                    100 * det.false_alarm_rate / 2,
                )
        if gone:
            off[t] = frozenset(gone)
    det.rule_misfires_ = {t: [bool(h - off.get(t, frozenset())) for h in hits.get(t, [])] for t in full}
    det.rules_off_ = {t: frozenset(SWITCHABLE_RULES) for t in full}
    free = statistics()  # the similarity deviations alone: what the thresholds are calibrated on
    det.rules_off_ = off
    return free


def workflow_statistics(det: Any, assigner: NodeAssigner, tasks: Sequence[str]) -> dict[str, list[float]]:
    """Statistics of pseudo-dialogues made of the workflow's own phrasings (a fit without dialogues).

    Pseudo-dialogue ``r`` of a task says the ``r``-th phrasing of each of its steps that has at
    least two (a step with one phrasing cannot be scored without itself); each phrasing is scored
    without itself, against the task's other phrasings and every other workflow (the role-free
    deviation: similarity floor and rivals). Its statistic is its largest deviation.

    Args:
        det: The detector being fitted (``min_similarity_``, ``reject_margin``).
        assigner: The assigner of the workflow's own texts.
        tasks: The tasks.

    Returns:
        dict[str, list[float]]: task -> one statistic per pseudo-dialogue (empty: no step has two
        phrasings).
    """
    from .rules import turn_deviations

    P, owners = assigner.P_, assigner.owners_
    keys = assigner.keys_
    out: dict[str, list[float]] = {}
    for t in tasks:
        own_mask, rival_mask = assigner._own[t], assigner._rival[t]
        node_rows = {k: np.flatnonzero(owners == k) for k in np.flatnonzero(own_mask) if keys[k][0] == t}
        node_rows = {k: r for k, r in node_rows.items() if len(r) >= 2}
        if not node_rows:
            out[t] = []
            continue
        dev: dict[int, np.ndarray] = {}
        for k, r in node_rows.items():
            N = node_similarities(P[r], P, owners, len(keys), exclude=r)  # each phrasing without itself
            own = N[:, own_mask].max(axis=1)
            rival = N[:, rival_mask].max(axis=1) if rival_mask.any() else np.full(len(r), -np.inf)
            dev[k] = turn_deviations(
                own, rival, min_similarity=det.min_similarity_, reject_margin=det.reject_margin
            )
        n = max(len(r) for r in node_rows.values())
        out[t] = [float(max(d[j % len(d)] for d in dev.values())) for j in range(n)]
    return out


def operating_point(det: Any, stats: Mapping[str, np.ndarray]) -> None:
    """Set ``thresholds_`` and ``operating_point_`` from the calibration statistics.

    A task with fewer than ``det.min_task_dialogues`` statistics borrows strength: it calibrates on
    every task's statistics taken around their own task's median and put around its own (the tail's
    shape from all, the level its own; a task without statistics takes every task's as they are). ``det.threshold_floor`` (None: none) is the least threshold; where it
    overrides the calibrated one, a warning says so and how to lift it. A fit without dialogues
    (``fit_kind_ == "workflow"``) applies the floor itself when there is one: its pseudo-dialogues
    (:func:`workflow_statistics`) estimate the false-alarm rate there, they do not set the
    threshold (None: they do).

    Args:
        det: The fitted detector (``false_alarm_rate``, ``threshold_rule``, ``confidence``,
            ``threshold_floor``, ``min_task_dialogues``, ``fit_kind_``).
        stats: task -> its calibration statistics.
    """
    from ..streaming.decision import calibrate_threshold

    misfires = getattr(det, "rule_misfires_", None) or {}
    flagged = {
        t: np.asarray(misfires[t], dtype=bool)[np.isfinite(v)]
        for t, v in stats.items()
        if t in misfires and len(misfires[t]) == len(v)
    }
    finite = {t: v[np.isfinite(v)] for t, v in stats.items()}
    # what a task borrows: the other tasks' statistics around their own medians (the tail's shape),
    # put around its own median (its level); a task without statistics takes them as they are
    residuals = np.concatenate([v - np.median(v) for v in finite.values() if v.size] or [np.zeros(0)])
    pooled = np.concatenate(list(finite.values()) or [np.zeros(0)])
    thresholds: dict[str, float] = {}
    point: dict[str, dict[str, Any]] = {}
    floored = []
    for t, own in finite.items():
        source = "own" if own.size >= det.min_task_dialogues else "pooled"
        use = own if source == "own" else (residuals + np.median(own) if own.size else pooled)
        if use.size == 0:
            calibrated = -math.inf
        else:
            calibrated = float(
                calibrate_threshold(
                    use, "ss", det.false_alarm_rate, rule=det.threshold_rule, confidence=det.confidence
                )
            )
        floor = det.threshold_floor
        if floor is not None and getattr(det, "fit_kind_", None) == "workflow":
            # pseudo-dialogues of the workflow's deliberately varied phrasings are a pessimistic proxy
            # of real turns: with a floor, a fit without dialogues applies the floor (the assigner's
            # own rule) and reports the rate it expects there
            applied = float(floor)
        else:
            applied = calibrated if floor is None else max(float(floor), calibrated)
        if not math.isfinite(applied):
            applied = 0.0
        if floor is not None and applied > calibrated and use.size:
            floored.append(t)
        expected = (
            float(np.mean((own > applied) | flagged.get(t, np.zeros(own.size, dtype=bool))))
            if own.size
            else (float(np.mean(use > applied)) if use.size else None)
        )
        thresholds[t] = applied
        point[t] = {
            "calibrated": calibrated if math.isfinite(calibrated) else None,
            "threshold": applied,
            "floored": t in floored,
            "calibrated_on": source,
            "n": int(own.size),
            "expected_false_alarm_rate": expected,
            "estimate": ESTIMATES.get(getattr(det, "fit_kind_", det.calibration), ""),
        }
    if floored:
        logger.warning(
            "wf detector: the threshold floor %s overrides the threshold calibrated at false_alarm_rate=%s "
            "for %d task(s) (%s): those tasks alarm less often than asked; pass threshold_floor=None to "
            "use the calibrated thresholds (operating_point_ lists both)",
            det.threshold_floor,
            det.false_alarm_rate,
            len(floored),
            ", ".join(floored[:5]),
        )
    det.thresholds_ = thresholds
    det.operating_point_ = point


__all__ = [
    "ESTIMATES",
    "MAX_NAMED",
    "misfire_evidence",
    "rule_budget",
    "cross_fit_statistics",
    "fit_labels",
    "gold_labels",
    "labelled_parts",
    "operating_point",
    "workflow_statistics",
]
