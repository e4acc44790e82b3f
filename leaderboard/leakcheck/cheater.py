"""The simulator-aware and public-data attacks (issue 33), run on any blind set.

:func:`simulator_attacks` takes the blind rows, the metric-track pairs and the public configs as
records, so it runs on a template hidden set and on an LLM-generated one alike; :func:`run_audit`
(:mod:`.run`) calls it on a staged layout. Every attack is built from public material only (see
:mod:`.simulator` and :mod:`.learned`):

* (a) ``simulator fingerprints (public pools)``: detector and metric tracks; fails;
* (b) ``fingerprints + node grammar (public seeds)``: detector and metric tracks; fails;
* (c) ``public-data ceiling (TF-IDF + LR)``: detector and metric tracks; reported, never a verdict;
* (d) ``length rule (modal conformant T)``: detector track; fails;
* (e) ``node-level shared prefix (metric track)``: metric track; fails.

"fails" means: beyond matched Random + :data:`~.report.DETECTOR_MARGIN` (p < ALPHA), or a tau
above :data:`~.report.METRIC_TAU_MAX`, as the older attacks. (a), (b), (d) and (e) exploit how
the hidden set was *generated*, so a release declared plumbing only (a template hidden set, for
demos and tests) records their failures as waived; (c) learns from the public training data, which
is allowed.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .learned import (
    TaskGuesser,
    TurnClassifier,
    labelled_rows,
    length_rule,
    modal_lengths,
    node_prefix_distances,
    public_pairs,
    turn_distances,
)
from .report import CEILING, AttackResult
from .scoring import _Detector, _detector_result, _Metric, _metric_result, turns_key
from .simulator import (
    Fingerprinter,
    NodeGrammar,
    PhrasingTable,
    PublicPools,
    fingerprint_predictions,
    system_turns,
)

logger = logging.getLogger("leaderboard.leakcheck")

FINGERPRINTS = "simulator fingerprints (public pools)"
GRAMMAR = "fingerprints + node grammar (public seeds)"
LENGTH = "length rule (modal conformant T)"
NODE_PREFIX = "node-level shared prefix (metric track)"
HONEST = "honest detector"


def _conformant_material(
    rows: Sequence[Mapping[str, Any]], regen: Sequence[Mapping[str, Any]]
) -> tuple[list[Mapping[str, Any]], list[tuple[str, Sequence[Mapping[str, Any]], int | None]]]:
    """Conformant dialogues (public and regenerated, once each) and every conformant stretch:
    ``(task, turns, upto)`` with ``upto`` the conformant system turns of a public fork's prefix."""
    conf: dict[str, Mapping[str, Any]] = {}
    for r in [*rows, *regen]:
        if r.get("hallucination_type") is None and r.get("turns"):
            conf.setdefault(turns_key(r["turns"]), r)
    stretches: list[tuple[str, Sequence[Mapping[str, Any]], int | None]] = [
        (r.get("task") or "", r["turns"], None) for r in conf.values()
    ]
    stretches += [
        (r.get("task") or "", r["turns"], int(r["fork_turn"]) - 1)
        for r in rows
        if r.get("hallucination_type") is not None and r.get("fork_turn")
    ]
    return list(conf.values()), stretches


def _texts(
    stretches: Sequence[tuple[str, Sequence[Mapping[str, Any]], int | None]],
) -> tuple[set[str], set[str], dict[str, set[str]]]:
    sys_t, user_t, by_task = set(), set(), {}
    for task, turns, upto in stretches:
        st = system_turns(turns)[:upto]
        for text, _ in st:
            sys_t.add(text)
            by_task.setdefault(task, set()).add(text)
        n_sys = 0
        for t in turns:  # the user turns up to the last conformant system turn
            if t["speaker"] == "system":
                n_sys += 1
                if upto is not None and n_sys > upto:
                    break
            else:
                user_t.add(t["text"].strip())
    return sys_t, user_t, by_task


