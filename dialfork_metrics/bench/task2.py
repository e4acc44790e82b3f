"""Task 2 (SPEC 6): dialogue-level distances per (source, type) unit, Table 3 and Table 7, and
user metrics (``--metric``)."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dialfork_dataset import taxonomy
from dialfork_dataset.registry import resolve
from dialfork_dataset.taxonomy import FORK_POSITIONS

from .. import registry
from ..methods import (
    TASK2_METHODS,
)
from ..stats import (
    bootstrap_column_means_ci,
    bootstrap_mean_ci,
    holm,
    paired_t_greater_test,
    ranking_tau,
    wilcoxon_greater_test,
)
from .common import BenchError, _check_methods, _unit_rng
from .corpus import Corpus
from .protocols import DEFAULT_N_REFERENCES, TASK2_PROTOCOLS, _source_key, cross_references

logger = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- Task 2
def run_task2(
    corpus: Corpus,
    encoder: Any,
    methods: Sequence[str] = TASK2_METHODS,
    seed: int = 0,
    custom: Mapping[str, Callable[[Any, Any], float]] | None = None,
    skipped: list[str] | None = None,
    protocol: str = "same-source",
    n_references: int = DEFAULT_N_REFERENCES,
) -> dict[str, Any]:
    """Task 2 per (source, type) unit: d_k per method and tau; summary per type.

    ``protocol`` (:mod:`~dialfork_metrics.bench.protocols`): ``"same-source"`` (the paper's)
    compares each fork with its own source D+; ``"cross"`` compares it with ``n_references``
    conformant dialogues of the same task from other sources (seeded, the same for the unit's four
    forks) and takes the mean distance, so no reference turn is shared with the fork. Under
    ``cross`` a unit whose task has no other source is skipped with a reason.

    Args:
        corpus: The :class:`~dialfork_metrics.bench.corpus.Corpus`; its units (a conformant
            source and its four forks of one type) come from
            :func:`dialfork_dataset.views.task2_quartets`.
        encoder: The encoder of the embedding-based methods (its cache is reused).
        methods: Task 2 method names (:data:`TASK2_METHODS`).
        seed: Seed of the random control.
        custom: User distances, name -> ``fn(source_record, fork_record) -> float``
            (:func:`load_custom_metric`); each becomes a row.
        skipped: A list that receives one message per unit that could not be built; None: a new list.
        protocol: ``"same-source"`` or ``"cross"``.
        n_references: References per source under ``"cross"`` (fewer when the task has fewer
            other sources).

    Returns:
        A dict with ``units`` (one row per unit and method: ``source_id``, ``type``, ``method``,
        ``distances`` d_1..d_4, ``tau``; under ``cross`` also ``references``, the reference
        dialogue ids), ``summary`` (:func:`summarise_task2`), ``methods`` (``methods`` then the
        custom names) and ``protocol`` (plus ``n_references`` under ``cross``).

    Raises:
        BenchError: An unknown method or protocol, or ``n_references`` below 1.
    """
    from dialfork_dataset.views import task2_quartets

    from ..dialogue import score_quartets

    _check_methods(methods, TASK2_METHODS, "Task 2")
    if protocol not in TASK2_PROTOCOLS:
        raise BenchError(f"unknown Task 2 protocol {protocol!r}; known: {', '.join(TASK2_PROTOCOLS)}")
    skipped = skipped if skipped is not None else []
    quartets = task2_quartets(corpus.records, skipped=skipped)
    if protocol == "cross":
        return _run_task2_cross(corpus, quartets, encoder, methods, seed, custom, skipped, n_references)
    core = [m for m in methods if registry.get(m).input != "seed"]  # the seeded Random is drawn here
    scored = score_quartets(quartets, methods=core, encoder=encoder) if quartets else []
    rows: list[dict[str, Any]] = []
    for q, s in zip(quartets, scored):
        for m in core:
            rows.append(
                {
                    "source_id": s["source_id"],
                    "type": s["type"],
                    "method": m,
                    "distances": s["distances"][m],
                    "tau": s["tau"][m],
                }
            )
        if "random" in methods:
            rows.append(
                {
                    "source_id": s["source_id"],
                    "type": s["type"],
                    "method": "random",
                    "distances": [
                        float(_unit_rng(seed, "task2", s["source_id"], s["type"], k).random())
                        for k in FORK_POSITIONS
                    ],
                    "tau": 0.0,
                }
            )
        for name, fn in (custom or {}).items():
            d = [float(fn(q["source"], q["forks"][k])) for k in FORK_POSITIONS]
            rows.append(
                {
                    "source_id": s["source_id"],
                    "type": s["type"],
                    "method": name,
                    "distances": d,
                    "tau": ranking_tau(d),
                }
            )
    all_methods = list(methods) + list(custom or {})
    return {
        "units": rows,
        "summary": summarise_task2(rows, all_methods),
        "methods": all_methods,
        "protocol": "same-source",
    }


def _run_task2_cross(
    corpus: Corpus,
    quartets: list[dict[str, Any]],
    encoder: Any,
    methods: Sequence[str],
    seed: int,
    custom: Mapping[str, Callable[[Any, Any], float]] | None,
    skipped: list[str],
    n_references: int,
) -> dict[str, Any]:
    """:func:`run_task2` under the cross protocol: each unit's four forks against its source's
    references (:func:`~dialfork_metrics.bench.protocols.cross_references`), d_k the mean over them."""
    from ..dialogue import score_quartets

    refs = cross_references(corpus.conformant, n_references, seed)
    kept, expanded = [], []
    for q in quartets:
        sid = q["source"]["dialogue_id"]
        rs = refs.get(_source_key(q["source"]), [])
        if not rs:
            msg = (
                f"Task 2 unit ({sid}, {q['type']}) under the cross protocol: task {q['source'].get('task')!r} has "
                f"no conformant dialogue from another source (give the task two sources or more)"
            )
            logger.warning("skipped %s", msg)
            skipped.append(msg)
            continue
        kept.append((q, rs))
        expanded += [{"source": r, "type": q["type"], "forks": q["forks"]} for r in rs]
    short = sorted({q["source"]["dialogue_id"] for q, rs in kept if len(rs) < n_references})
    if short:
        logger.warning(
            "Task 2 cross protocol: %d source(s) have fewer than %d other sources in their task and use "
            "all of them (e.g. %s)",
            len(short),
            n_references,
            short[0],
        )
    core = [m for m in methods if registry.get(m).input != "seed"]  # the seeded Random is drawn here
    scored = score_quartets(expanded, methods=core, encoder=encoder) if expanded else []
    rows: list[dict[str, Any]] = []
    i = 0
    for q, rs in kept:
        block, i = scored[i : i + len(rs)], i + len(rs)
        sid, h, ids = q["source"]["dialogue_id"], q["type"], [r["dialogue_id"] for r in rs]
        for m in core:
            d = [float(np.mean([b["distances"][m][j] for b in block])) for j in range(len(FORK_POSITIONS))]
            rows.append(
                {
                    "source_id": sid,
                    "type": h,
                    "method": m,
                    "distances": d,
                    "tau": ranking_tau(d),
                    "references": ids,
                }
            )
        if "random" in methods:
            rows.append(
                {
                    "source_id": sid,
                    "type": h,
                    "method": "random",
                    "references": ids,
                    "distances": [
                        float(_unit_rng(seed, "task2-cross", sid, h, k).random()) for k in FORK_POSITIONS
                    ],
                    "tau": 0.0,
                }
            )
        for name, fn in (custom or {}).items():
            d = [float(np.mean([fn(r, q["forks"][k]) for r in rs])) for k in FORK_POSITIONS]
            rows.append(
                {
                    "source_id": sid,
                    "type": h,
                    "method": name,
                    "distances": d,
                    "tau": ranking_tau(d),
                    "references": ids,
                }
            )
    all_methods = list(methods) + list(custom or {})
    return {
        "units": rows,
        "summary": summarise_task2(rows, all_methods),
        "methods": all_methods,
        "protocol": "cross",
        "n_references": n_references,
    }


def summarise_task2(rows: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    """Table 3 from the per-unit rows: mean tau per method and type, and mean distance per k.

    Args:
        rows: The ``units`` rows of :func:`run_task2`.
        methods: The methods to summarise, in table order.

    Returns:
        A dict with ``tau`` (method -> type or ``"Avg"`` -> mean tau, None without units;
        ``Avg`` is the mean over the types), ``mean_distance_by_k`` (method -> fork position
        k (1..4) -> mean d_k over all units) and ``n_units`` (distinct (source, type) units).
    """
    by = defaultdict(list)
    dist_k = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[(r["method"], r["type"])].append(r["tau"])
        for k, v in enumerate(r["distances"], 1):
            dist_k[r["method"]][k].append(v)
    table = {}
    for m in methods:
        table[m] = {h: (float(np.mean(by[(m, h)])) if by.get((m, h)) else None) for h in taxonomy.names()}
        vals = [v for v in table[m].values() if v is not None]
        table[m]["Avg"] = float(np.mean(vals)) if vals else None
    mean_by_k = {m: {k: float(np.mean(v)) for k, v in sorted(dist_k[m].items())} for m in methods}
    n_units = len({(r["source_id"], r["type"]) for r in rows})
    return {"tau": table, "mean_distance_by_k": mean_by_k, "n_units": n_units}


def distance_by_k(
    rows: Sequence[Mapping[str, Any]], methods: Sequence[str], n_resamples: int = 10_000, seed: int = 0
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Mean distance d_k per (method, type, fork position k), in the method's own units (not
    rescaled), with a percentile bootstrap 95% CI over the type's units (the units resampled
    jointly across methods and positions; :func:`~dialfork_metrics.stats.bootstrap_column_means_ci`).

    Returns ``{method: {type: {"mean": [4], "low": [4], "high": [4], "n": n_units}}}``; a type with
    fewer than two units has ``low``/``high`` equal to ``mean``.

    Args:
        rows: The ``units`` rows of :func:`run_task2` (one encoder).
        methods: The methods (a unit counts only when it has all of them).
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed (type i uses ``seed + i``).

    Returns:
        ``{method: {type: {"mean": [4], "low": [4], "high": [4], "n": n_units}}}``; types without
        a complete unit are absent.
    """
    dist: dict[tuple, dict[str, list[float]]] = defaultdict(dict)  # (source, type) -> method -> d_1..d_4
    for r in rows:
        dist[(r["source_id"], r["type"])][r["method"]] = list(r["distances"])
    out: dict[str, dict[str, dict[str, list[float]]]] = {m: {} for m in methods}
    for i, h in enumerate(taxonomy.names()):
        keys = sorted(k for k in dist if k[1] == h and all(m in dist[k] for m in methods))
        if not keys:
            continue
        X = np.array(
            [[v for m in methods for v in dist[k][m]] for k in keys], dtype=float
        )  # (units, 4 * methods)
        mean = X.mean(axis=0)
        if len(keys) >= 2:
            lo, hi = bootstrap_column_means_ci(X, n_resamples=n_resamples, seed=seed + i, batch=100)
        else:
            lo, hi = mean, mean
        for j, m in enumerate(methods):
            sl = slice(4 * j, 4 * j + 4)
            out[m][h] = {
                "mean": mean[sl].tolist(),
                "low": np.asarray(lo)[sl].tolist(),
                "high": np.asarray(hi)[sl].tolist(),
                "n": len(keys),
            }
    return out


def task2_significance(
    per_encoder: Mapping[str, Mapping[str, Any]],
    reference: str = "flowscore",
    n_resamples: int = 10_000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Table 7: FlowScore tau minus each method's tau per unit; one-sided Wilcoxon (statistic ``W``,
    the sum of the positive ranks) and paired t-test (statistic ``t``), Holm-corrected across
    encoders within each (method, test); bootstrap 95% CI.

    Args:
        per_encoder: Encoder name -> :func:`run_task2` result (``units`` and ``methods``).
        reference: The method tested against the others.
        n_resamples: Bootstrap resamples of the CI of the mean difference.
        seed: Bootstrap seed.

    Returns:
        One dict per (encoder, method) with two shared units or more: ``encoder``, ``method``,
        ``n_units``, ``mean_diff``, ``ci_low``, ``ci_high``, ``W``, ``p_wilcoxon``, ``t`` (None
        when the differences are constant), ``p_ttest``, ``p_wilcoxon_holm`` and ``p_ttest_holm``.
        Encoders without ``reference`` are left out.
    """
    out: list[dict[str, Any]] = []
    for enc, res in per_encoder.items():
        taus: dict[str, dict[tuple, float]] = defaultdict(dict)
        for r in res["units"]:
            taus[r["method"]][(r["source_id"], r["type"])] = r["tau"]
        if reference not in taus:
            continue
        for m in res["methods"]:
            if m == reference:
                continue
            keys = sorted(set(taus[reference]) & set(taus[m]))
            if len(keys) < 2:
                continue
            diff = np.array([taus[reference][k] - taus[m][k] for k in keys])
            lo, hi = bootstrap_mean_ci(diff, n_resamples=n_resamples, seed=seed)
            w, p_w = wilcoxon_greater_test(diff)
            t, p_t = paired_t_greater_test(diff)
            out.append(
                {
                    "encoder": enc,
                    "method": m,
                    "n_units": int(diff.size),
                    "mean_diff": float(diff.mean()),
                    "ci_low": lo,
                    "ci_high": hi,
                    "W": w,
                    "p_wilcoxon": p_w,
                    "t": t if np.isfinite(t) else None,
                    "p_ttest": p_t,
                }
            )  # constant differences: t undefined
    for test in ("p_wilcoxon", "p_ttest"):
        for m in {r["method"] for r in out}:
            grp = [r for r in out if r["method"] == m]
            for r, p in zip(grp, holm([r[test] for r in grp])):
                r[test + "_holm"] = p
    return out


def load_custom_metric(spec: str) -> tuple[str, Callable[[Any, Any], float]]:
    """``NAME=module.path:function`` (a callable ``(ref, cand) -> distance``) or a path to an
    evaluate module folder/script (its ``compute(predictions=[cand], references=[ref])`` must
    return a dict holding a per-pair list under a plural key such as ``"scores"``).

    Args:
        spec: ``NAME=module.path:function``, ``NAME=PATH`` or ``PATH`` (an evaluate module; the
            name is then the path's stem).

    Returns:
        ``(name, fn)``: ``fn(ref_record, cand_record) -> float`` is the distance. For an evaluate
        module it reads ``"scores"`` or ``"distances"``, else the first numeric value of the
        module's output.

    Raises:
        BenchError: The function cannot be imported, or ``spec`` is neither form; the returned
            function raises it when an evaluate module returns no numeric value.
    """
    name, _, target = spec.partition("=")
    if not target:
        target, name = spec, Path(spec.rstrip("/")).stem
    if ":" in target and not Path(target).exists():
        return name, resolve(target, f"--metric {spec!r}", error=BenchError)
    if Path(target).exists():
        import evaluate

        module = evaluate.load(str(target))

        def f(ref, cand, _m=module):
            out = _m.compute(predictions=[cand["turns"]], references=[ref["turns"]])
            for key in ("scores", "distances"):
                if key in out:
                    return float(out[key][0])
            vals = [v for v in out.values() if isinstance(v, int | float)]
            if not vals:
                raise BenchError(f"evaluate module {target} returned no per-pair value: {sorted(out)}")
            return float(vals[0])

        return name, f
    raise BenchError(f"--metric {spec!r}: expected NAME=module:function or the path of an evaluate module")
