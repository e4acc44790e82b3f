"""Task 3 (SPEC 8): detectors fitted on the conformant train split, scored on the test split
(Tables 4 and 9, the ablations) and Appendix I's weight sweep."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..methods import (
    TASK3_DETECTORS,
    regime,
)
from .common import BenchError
from .corpus import Corpus

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- Task 3
#: N-gram orders of the order ablation (issue: the paper claims results are similar across N).
TASK3_ABLATION_ORDERS: tuple[int, ...] = (2, 3, 6, 10)
#: The paper's Table 9 runs its streaming detectors with a 3-gram LM (Table 4: 6-gram).
TABLE9_ORDER = 3


def _task3_fit_predict(
    name: str,
    train,
    train_emb,
    test,
    test_emb,
    settings: Mapping[str, Any],
    *,
    preset: str = "selected",
    false_alarm_rate: float = 0.05,
    curve: bool = False,
    save_to: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Fit one streaming detector on the conformant train split, predict and score the test
    split; ``curve`` adds its trade-off curve and the coverage at 1/5/10% false alarms."""
    from ..task3 import make_detector, score_predictions
    from ..task3.selection import FALSE_ALARM_POINTS, coverage_at, tradeoff_curve

    t0 = time.perf_counter()
    det = make_detector(name, encoder=None, preset=preset, false_alarm_rate=false_alarm_rate, **settings)
    det.fit(train, embeddings=train_emb)
    preds = det.predict_many(test, embeddings=test_emb)
    pmap = {ex["dialogue_id"]: p for ex, p in zip(test, preds)}
    res = score_predictions(pmap, test)
    res["seconds"] = time.perf_counter() - t0
    res["settings"] = det.settings()
    res["preset"] = preset
    res["false_alarm_rate"] = false_alarm_rate
    th = det.thresholds
    res["threshold"] = next(iter(th.values())) if len(th) == 1 else None
    res["n_models"] = len(th)
    if curve:
        stats, keys = det.dialogue_statistics(test, test_emb)
        cur = tradeoff_curve(
            stats,
            keys,
            [ex["hallucination_type"] is not None for ex in test],
            {k: m.calibration_stats_ for k, m in det.models().items()},
            det.method,
        )
        res["curve"] = {
            "level": [None if np.isnan(v) else float(v) for v in cur["level"]],
            "cov_c": cur["cov_c"].tolist(),
            "cov_h": cur["cov_h"].tolist(),
        }
        res["coverage_at"] = {f"{a:g}": coverage_at(cur, a) for a in FALSE_ALARM_POINTS}
    if save_to is not None:
        det.save(save_to)
    return {"result": res, "predictions": pmap}


def _subsample_test(
    test: Sequence[Mapping[str, Any]],
    records_by_id: Mapping[str, Mapping[str, Any]],
    max_forks_per_source: int | None,
    seed: int,
) -> list[int]:
    from ..task3.selection import _subsample_forks

    recs = [{**ex, "source_id": records_by_id.get(ex["dialogue_id"], {}).get("source_id")} for ex in test]
    return _subsample_forks(recs, max_forks_per_source, seed)