def simulator_attacks(
    blind: Sequence[Mapping[str, Any]],
    pairs: Sequence[Mapping[str, Any]],
    public: Mapping[str, Sequence[Mapping[str, Any]]],
    det: _Detector,
    met: _Metric | None,
    *,
    star: str | os.PathLike | None = None,
    regen: Sequence[Mapping[str, Any]] = (),
    say: Callable[[str], None] | None = None,
) -> tuple[list[AttackResult], list[str]]:
    """Attacks (a)-(e) of issue 33 on one blind set (see the module doc).

    Args:
        blind: The blind rows (``dialogue_id``, ``turns``, ``num_system_turns``).
        pairs: The metric-track pairs (``pair_id``, ``reference``, ``candidate``); may be empty.
        public: ``{config: rows}`` of the public labelled configs.
        det: The run's detector-track scorer (gold and Random draws).
        met: The run's metric-track scorer, or None when the track is not audited.
        star: The workflow source the public simulator reads (its phrasing table); None: the
            attacks that need it learn from the public dialogues only, the grammar is skipped.
        regen: Records regenerated with the public simulator and public seeds (their conformant
            dialogues extend the conformant material).
        say: Called with a short message as each attack starts; None logs them.

    Returns:
        ``(results, notes)``: the results in the order (a) detector and metric, (b) detector and
        metric, (c) detector and metric, (d), (e); simulator-aware ones (a, b, d, e) are marked
        so; (c) has status ``"reported"``.
    """
    say = say or (lambda m: logger.info("audit: %s", m))
    rows = labelled_rows(public)
    conformant, stretches = _conformant_material(rows, regen)
    sys_t, user_t, by_task = _texts(stretches)
    notes: list[str] = []
    table = None
    if star is not None:
        say("phrasing table of the public simulator")
        try:
            table = PhrasingTable.from_source(star)
        except Exception as e:  # noqa: BLE001 - an unusable source only weakens the attacks
            notes.append(
                f"simulator attacks: the workflow source {star} is unusable ({e}); the phrasing table "
                "is not used"
            )
    pools = PublicPools.load(sys_t, user_t)
    guesser = TaskGuesser(rows, table)
    blind_tasks = dict(zip((b["dialogue_id"] for b in blind), guesser.guess(blind)))
    pair_tasks = guesser.guess(pairs, key="reference") if pairs else []
    cand = [{"dialogue_id": p["pair_id"], "turns": p["candidate"]} for p in pairs]
    cand_tasks = dict(zip((c["dialogue_id"] for c in cand), pair_tasks))
    fp = Fingerprinter(pools, table, sys_t, by_task)
    out: list[AttackResult] = []

    def det_res(name: str, preds: Mapping[str, int | None], detail: str) -> AttackResult:
        r = _detector_result(name, det, preds, detail)
        r.simulator_aware = True
        return r

    def met_res(name: str, d: Mapping[str, float], detail: str) -> AttackResult:
        r = _metric_result(name, met.tau(d), detail)
        r.simulator_aware = True
        return r

    def reasons(c: Counter) -> str:
        return ", ".join(f"{k} {v}" for k, v in c.most_common())

    say("simulator fingerprints")
    preds, why = fingerprint_predictions(fp, blind, blind_tasks)
    src = "the variant pool, template_data.yaml" + (
        ", the simulator's phrasings" if table is not None else ""
    )
    out.append(
        det_res(
            FINGERPRINTS,
            preds,
            f"{sum(v is not None for v in preds.values())}/{len(blind)} blind dialogues flagged "
            f"({reasons(why)}); pools: {len(pools.system_lines)} lines, {len(pools.bridges)} bridges, "
            f"{len(pools.reactions)} reactions from {src} ({pools.pruned} pruned: a public conformant "
            "turn matches them)",
        )
    )
    if met is not None and pairs:
        p_c, why_c = fingerprint_predictions(fp, cand, cand_tasks)
        out.append(
            met_res(
                FINGERPRINTS,
                turn_distances(pairs, [p_c[c["dialogue_id"]] for c in cand]),
                f"distance = minus the candidate's first fingerprinted turn ({reasons(why_c)})",
            )
        )
    if table is None:
        for track in ("detector", "metric") if met is not None and pairs else ("detector",):
            out.append(
                AttackResult(
                    GRAMMAR,
                    track,
                    None,
                    "not run: no workflow source (STAR) for the phrasing table",
                    "skipped",
                    simulator_aware=True,
                )
            )
    else:
        say("node grammar")
        grammar = NodeGrammar(table).fit(stretches)
        n_trans = sum(len(v) for v in grammar.allowed.values())
        preds, why = fingerprint_predictions(fp, blind, blind_tasks, grammar)
        alone = {
            b["dialogue_id"]: grammar.first_violation(b["turns"], blind_tasks[b["dialogue_id"]])
            for b in blind
        }
        out.append(
            det_res(
                GRAMMAR,
                preds,
                f"{sum(v is not None for v in preds.values())}/{len(blind)} flagged ({reasons(why)}); "
                f"grammar: {n_trans} node transitions of {grammar.dialogues:,} conformant dialogues and "
                f"prefixes ({len(regen):,} regenerated records); the grammar alone scores "
                f"{det.with_fallback(alone):.1f}",
            )
        )
        if met is not None and pairs:
            p_c, why_c = fingerprint_predictions(fp, cand, cand_tasks, grammar)
            out.append(
                met_res(
                    GRAMMAR,
                    turn_distances(pairs, [p_c[c["dialogue_id"]] for c in cand]),
                    f"distance = minus the candidate's first flagged turn ({reasons(why_c)})",
                )
            )
    say("public-data ceiling (TF-IDF + logistic regression)")
    try:
        clf = TurnClassifier().fit(rows)
    except ValueError as e:
        out.append(AttackResult(CEILING, "detector", None, f"not run: {e}", "skipped"))
    else:
        preds = dict(zip((b["dialogue_id"] for b in blind), clf.predict(blind)))
        r = _detector_result(
            CEILING,
            det,
            preds,
            f"fitted on {len(rows):,} public labelled dialogues; threshold {clf.threshold:.3f} "
            f"(out-of-fold public Score {clf.public_score if clf.public_score is not None else float('nan'):.1f}); "
            "learning from the public data is allowed: reported, not a verdict",
        )
        r.status = "reported"
        out.append(r)
        if met is not None and pairs:
            out.append(
                AttackResult(
                    CEILING,
                    "metric",
                    met.tau(turn_distances(pairs, clf.predict(pairs, "candidate"))),
                    "distance = minus the candidate's first turn above the threshold",
                    "reported",
                )
            )
    say("length rule")
    modal = modal_lengths(conformant)
    predict, desc = length_rule(rows, [r.get("task") for r in rows], modal)
    preds = predict(blind, [blind_tasks[b["dialogue_id"]] for b in blind])
    out.append(
        det_res(LENGTH, preds, f"{desc}; modal T: " + ", ".join(f"{t} {m}" for t, m in sorted(modal.items())))
    )
    if met is not None and pairs:
        say("node-level shared prefix")
        d, why_th = node_prefix_distances(pairs, pair_tasks, table, public_pairs(rows))
        out.append(
            met_res(
                NODE_PREFIX,
                d,
                "system turns mapped to workflow nodes ("
                + ("the simulator's phrasing table, then " if table is not None else "")
                + f"agglomerative clusters of character n-gram TF-IDF, {why_th}); distance = minus the "
                "shared node prefix of reference and candidate",
            )
        )
    return out, notes


