"""Task 1 (SPEC 5): set-level distances per (task, type) unit, Kendall tau, exact recovery and
the statistics of Tables 2 and Appendix J."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import FORK_POSITIONS

from .. import registry
from ..methods import (
    TASK1_COMPARED,
    TASK1_METHODS,
    TASK1_REFERENCE,
)
from ..stats import (
    bootstrap_column_means_ci,
    bootstrap_mean_ci,
    exact_recovery,
    fisher_combine,
    holm,
    ranking_tau,
    unit_permutation_pvalue,
    wilcoxon_two_sided,
)
from .common import BenchError, _check_methods, _CountingFilter, _summarised, _unit_rng
from .corpus import Corpus
from .protocols import TASK2_PROTOCOLS, task1_cross_units

logger = logging.getLogger(__name__)


def run_task1(
    corpus: Corpus,
    encoder: Any,
    methods: Sequence[str] = TASK1_METHODS,
    seed: int = 0,
    flowkl_kwargs: Mapping[str, Any] | None = None,
    prd_kwargs: Mapping[str, Any] | None = None,
    skipped: list[str] | None = None,
    progress: bool = True,
    pair_encoder: Any = None,
    protocol: str = "same-source",
) -> dict[str, Any]:
    """Task 1 per (task, type) unit: d_k for each method, tau, exact recovery; with statistics.

    ``protocol``: ``"same-source"`` (the paper's: the task's whole conformant set, which holds the
    forks' sources, against each fork set) or ``"cross"`` (the task's sources split in two seeded
    halves, the conformant dialogues of one half against the forks of the other;
    :func:`~dialfork_metrics.bench.protocols.task1_cross_units`).

    ``encoder`` embeds the turns of FlowKL's graph. ``pair_encoder``: a
    :class:`~dialfork_metrics.pair_encoder.PairEncoder` for FBD and PRD, or a mapping
    ``{"fbd": ..., "prd": ...}`` giving each its own (default: one over ``encoder``'s model);
    pass one that already encoded the corpus to reuse its cache.

    Args:
        corpus: The :class:`~dialfork_metrics.bench.corpus.Corpus`; its (task, type) units come
            from :func:`dialfork_dataset.views.task1_sets`.
        encoder: The encoder of FlowKL's graph (turn embeddings).
        methods: Task 1 method names (:data:`TASK1_METHODS`).
        seed: Seed of PRD and the random control.
        flowkl_kwargs: Keyword arguments of FlowKL; None: its defaults.
        prd_kwargs: Keyword arguments of PRD (on top of ``seed``); None: its defaults.
        skipped: A list that receives one message per unit that could not be built; None: a new list.
        progress: Show a progress bar over the units.
        pair_encoder: A ``PairEncoder``, an encoder name, or a mapping ``{"fbd": ..., "prd": ...}``
            of those; None: one over ``encoder``.
        protocol: ``"same-source"`` or ``"cross"``.

    Returns:
        A dict with ``units`` (one row per unit and method: ``task``, ``type``, ``method``,
        ``distances`` d_1..d_4, ``tau``, ``exact``, ``p_perm``; the last two None for
        ``random``), ``summary`` (:func:`summarise_task1`), ``graphs`` (task -> FlowKL's fitted
        flow graph), ``fbd_small_n_sets`` (sets whose FBD covariance was singular) and
        ``protocol``.

    Raises:
        BenchError: An unknown method or protocol, or a ``pair_encoder`` mapping with a key other
            than ``fbd``/``prd``.
    """
    from dialfork_dataset.views import task1_sets

    _check_methods(methods, TASK1_METHODS, "Task 1")
    if protocol not in TASK2_PROTOCOLS:
        raise BenchError(f"unknown Task 1 protocol {protocol!r}; known: {', '.join(TASK2_PROTOCOLS)}")
    skipped = skipped if skipped is not None else []
    units = task1_sets(corpus.records, skipped=skipped)
    if protocol == "cross":
        units = task1_cross_units(units, seed=seed, skipped=skipped)
    graphs: dict[str, Any] = {}
    need_pairs = [m for m in methods if "pair_encoder" in registry.get(m, "set").needs]
    pair_encoders = _pair_encoders_by_method(pair_encoder, need_pairs, encoder)
    small_n = _CountingFilter("covariance is singular")
    logging.getLogger("dialfork_metrics.setlevel").addFilter(small_n)
    try:
        with _summarised(f"Task 1 ({len(units)} units)"):
            rows = _task1_rows(
                units, methods, encoder, seed, flowkl_kwargs, prd_kwargs, graphs, pair_encoders, progress
            )
    finally:
        logging.getLogger("dialfork_metrics.setlevel").removeFilter(small_n)
    if small_n.count:
        logger.warning(
            "FBD: %d set(s) had no more pair embeddings than dimensions: their covariance is singular and "
            "the Frechet estimate is biased at small n (SPEC 7); compare FBD only between sets of similar size",
            small_n.count,
        )
    return {
        "units": rows,
        "summary": summarise_task1(rows, methods),
        "graphs": graphs,
        "fbd_small_n_sets": small_n.count,
        "protocol": protocol,
    }


def _pair_encoders_by_method(pair_encoder: Any, methods: Sequence[str], encoder: Any) -> dict[str, Any]:
    """``{"fbd": PairEncoder, "prd": PairEncoder}`` for the set metrics in ``methods``."""
    if isinstance(pair_encoder, Mapping):
        known = registry.names("set", needs="pair_encoder")
        unknown = set(pair_encoder) - set(known)
        if unknown:
            raise BenchError(
                f"pair encoders are given per metric ({', '.join(known)}), got {sorted(unknown)}"
            )
        spec = {m: pair_encoder.get(m) or encoder for m in methods}
    else:
        spec = {m: pair_encoder if pair_encoder is not None else encoder for m in methods}
    made: dict[Any, Any] = {}  # one PairEncoder per distinct spec (a name is loaded once)
    out = {}
    for m, v in spec.items():
        k = v if isinstance(v, str) else id(v)
        if k not in made:
            made[k] = _pair_encoder(v)
        out[m] = made[k]
    return out


@dataclass
class Task1Context:
    """What a set metric's unit function (its registry ``core``) reads besides the two sets.

    Args:
        encoder: The turn encoder (FlowKL's graph).
        seed: The benchmark's seed (PRD).
        flowkl_kwargs: FlowKL's keyword arguments.
        prd_kwargs: PRD's keyword arguments (on top of ``seed``).
        pair_encoders: Metric name -> its ``PairEncoder`` (the metrics that need one).
        graphs: Task -> FlowKL's fitted graph (filled as units are scored).
        cache: Reference-set pair embeddings, reused across a task's units.
    """

    encoder: Any
    seed: int = 0
    flowkl_kwargs: Mapping[str, Any] = field(default_factory=dict)
    prd_kwargs: Mapping[str, Any] = field(default_factory=dict)
    pair_encoders: Mapping[str, Any] = field(default_factory=dict)
    graphs: dict = field(default_factory=dict)
    cache: dict = field(default_factory=dict)


def flowkl_unit(ctx: Task1Context, task: str, ref, tgt) -> float:
    """FlowKL of one Task 1 unit (the registry's core of ``flowkl``).

    Args:
        ctx: The benchmark's :class:`Task1Context`.
        task: The task (one flow graph per task).
        ref: The reference set (the task's conformant dialogues).
        tgt: The fork set.

    Returns:
        The distance.
    """
    return _flowkl(task, ref, tgt, ctx.encoder, ctx.graphs, ctx.flowkl_kwargs)


def fbd_unit(ctx: Task1Context, task: str, ref, tgt) -> float:
    """FBD of one Task 1 unit (the registry's core of ``fbd``); arguments as :func:`flowkl_unit`.

    Args:
        ctx: The benchmark's :class:`Task1Context`.
        task: The task (its reference embeddings are cached).
        ref: The reference set.
        tgt: The fork set.

    Returns:
        The distance.
    """
    return _set_metric("fbd", task, ref, tgt, ctx.pair_encoders["fbd"], ctx.cache)


def prd_unit(ctx: Task1Context, task: str, ref, tgt) -> float:
    """PRD of one Task 1 unit (the registry's core of ``prd``), seeded with the benchmark's seed.

    Args:
        ctx: The benchmark's :class:`Task1Context`.
        task: The task (its reference embeddings are cached).
        ref: The reference set.
        tgt: The fork set.

    Returns:
        The distance.
    """
    return _set_metric(
        "prd", task, ref, tgt, ctx.pair_encoders["prd"], ctx.cache, {"seed": ctx.seed, **ctx.prd_kwargs}
    )


def turn_count_unit(ctx: Task1Context, task: str, ref, tgt) -> float:
    """|mean turns of the fork set - mean turns of the reference set| (Task 1's turn-count control).

    Args:
        ctx: Unused (the uniform signature of unit functions).
        task: Unused.
        ref: The reference set.
        tgt: The fork set.

    Returns:
        The absolute difference.
    """
    return abs(_mean_len(tgt, "turns") - _mean_len(ref, "turns"))


def word_count_unit(ctx: Task1Context, task: str, ref, tgt) -> float:
    """|mean words of the fork set - mean words of the reference set| (Task 1's word-count control).

    Args:
        ctx: Unused (the uniform signature of unit functions).
        task: Unused.
        ref: The reference set.
        tgt: The fork set.

    Returns:
        The absolute difference.
    """
    return abs(_mean_len(tgt, "words") - _mean_len(ref, "words"))


def _task1_rows(
    units, methods, encoder, seed, flowkl_kwargs, prd_kwargs, graphs, pair_encoders, progress
) -> list[dict]:
    from tqdm.auto import tqdm

    ctx = Task1Context(encoder, seed, flowkl_kwargs or {}, prd_kwargs or {}, pair_encoders, graphs)
    cores = {m: registry.get(m, "set").core_fn() for m in methods if registry.get(m, "set").core is not None}
    rows: list[dict[str, Any]] = []
    for (task, h), unit in tqdm(sorted(units.items()), desc="Task 1 units", disable=not progress):
        ref = unit["reference"]
        d: dict[str, list[float]] = {m: [] for m in methods}
        for k in FORK_POSITIONS:
            tgt = unit[k]
            for m in methods:
                if m in cores:
                    d[m].append(float(cores[m](ctx, task, ref, tgt)))
                else:  # the seeded control (Random)
                    d[m].append(float(_unit_rng(seed, "task1", task, h, k).random()))
        for m in methods:
            tau = 0.0 if m == "random" else ranking_tau(d[m])  # Random = its expectation, 0 exactly
            rows.append(
                {
                    "task": task,
                    "type": h,
                    "method": m,
                    "distances": d[m],
                    "tau": tau,
                    "exact": exact_recovery(d[m]) if m != "random" else None,
                    "p_perm": unit_permutation_pvalue(d[m]) if m != "random" else None,
                }
            )
    return rows


def summarise_task1(rows: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    """Table 2 from the per-unit rows: mean tau per method and type, exact recovery, each method
    against chance (Fisher-combined permutation p-values), and every pair of methods compared.

    Args:
        rows: The ``units`` rows of :func:`run_task1` (``task``, ``type``, ``method``, ``tau``,
            ``exact``, ``p_perm``).
        methods: The methods to summarise, in table order.

    Returns:
        A dict with ``tau`` (method -> type or ``"Avg"`` -> mean tau, None without units),
        ``exact_recovery`` (method -> share of units recovered exactly; 1/24 for ``random``),
        ``fisher_p`` (method -> Fisher-combined p-value; None for ``random``), ``pairwise``
        (one dict per pair of non-random methods: ``a``, ``b``, ``n_units``, ``mean_diff`` of tau,
        two-sided paired Wilcoxon ``p`` and ``p_holm`` across pairs) and ``n_units``.
    """
    by = defaultdict(list)
    for r in rows:
        by[(r["method"], r["type"])].append(r)
    table: dict[str, dict[str, float | None]] = {}
    exact: dict[str, float | None] = {}
    fisher: dict[str, float | None] = {}
    for m in methods:
        table[m] = {}
        for h in taxonomy.names():
            taus = [r["tau"] for r in by.get((m, h), [])]
            table[m][h] = float(np.mean(taus)) if taus else None
        vals = [v for v in table[m].values() if v is not None]
        table[m]["Avg"] = float(np.mean(vals)) if vals else None
        mrows = [r for r in rows if r["method"] == m]
        if m == "random":
            exact[m] = 1 / 24
            fisher[m] = None
        else:
            exact[m] = float(np.mean([r["exact"] for r in mrows])) if mrows else None
            fisher[m] = fisher_combine([r["p_perm"] for r in mrows]) if mrows else None
    # pairwise: paired Wilcoxon over units (two-sided), Holm across pairs
    real = [m for m in methods if m != "random"]
    unit_tau = {m: {(r["task"], r["type"]): r["tau"] for r in rows if r["method"] == m} for m in methods}
    pairs, pvals = [], []
    for i, a in enumerate(real):
        for b in real[i + 1 :]:
            keys = sorted(set(unit_tau[a]) & set(unit_tau[b]))
            diff = np.array([unit_tau[a][k] - unit_tau[b][k] for k in keys])
            if diff.size == 0:
                continue
            p = wilcoxon_two_sided(diff)
            pairs.append({"a": a, "b": b, "n_units": int(diff.size), "mean_diff": float(diff.mean()), "p": p})
            pvals.append(p)
    for pr, ph in zip(pairs, holm(pvals)):
        pr["p_holm"] = ph
    n_units = len({(r["task"], r["type"]) for r in rows})
    return {"tau": table, "exact_recovery": exact, "fisher_p": fisher, "pairwise": pairs, "n_units": n_units}


def task1_comparisons(
    rows: Sequence[Mapping[str, Any]],
    reference: str = TASK1_REFERENCE,
    against: Sequence[str] = TASK1_COMPARED,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """Appendix J: ``reference`` (FlowKL) against each method of ``against`` over the shared
    (task, type) units: mean Delta tau = tau(reference) - tau(method), its paired bootstrap 95% CI
    (:func:`~dialfork_metrics.stats.bootstrap_mean_ci`, seeded), the two-sided paired Wilcoxon
    p-value and its Holm correction within this family only (the paper: FlowKL vs FBD,
    -0.031 [-0.080, 0.017], Holm p = 0.43). Methods absent from ``rows`` are left out.

    Args:
        rows: The ``units`` rows of :func:`run_task1`.
        reference: The method compared with the others (FlowKL).
        against: The methods it is compared with (one Holm family).
        n_resamples: Bootstrap resamples of the CIs.
        seed: Bootstrap seed.

    Returns:
        One dict per compared method with two shared units or more: ``a`` (the reference), ``b``,
        ``n_units``, ``mean_diff`` (mean Delta tau), ``ci_low``, ``ci_high``, ``p`` and
        ``p_holm``; empty when ``reference`` is not in ``rows``.
    """
    unit_tau: dict[str, dict[tuple, float]] = defaultdict(dict)
    for r in rows:
        unit_tau[r["method"]][(r["task"], r["type"])] = r["tau"]
    out: list[dict[str, Any]] = []
    if reference not in unit_tau:
        return out
    for m in against:
        if m == reference or m not in unit_tau:
            continue
        keys = sorted(set(unit_tau[reference]) & set(unit_tau[m]))
        if len(keys) < 2:
            continue
        diff = np.array([unit_tau[reference][k] - unit_tau[m][k] for k in keys])
        lo, hi = bootstrap_mean_ci(diff, n_resamples=n_resamples, seed=seed)
        out.append(
            {
                "a": reference,
                "b": m,
                "n_units": int(diff.size),
                "mean_diff": float(diff.mean()),
                "ci_low": lo,
                "ci_high": hi,
                "p": wilcoxon_two_sided(diff),
            }
        )
    for r, ph in zip(out, holm([r["p"] for r in out])):
        r["p_holm"] = ph
    return out


def tau_confidence_intervals(
    rows: Sequence[Mapping[str, Any]],
    methods: Sequence[str],
    group: str,
    n_resamples: int = 10_000,
    seed: int = 0,
) -> dict[str, dict[str, list[float] | None]]:
    """Percentile bootstrap 95% CIs of each cell of a tau table (Tables 2 and 3).

    Per type: the mean tau over that type's units, the units resampled jointly across methods
    (:func:`~dialfork_metrics.stats.bootstrap_column_means_ci`). ``Avg``: the groups (``group``:
    ``"task"`` for Task 1, ``"source_id"`` for Task 2) that have every type are resampled,
    the statistic being the mean of their per-group average tau. A cell without two units is
    ``None``. Returns ``{method: {type or "Avg": [low, high] or None}}``.

    Args:
        rows: Per-unit tau rows with ``method``, ``type``, ``tau`` and the ``group`` key.
        methods: The table's methods (a unit counts only when it has all of them).
        group: The key grouping units for the ``Avg`` column (``"task"`` or ``"source_id"``).
        n_resamples: Bootstrap resamples.
        seed: Bootstrap seed (type i uses ``seed + i``; ``Avg`` ``seed + 4``).

    Returns:
        ``{method: {type or "Avg": [low, high] or None}}``; ``Avg`` is None with fewer than two
        complete groups.
    """
    tau: dict[tuple, dict[str, float]] = defaultdict(dict)  # (group, type) -> method -> tau
    for r in rows:
        tau[(r[group], r["type"])][r["method"]] = r["tau"]
    out: dict[str, dict[str, list[float] | None]] = {m: {} for m in methods}
    for i, h in enumerate(taxonomy.names()):
        keys = sorted(k for k in tau if k[1] == h and all(m in tau[k] for m in methods))
        if len(keys) < 2:
            for m in methods:
                out[m][h] = None
            continue
        X = np.array([[tau[k][m] for m in methods] for k in keys])
        lo, hi = bootstrap_column_means_ci(X, n_resamples=n_resamples, seed=seed + i, batch=200)
        for j, m in enumerate(methods):
            out[m][h] = [float(lo[j]), float(hi[j])]
    groups = sorted(
        {
            k[0]
            for k in tau
            if all((k[0], h) in tau and all(m in tau[(k[0], h)] for m in methods) for h in taxonomy.names())
        }
    )
    if len(groups) >= 2:
        X = np.array([[np.mean([tau[(g, h)][m] for h in taxonomy.names()]) for m in methods] for g in groups])
        lo, hi = bootstrap_column_means_ci(
            X, n_resamples=n_resamples, seed=seed + len(taxonomy.names()), batch=200
        )
        for j, m in enumerate(methods):
            out[m]["Avg"] = [float(lo[j]), float(hi[j])]
    else:
        for m in methods:
            out[m]["Avg"] = None
    return out


def _mean_len(dialogues: Sequence[Mapping[str, Any]], what: str) -> float:
    if what == "turns":
        return float(np.mean([len(d["turns"]) for d in dialogues]))
    return float(np.mean([sum(len(t["text"].split()) for t in d["turns"]) for d in dialogues]))


_KDE_OPTIONS = ("grid_size", "density_floor", "bw_method")


def _flowkl(task: str, ref, tgt, encoder, graphs: dict, kwargs: Mapping[str, Any]) -> float:
    """FlowKL(D+, D^h_k) with the task's graph and reference likelihoods computed once for its 16 units
    (the same numbers as :func:`~dialfork_metrics.flowgraph.flowkl` with that graph)."""
    from ..flowgraph import FlowGraph, flowkl_from_likelihoods

    kde = {k: v for k, v in kwargs.items() if k in _KDE_OPTIONS}
    opts = {k: v for k, v in kwargs.items() if k not in _KDE_OPTIONS and k != "distance_threshold"}
    if task not in graphs:
        g = FlowGraph(encoder=encoder, distance_threshold=kwargs.get("distance_threshold", 0.55)).fit(ref)
        graphs[task] = g
        graphs[("l_ref", task)] = g.likelihoods(ref, set_name="reference set", **opts)
    g, l_ref = graphs[task], graphs[("l_ref", task)]
    return float(flowkl_from_likelihoods(l_ref, g.likelihoods(tgt, set_name="target set", **opts), **kde))


def _pair_encoder(encoder: Any, progress: bool = True):
    from ..pair_encoder import pair_encoder_for

    return pair_encoder_for(encoder, show_progress=None if progress else False)


def _set_metric(
    name: str, task: str, ref, tgt, pair_encoder, cache: dict, kwargs: Mapping[str, Any] | None = None
) -> float:
    from ..setlevel import fbd_from_embeddings, prd_from_embeddings

    def emb(dialogues):
        return pair_encoder.encode_sets(dialogues)

    key = (id(pair_encoder), "ref", task)
    X = cache.get(key)
    if X is None:
        X = cache[key] = emb(ref)
    Y = emb(tgt)
    if name == "fbd":
        return float(fbd_from_embeddings(X, Y))
    return float(prd_from_embeddings(X, Y, **(kwargs or {})))