def run_task3(
    corpus: Corpus,
    encoder: Any,
    detectors: Sequence[str] = TASK3_DETECTORS,
    seed: int = 0,
    order: int | None = None,
    progress: bool = True,
    save_dir: str | os.PathLike | None = None,
    *,
    preset: str = "selected",
    scope: str | None = None,
    false_alarm_rate: float = 0.05,
    select: bool = False,
    selection_kwargs: Mapping[str, Any] | None = None,
    ablations: bool = True,
    ablation_orders: Sequence[int] = TASK3_ABLATION_ORDERS,
    paper_table: bool = True,
    ablation_max_forks_per_source: int | None = None,
    workflow: Any = None,
) -> dict[str, Any]:
    """Fit each detector on the conformant train split, predict the test split, score (SPEC 8).

    Streaming detectors run with ``preset`` (``"selected"``: the packaged per-encoder settings;
    ``"paper"``: the paper's literal protocol); ``order`` and ``scope`` override the preset.
    ``select=True`` instead chooses every streaming detector's settings by cross-validation over
    the *train* sources (:func:`dialfork_metrics.task3.selection.select_settings`, with
    ``selection_kwargs``) and reports the choice under ``"selection"``; test labels are never read
    before scoring. Every streaming row carries its trade-off curve and its coverage at 1/5/10%
    false alarms. Further tables: ``"table9"``, the paper's protocol at N=3 (``paper_table``);
    ``"ablation_order"`` (N in ``ablation_orders``) and ``"ablation_scope"`` (task, pooled), each
    varying one setting of the main rows (``ablations``; on all conformant test dialogues and at
    most ``ablation_max_forks_per_source`` forks per source when given).

    Args:
        corpus: The :class:`~dialfork_metrics.bench.corpus.Corpus` (train and test splits).
        encoder: The encoder of the streaming detectors (``encode_dialogues``), its cache filled.
        detectors: Names of registered detectors (:mod:`dialfork_metrics.task3.registry`; default
            :data:`TASK3_DETECTORS`, the ``in_benchmark`` ones). Each is built with the keyword
            arguments its spec ``needs`` (``encoder``, ``workflow``, ``false_alarm_rate``, ``seed``)
            and fitted on the conformant train split; one that needs what the benchmark does not
            supply (labelled forks, an LLM) is skipped (logged, listed under ``"skipped"``).
        seed: Seed of the random baseline, the settings selection and the ablations' fork subsample.
        order: N of the streaming detectors' N-gram LM, overriding the preset; None: the preset's.
        progress: Show progress bars.
        save_dir: Folder where each fitted streaming detector is saved (one subfolder per name,
            ``+`` written ``_``); None: not saved.
        preset: Streaming settings: ``"selected"`` or ``"paper"``.
        scope: ``"task"`` or ``"pooled"``, overriding the preset; None: the preset's.
        false_alarm_rate: Target conformant false-alarm rate of the streaming detectors, in (0, 1).
        select: Choose the streaming settings by cross-validation over the train sources.
        selection_kwargs: Extra keyword arguments of ``select_settings`` (with ``select``).
        ablations: Add the N-order and scope ablation tables.
        ablation_orders: The N values of the order ablation.
        paper_table: Add ``"table9"`` (the paper's protocol at N=3).
        ablation_max_forks_per_source: Most forks per source in the ablations' test set; None: all.
        workflow: The workflow source of the detectors that need one (``wf``; object or spec);
            None: the one the corpus's manifest names, else ``$DIALFORK_STAR_DIR``; without any,
            they are skipped (logged, listed under ``"skipped"``).

    Returns:
        A dict with ``n_train``, ``n_test``, ``preset``, ``false_alarm_rate``, ``results``
        (detector -> :func:`~dialfork_metrics.task3.score_predictions` result plus ``seconds``;
        streaming rows also ``settings``, ``threshold``, ``n_models``, ``curve`` and
        ``coverage_at``), ``predictions`` (detector -> {dialogue_id: system turn or None}), and
        when they apply ``selection``, ``table9``, ``ablation_n_test``, ``ablation_order`` (N ->
        detector -> result) and ``ablation_scope`` (scope -> detector -> result).

    Raises:
        BenchError: The corpus has no conformant train dialogue or no test dialogue.
        ValueError: An unknown detector name (the message lists the registered ones) or bad
            streaming settings.
    """
    from dialfork_dataset.views import task3_examples

    from ..task3 import registry as detector_registry
    from ..task3 import score_predictions
    from ..task3.registry import BENCH_SUPPLIES
    from ..task3.streaming import SCOPES

    specs = {d: detector_registry.get(d) for d in detectors}  # an unknown name: before any work
    train = corpus.split("train", forks=False)
    test = task3_examples(corpus.split("test", forks=True))
    if not train or not test:
        raise BenchError(
            f"Task 3 needs a train and a test split; got {len(train)} train and {len(test)} test dialogues"
        )
    streaming = [d for d in detectors if specs[d].ngram]
    out: dict[str, Any] = {
        "n_train": len(train),
        "n_test": len(test),
        "preset": preset,
        "false_alarm_rate": false_alarm_rate,
    }
    train_emb = test_emb = None
    if streaming:
        train_emb = encoder.encode_dialogues(train)
        test_emb = encoder.encode_dialogues(test)
    overrides: dict[str, dict[str, Any]] = {d: {} for d in streaming}
    if select and streaming:
        from ..task3.selection import select_settings

        sel_recs = corpus.split("train", forks=True)  # train sources only: never the test split
        t0 = time.perf_counter()
        sel = select_settings(
            sel_recs,
            encoder.encode_dialogues(sel_recs),
            detectors=streaming,
            seed=seed,
            false_alarm_rate=false_alarm_rate,
            progress=progress,
            **(selection_kwargs or {}),
        )
        out["selection"] = {**sel.to_json(), "seconds": time.perf_counter() - t0}
        overrides = {d: sel.settings_for(d) for d in streaming}
    else:
        for d in streaming:
            if order is not None:
                overrides[d]["order"] = order
            if scope is not None:
                overrides[d]["scope"] = scope
    results: dict[str, Any] = {}
    predictions: dict[str, dict[str, int | None]] = {}
    wf_source: Any = None
    for name in detectors:
        spec = specs[name]
        if spec.ngram:
            r = _task3_fit_predict(
                name,
                train,
                train_emb,
                test,
                test_emb,
                overrides[name],
                preset=preset,
                false_alarm_rate=false_alarm_rate,
                curve=True,
                save_to=None if save_dir is None else Path(save_dir) / name.replace("+", "_"),
            )
            results[name], predictions[name] = r["result"], r["predictions"]
            continue
        unsupplied = [n for n in spec.needs if n not in BENCH_SUPPLIES]
        if unsupplied:
            why = (
                f"needs {', '.join(unsupplied)}, which the benchmark does not supply (fit and score it in Python; "
                "wf-sup: benchmarks/bench_task3_tracks.py scores it leave-task-out)"
            )
            logger.warning("Task 3: %s skipped: %s", name, why)
            out.setdefault("skipped", {})[name] = why
            continue
        available: dict[str, Any] = {"encoder": encoder, "false_alarm_rate": false_alarm_rate, "seed": seed}
        if "workflow" in spec.needs:
            from ..task3.workflow.detector import workflow_for_data

            wf_source = wf_source or workflow or workflow_for_data(corpus.origin)
            if wf_source is None:
                logger.warning(
                    "Task 3: %s skipped: no workflow source (pass --star or set $DIALFORK_STAR_DIR)", name
                )
                out.setdefault("skipped", {})[name] = "no workflow source (--star or $DIALFORK_STAR_DIR)"
                continue
            available["workflow"] = wf_source
        det = spec.build_from(available)  # each detector gets what its entry needs (BENCH_SUPPLIES)
        t0 = time.perf_counter()
        det.fit(train)
        preds = det.predict_many(test, show_progress=progress)
        predictions[name] = {ex["dialogue_id"]: p for ex, p in zip(test, preds)}
        res = score_predictions(predictions[name], test)
        res["seconds"] = time.perf_counter() - t0
        results[name] = res
    out["results"] = results
    out["predictions"] = predictions
    if streaming and paper_table:
        out["table9"] = {
            d: _task3_fit_predict(
                d,
                train,
                train_emb,
                test,
                test_emb,
                {"order": TABLE9_ORDER},
                preset="paper",
                false_alarm_rate=false_alarm_rate,
            )["result"]
            for d in streaming
        }
    if streaming and ablations:
        keep = _subsample_test(test, corpus.by_id, ablation_max_forks_per_source, seed)
        sub, sub_emb = [test[i] for i in keep], [test_emb[i] for i in keep]
        out["ablation_n_test"] = len(sub)
        base = {d: {**results[d]["settings"]} for d in streaming}
        out["ablation_order"] = {
            str(n): {
                d: _task3_fit_predict(
                    d,
                    train,
                    train_emb,
                    sub,
                    sub_emb,
                    {**base[d], "order": n},
                    preset=preset,
                    false_alarm_rate=false_alarm_rate,
                )["result"]
                for d in streaming
            }
            for n in ablation_orders
        }
        out["ablation_scope"] = {
            sc: {
                d: _task3_fit_predict(
                    d,
                    train,
                    train_emb,
                    sub,
                    sub_emb,
                    {**base[d], "scope": sc},
                    preset=preset,
                    false_alarm_rate=false_alarm_rate,
                )["result"]
                for d in streaming
            }
            for sc in SCOPES
        }
    return out