def honest_results(honest: Mapping[str, Mapping[str, int | None]], det: _Detector) -> list[AttackResult]:
    """Honest detectors' predictions on the blind set, scored next to the attacks (reported).

    Args:
        honest: ``{name: {dialogue_id: predicted turn or None}}``; dialogues a detector leaves
            out get Random's draw.
        det: The run's detector-track scorer.

    Returns:
        One result per detector (status ``"reported"``), named ``"honest detector: NAME"``.

    Raises:
        ValueError: A prediction names no blind dialogue or is not a system turn of it (1..T) nor
            None.
    """
    from dialfork_metrics.task3.rows import check_prediction

    T = dict(zip(det.ids, (int(t) for t in det.T)))
    out = []
    for name, preds in honest.items():
        bad = [
            f"{i}: not a blind dialogue" if i not in T else f"{i}: {check_prediction(v, T[i])[1]}"
            for i, v in preds.items()
            if i not in T or check_prediction(v, T[i]) is not None
        ]
        if bad:
            raise ValueError(f"honest detector {name!r}: {len(bad)} bad prediction(s): " + "; ".join(bad[:5]))
        r = _detector_result(
            f"{HONEST}: {name}",
            det,
            dict(preds),
            f"{len(preds)}/{len(det.ids)} blind dialogues predicted (Random for the others)",
        )
        r.status = "reported"
        out.append(r)
    return out


__all__ = [
    "FINGERPRINTS",
    "GRAMMAR",
    "HONEST",
    "LENGTH",
    "NODE_PREFIX",
    "honest_results",
    "simulator_attacks",
]