#: Appendix I's weight grid: the weight of each MAE component, from the uniform 0.25 to 0.40; each
#: coverage component gets ``0.5 - w`` (the paper's Score uses 0.35 / 0.15).
SWEEP_MAE_WEIGHTS: tuple[float, ...] = (0.25, 0.275, 0.30, 0.325, 0.35, 0.375, 0.40)


def task3_weight_sweep(
    results: Mapping[str, Mapping[str, Any]], mae_weights: Sequence[float] = SWEEP_MAE_WEIGHTS
) -> dict[str, Any]:
    """Appendix I: the Score of every detector under each weight vector ``(w, w, 0.5 - w, 0.5 - w)``
    for ``w`` in ``mae_weights``, recomputed from its MAEs, coverages and references
    (:func:`~dialfork_metrics.task3.scorer.score_from_stats`; the unit of the MAEs does not matter,
    only their ratio to the references), and the winner of each regime at each weight.

    ``results``: ``{detector: score_predictions(...) result}`` of one encoder. Returns
    ``{"weights": [[w1, w2, w3, w4], ...], "scores": {detector: [Score per weight]},
    "winners": {regime: [detector per weight]}, "stable": {regime: bool}}``, where ``stable`` says
    whether the regime's winner is the same detector at every weight (ties broken by name).

    Args:
        results: ``{detector: score_predictions(...) result}`` of one encoder; detectors whose
            references or coverages are None are left out.
        mae_weights: The MAE component weights ``w``, each in [0, 0.5].

    Returns:
        A dict with ``weights`` (one 4-list per ``w``), ``scores`` (detector -> Score per
        weight), ``winners`` (regime -> best detector per weight) and ``stable`` (regime -> bool).

    Raises:
        ValueError: A weight of ``mae_weights`` is outside [0, 0.5].
    """
    from ..task3.scorer import score_from_stats

    ws: list[list[float]] = []
    for w in mae_weights:
        if not 0.0 <= w <= 0.5:
            raise ValueError(f"MAE weight {w} outside [0, 0.5]: each coverage weight is 0.5 - w")
        ws.append([float(w), float(w), 0.5 - float(w), 0.5 - float(w)])
    scores: dict[str, list[float]] = {}
    for det, r in results.items():
        if (
            r.get("mae_h_ref") is None
            or r.get("mae_c_ref") is None
            or r.get("cov_h") is None
            or r.get("cov_c") is None
        ):
            continue
        scores[det] = [
            score_from_stats(
                r["mae_h"], r["cov_h"], r["mae_c"], r["cov_c"], r["mae_h_ref"], r["mae_c_ref"], weights=wv
            )
            for wv in ws
        ]
    winners: dict[str, list[str]] = {}
    for det in scores:
        winners.setdefault(regime(det), [])
    for reg in winners:
        dets = sorted(d for d in scores if regime(d) == reg)
        winners[reg] = [
            max(dets, key=lambda d, i=i: scores[d][i]) for i in range(len(ws))
        ]  # ties: first name
    return {
        "weights": ws,
        "scores": scores,
        "winners": winners,
        "stable": {reg: len(set(w)) == 1 for reg, w in winners.items()},
    }
