"""One-command benchmark: the paper's Tables 2, 3, 4, 7 and 9 on any DialFork corpus.

``python -m dialfork_metrics.bench --data DIR_or_HUB_ID --tasks 1,2,3 --encoders minilm --out reports/``

* Task 1 (SPEC 5): FlowKL, FBD, PRD and the controls per (task, type) unit, each set metric with
  its own encoder if asked (``--task1-encoder``, ``--pair-encoder``); Kendall tau per type and Avg
  with bootstrap CIs; exact recovery; each method against chance (exact per-unit permutation
  test, Fisher-combined); Appendix J: FlowKL against each method (paired bootstrap CI of
  Delta tau, paired Wilcoxon, Holm within that family).
* Task 2 (SPEC 6), per encoder: Mean, Full, FlowDTW, FlowScore, the controls and any user
  metric; Table 7: FlowScore against each method (one-sided Wilcoxon and paired t-test, Holm
  across encoders within each test, paired bootstrap 95% CI with 10,000 seeded resamples).
* Task 3 (SPEC 8): trivial baselines and the four streaming detectors per encoder (Table 9),
  MAEs in system turns and in all turns; Appendix I: the Score under a grid of weights.

Each encoder encodes every unique turn (and transcript) of the corpus once, up front; every
task then reads the encoder's cache. Outputs: Markdown tables in the paper's layout, CSV,
JSON (package versions, encoders, seeds, corpus fingerprint, timings), PNG plots, and the flow
graph of one task (PNG + GraphML). The pure computations live in the ``run_task*`` functions;
:func:`main` is the CLI.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import logging
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from dialfork_dataset.records import HALLUCINATION_TYPES

from .stats import (
    bootstrap_column_means_ci,
    bootstrap_mean_ci,
    exact_recovery,
    fisher_combine,
    holm,
    paired_t_greater_test,
    ranking_tau,
    unit_permutation_pvalue,
    wilcoxon_greater_test,
    wilcoxon_two_sided,
)

logger = logging.getLogger(__name__)

TASK1_METHODS: tuple[str, ...] = ("flowkl", "fbd", "prd", "turn_count_diff", "word_count_diff", "random")
TASK2_METHODS: tuple[str, ...] = ("mean_turn", "full_dialog", "flowdtw", "flowscore", "turn_count_diff",
                                  "word_count_diff", "shared_prefix", "random")
TASK3_DETECTORS: tuple[str, ...] = ("first", "last", "random", "it", "ss", "it+nc", "ss+nc")
#: PRD in the benchmark (ours): SPEC 7's 10 clusterings averaged, each a full k-means (Lloyd) with one
#: k-means++ start: the run-averaging already smooths the initialisation, and it is ~10x cheaper than
#: Sajjadi et al.'s 10 mini-batch restarts per run (``--prd-kmeans minibatch --prd-n-init 10``).
DEFAULT_PRD: dict[str, Any] = {"num_runs": 10, "n_init": 1, "kmeans": "full"}
LABELS = {
    "flowkl": "FlowKL", "fbd": "FBD", "prd": "PRD", "turn_count_diff": "Turn-count diff",
    "word_count_diff": "Word-count diff", "random": "Random", "mean_turn": "Mean", "full_dialog": "Full",
    "flowdtw": "FlowDTW", "flowscore": "FlowScore", "shared_prefix": "Shared prefix",
    "first": "Always first", "last": "Always last", "it": "IT", "ss": "SS", "it+nc": "IT+NC", "ss+nc": "SS+NC",
}
TYPES = HALLUCINATION_TYPES


class _InfoSummary(logging.Filter):
    """Swallow a stage's per-unit INFO lines and count them by kind (``fragment -> label``);
    :func:`_summarised` then logs one line per stage instead of one per unit. Warnings pass."""

    def __init__(self, kinds: Mapping[str, str]):
        super().__init__()
        self.kinds = dict(kinds)
        self.counts: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        msg = record.getMessage()
        for fragment, label in self.kinds.items():
            if fragment in msg:
                self.counts[label] = self.counts.get(label, 0) + 1
                return False
        return True


#: Per-unit INFO lines of the set-level metrics, summarised once per stage by the benchmark.
UNIT_LINES = {
    "unbalanced sets": "PRD comparisons of unbalanced sets (reference and target sizes differ: the clustering "
                       "leans towards the larger set)",
    "FBD = ": "FBD values",
    "FlowGraph: ": "FlowGraph node sets",
    "have no known transition": "sets with dialogues without a known FlowGraph transition (L = 0)",
    "has zero variance": "FlowKL sets of zero variance (Gaussian fallback)",
}


@contextmanager
def _summarised(stage: str, kinds: Mapping[str, str] = UNIT_LINES,
                loggers: Sequence[str] = ("dialfork_metrics.setlevel", "dialfork_metrics.flowgraph")):
    """One INFO line for ``stage`` counting the per-unit lines of ``kinds`` it swallowed."""
    f = _InfoSummary(kinds)
    for name in loggers:
        logging.getLogger(name).addFilter(f)
    try:
        yield f
    finally:
        for name in loggers:
            logging.getLogger(name).removeFilter(f)
    if f.counts:
        logger.info("%s: %s", stage, "; ".join(f"{n} {label}" for label, n in f.counts.items()))


class _CountingFilter(logging.Filter):
    """Swallow a repeated warning (e.g. FBD's small-n note, once per set) and count it."""

    def __init__(self, fragment: str):
        super().__init__()
        self.fragment = fragment
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if self.fragment in record.getMessage():
            self.count += 1
            return False
        return True


class BenchError(ValueError):
    """A bad benchmark request (unknown task, encoder or method; unusable corpus)."""


# ----------------------------------------------------------------------------- corpus
class Corpus:
    """All records of a corpus plus its train/test partition by source."""

    def __init__(self, records: list[dict[str, Any]], assignment: Mapping[str, str], origin: str):
        self.records = records
        self.assignment = dict(assignment)
        self.origin = origin
        self.by_id = {r["dialogue_id"]: r for r in records}

    @property
    def conformant(self) -> list[dict[str, Any]]:
        return [r for r in self.records if r["hallucination_type"] is None]

    def split(self, name: str, forks: bool) -> list[dict[str, Any]]:
        return [r for r in self.records if self.assignment.get(r["source_id"]) == name
                and (forks or r["hallucination_type"] is None)]

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for r in sorted(self.records, key=lambda r: r["dialogue_id"]):
            h.update(json.dumps([r["dialogue_id"], r["turns"]], ensure_ascii=False, sort_keys=True).encode())
        return h.hexdigest()


def load_corpus(data: str | os.PathLike, skipped: list[str] | None = None) -> Corpus:
    """A generator output folder, an exported Hub layout folder, or a Hub dataset id.

    A layout missing a config is read from what is there, with a warning per missing part
    (appended to ``skipped``).
    """
    from dialfork_dataset.builder import load_records, split_sources
    from dialfork_dataset.records import normalize_record

    skipped = skipped if skipped is not None else []
    p = Path(data)
    if p.exists() and not (p / "data").is_dir():
        recs = load_records(p)
        return Corpus(recs, split_sources(recs), str(p))
    records: dict[str, dict[str, Any]] = {}
    assignment: dict[str, str] = {}
    found = False
    for cfg in ("conformant", "forked"):
        for split in ("train", "test"):
            try:
                rows = _load_config_split(data, cfg, split)
            except Exception as e:  # noqa: BLE001 - a missing config is reported, not fatal
                msg = f"config {cfg!r} split {split!r} of {data}: not loaded ({type(e).__name__}: {e})"
                logger.warning("skipped %s", msg)
                skipped.append(msg)
                continue
            found = True
            for r in rows:
                r = normalize_record(r)
                records[r["dialogue_id"]] = r
                if r["hallucination_type"] is None:
                    assignment[r["dialogue_id"]] = split
    if not found:
        raise BenchError(f"{data}: neither a generator output folder nor a DialFork layout with the "
                         "'conformant'/'forked' configs")
    from dialfork_dataset.builder import sort_key

    recs = sorted(records.values(), key=sort_key)
    return Corpus(recs, assignment, str(data))


def _load_config_split(data: Any, cfg: str, split: str) -> list[dict[str, Any]]:
    p = Path(data)
    if p.is_dir():
        files = sorted((p / "data" / cfg).glob(f"{split}-*.parquet"))
        if not files:
            raise FileNotFoundError(f"no data/{cfg}/{split}-*.parquet")
        import pyarrow.parquet as pq

        rows: list[dict[str, Any]] = []
        for f in files:
            rows.extend(pq.read_table(f).to_pylist())
        return rows
    from dialfork_dataset.hub import load_split

    return list(load_split(data, cfg, split=split))


# ----------------------------------------------------------------------------- encoders
def prepare_encoder(name: str, records: Sequence[Mapping[str, Any]], *, device: str | None = None,
                    batch_size: int = 64, cache_dir: str | None = None, transcripts: bool = True,
                    timings: dict[str, float] | None = None, progress: bool = True, runtime: str = "torch"):
    """Load an encoder and encode every unique turn (and transcript) of ``records`` once."""
    from .encoders import Encoder

    t0 = time.perf_counter()
    enc = Encoder(name, device=device, batch_size=batch_size, cache_dir=cache_dir,
                  show_progress=None if progress else False, runtime=runtime)
    enc.encode_dialogues(list(records))
    if transcripts:
        enc.encode_transcripts(list(records))
    if timings is not None:
        timings[f"encode:{name}"] = time.perf_counter() - t0
    return enc


# ----------------------------------------------------------------------------- Task 1
def _unit_rng(seed: int, *key: Any) -> np.random.Generator:
    h = hashlib.sha256(json.dumps([seed, *key]).encode()).digest()
    return np.random.default_rng(int.from_bytes(h[:8], "little"))


def run_task1(corpus: Corpus, encoder: Any, methods: Sequence[str] = TASK1_METHODS, seed: int = 0,
              flowkl_kwargs: Mapping[str, Any] | None = None, prd_kwargs: Mapping[str, Any] | None = None,
              skipped: list[str] | None = None, progress: bool = True, pair_encoder: Any = None) -> dict[str, Any]:
    """Task 1 per (task, type) unit: d_k for each method, tau, exact recovery; with statistics.

    ``encoder`` embeds the turns of FlowKL's graph. ``pair_encoder``: a
    :class:`~dialfork_metrics.pair_encoder.PairEncoder` for FBD and PRD, or a mapping
    ``{"fbd": ..., "prd": ...}`` giving each its own (default: one over ``encoder``'s model);
    pass one that already encoded the corpus to reuse its cache.
    """
    from dialfork_dataset.views import task1_sets

    _check_methods(methods, TASK1_METHODS, "Task 1")
    skipped = skipped if skipped is not None else []
    units = task1_sets(corpus.records, skipped=skipped)
    graphs: dict[str, Any] = {}
    need_pairs = [m for m in ("fbd", "prd") if m in methods]
    pair_encoders = _pair_encoders_by_method(pair_encoder, need_pairs, encoder)
    small_n = _CountingFilter("covariance is singular")
    logging.getLogger("dialfork_metrics.setlevel").addFilter(small_n)
    try:
        with _summarised(f"Task 1 ({len(units)} units)"):
            rows = _task1_rows(units, methods, encoder, seed, flowkl_kwargs, prd_kwargs, graphs, pair_encoders,
                               progress)
    finally:
        logging.getLogger("dialfork_metrics.setlevel").removeFilter(small_n)
    if small_n.count:
        logger.warning("FBD: %d set(s) had no more pair embeddings than dimensions: their covariance is singular and "
                       "the Frechet estimate is biased at small n (SPEC 7); compare FBD only between sets of similar size",
                       small_n.count)
    return {"units": rows, "summary": summarise_task1(rows, methods), "graphs": graphs,
            "fbd_small_n_sets": small_n.count}


def _pair_encoders_by_method(pair_encoder: Any, methods: Sequence[str], encoder: Any) -> dict[str, Any]:
    """``{"fbd": PairEncoder, "prd": PairEncoder}`` for the set metrics in ``methods``."""
    if isinstance(pair_encoder, Mapping):
        unknown = set(pair_encoder) - {"fbd", "prd"}
        if unknown:
            raise BenchError(f"pair encoders are given per metric 'fbd' and 'prd', got {sorted(unknown)}")
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


def _task1_rows(units, methods, encoder, seed, flowkl_kwargs, prd_kwargs, graphs, pair_encoders, progress) -> list[dict]:
    from tqdm.auto import tqdm

    rows: list[dict[str, Any]] = []
    pair_cache: dict[Any, np.ndarray] = {}
    for (task, h), unit in tqdm(sorted(units.items()), desc="Task 1 units", disable=not progress):
        ref = unit["reference"]
        d: dict[str, list[float]] = {m: [] for m in methods}
        for k in (1, 2, 3, 4):
            tgt = unit[k]
            for m in methods:
                if m == "flowkl":
                    d[m].append(_flowkl(task, ref, tgt, encoder, graphs, flowkl_kwargs or {}))
                elif m == "fbd":
                    d[m].append(_set_metric("fbd", task, ref, tgt, pair_encoders["fbd"], pair_cache))
                elif m == "prd":
                    d[m].append(_set_metric("prd", task, ref, tgt, pair_encoders["prd"], pair_cache,
                                            {"seed": seed, **(prd_kwargs or {})}))
                elif m == "turn_count_diff":
                    d[m].append(abs(_mean_len(tgt, "turns") - _mean_len(ref, "turns")))
                elif m == "word_count_diff":
                    d[m].append(abs(_mean_len(tgt, "words") - _mean_len(ref, "words")))
                elif m == "random":
                    d[m].append(float(_unit_rng(seed, "task1", task, h, k).random()))
        for m in methods:
            tau = 0.0 if m == "random" else ranking_tau(d[m])  # Random = its expectation, 0 exactly
            rows.append({"task": task, "type": h, "method": m, "distances": d[m], "tau": tau,
                         "exact": exact_recovery(d[m]) if m != "random" else None,
                         "p_perm": unit_permutation_pvalue(d[m]) if m != "random" else None})
    return rows


def summarise_task1(rows: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    by = defaultdict(list)
    for r in rows:
        by[(r["method"], r["type"])].append(r)
    table: dict[str, dict[str, float | None]] = {}
    exact: dict[str, float | None] = {}
    fisher: dict[str, float | None] = {}
    for m in methods:
        table[m] = {}
        for h in TYPES:
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
        for b in real[i + 1:]:
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


#: The paper's Holm family for Task 1 (Appendix J): FlowKL against each other distance method.
#: The length controls and Random are sanity checks, not competitors, so they stay out of the
#: family (pass ``against=`` to :func:`task1_comparisons` to widen it).
TASK1_REFERENCE = "flowkl"
TASK1_COMPARED: tuple[str, ...] = ("fbd", "prd")


def task1_comparisons(rows: Sequence[Mapping[str, Any]], reference: str = TASK1_REFERENCE,
                      against: Sequence[str] = TASK1_COMPARED, n_resamples: int = 10_000,
                      seed: int = 0) -> list[dict[str, Any]]:
    """Appendix J: ``reference`` (FlowKL) against each method of ``against`` over the shared
    (task, type) units: mean Delta tau = tau(reference) - tau(method), its paired bootstrap 95% CI
    (:func:`~dialfork_metrics.stats.bootstrap_mean_ci`, seeded), the two-sided paired Wilcoxon
    p-value and its Holm correction within this family only (the paper: FlowKL vs FBD,
    -0.031 [-0.080, 0.017], Holm p = 0.43). Methods absent from ``rows`` are left out."""
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
        out.append({"a": reference, "b": m, "n_units": int(diff.size), "mean_diff": float(diff.mean()),
                    "ci_low": lo, "ci_high": hi, "p": wilcoxon_two_sided(diff)})
    for r, ph in zip(out, holm([r["p"] for r in out])):
        r["p_holm"] = ph
    return out


def tau_confidence_intervals(rows: Sequence[Mapping[str, Any]], methods: Sequence[str], group: str,
                             n_resamples: int = 10_000, seed: int = 0) -> dict[str, dict[str, list[float] | None]]:
    """Percentile bootstrap 95% CIs of each cell of a tau table (Tables 2 and 3).

    Per type: the mean tau over that type's units, the units resampled jointly across methods
    (:func:`~dialfork_metrics.stats.bootstrap_column_means_ci`). ``Avg``: the groups (``group``:
    ``"task"`` for Task 1, ``"source_id"`` for Task 2) that have all four types are resampled,
    the statistic being the mean of their per-group average tau. A cell without two units is
    ``None``. Returns ``{method: {type or "Avg": [low, high] or None}}``.
    """
    tau: dict[tuple, dict[str, float]] = defaultdict(dict)  # (group, type) -> method -> tau
    for r in rows:
        tau[(r[group], r["type"])][r["method"]] = r["tau"]
    out: dict[str, dict[str, list[float] | None]] = {m: {} for m in methods}
    for i, h in enumerate(TYPES):
        keys = sorted(k for k in tau if k[1] == h and all(m in tau[k] for m in methods))
        if len(keys) < 2:
            for m in methods:
                out[m][h] = None
            continue
        X = np.array([[tau[k][m] for m in methods] for k in keys])
        lo, hi = bootstrap_column_means_ci(X, n_resamples=n_resamples, seed=seed + i, batch=200)
        for j, m in enumerate(methods):
            out[m][h] = [float(lo[j]), float(hi[j])]
    groups = sorted({k[0] for k in tau if all((k[0], h) in tau and all(m in tau[(k[0], h)] for m in methods)
                                                 for h in TYPES)})
    if len(groups) >= 2:
        X = np.array([[np.mean([tau[(g, h)][m] for h in TYPES]) for m in methods] for g in groups])
        lo, hi = bootstrap_column_means_ci(X, n_resamples=n_resamples, seed=seed + len(TYPES), batch=200)
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
    from .flowgraph import FlowGraph, flowkl_from_likelihoods

    kde = {k: v for k, v in kwargs.items() if k in _KDE_OPTIONS}
    opts = {k: v for k, v in kwargs.items() if k not in _KDE_OPTIONS and k != "distance_threshold"}
    if task not in graphs:
        g = FlowGraph(encoder=encoder, distance_threshold=kwargs.get("distance_threshold", 0.55)).fit(ref)
        graphs[task] = g
        graphs[("l_ref", task)] = g.likelihoods(ref, set_name="reference set", **opts)
    g, l_ref = graphs[task], graphs[("l_ref", task)]
    return float(flowkl_from_likelihoods(l_ref, g.likelihoods(tgt, set_name="target set", **opts), **kde))


def _pair_encoder(encoder: Any, progress: bool = True):
    from .pair_encoder import pair_encoder_for

    return pair_encoder_for(encoder, show_progress=None if progress else False)


def _set_metric(name: str, task: str, ref, tgt, pair_encoder, cache: dict, kwargs: Mapping[str, Any] | None = None) -> float:
    from .setlevel import fbd_from_embeddings, prd_from_embeddings

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


# ----------------------------------------------------------------------------- Task 2
def run_task2(corpus: Corpus, encoder: Any, methods: Sequence[str] = TASK2_METHODS, seed: int = 0,
              custom: Mapping[str, Callable[[Any, Any], float]] | None = None,
              skipped: list[str] | None = None) -> dict[str, Any]:
    """Task 2 per (source, type) unit: d_k per method and tau; summary per type."""
    from dialfork_dataset.views import task2_quartets

    from .dialogue import score_quartets

    _check_methods(methods, TASK2_METHODS, "Task 2")
    skipped = skipped if skipped is not None else []
    quartets = task2_quartets(corpus.records, skipped=skipped)
    core = [m for m in methods if m != "random"]
    scored = score_quartets(quartets, methods=core, encoder=encoder) if quartets else []
    rows: list[dict[str, Any]] = []
    for q, s in zip(quartets, scored):
        for m in core:
            rows.append({"source_id": s["source_id"], "type": s["type"], "method": m,
                         "distances": s["distances"][m], "tau": s["tau"][m]})
        if "random" in methods:
            rows.append({"source_id": s["source_id"], "type": s["type"], "method": "random",
                         "distances": [float(_unit_rng(seed, "task2", s["source_id"], s["type"], k).random())
                                       for k in (1, 2, 3, 4)], "tau": 0.0})
        for name, fn in (custom or {}).items():
            d = [float(fn(q["source"], q["forks"][k])) for k in (1, 2, 3, 4)]
            rows.append({"source_id": s["source_id"], "type": s["type"], "method": name, "distances": d,
                         "tau": ranking_tau(d)})
    all_methods = list(methods) + list(custom or {})
    return {"units": rows, "summary": summarise_task2(rows, all_methods), "methods": all_methods}


def summarise_task2(rows: Sequence[Mapping[str, Any]], methods: Sequence[str]) -> dict[str, Any]:
    by = defaultdict(list)
    dist_k = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[(r["method"], r["type"])].append(r["tau"])
        for k, v in enumerate(r["distances"], 1):
            dist_k[r["method"]][k].append(v)
    table = {}
    for m in methods:
        table[m] = {h: (float(np.mean(by[(m, h)])) if by.get((m, h)) else None) for h in TYPES}
        vals = [v for v in table[m].values() if v is not None]
        table[m]["Avg"] = float(np.mean(vals)) if vals else None
    mean_by_k = {m: {k: float(np.mean(v)) for k, v in sorted(dist_k[m].items())} for m in methods}
    n_units = len({(r["source_id"], r["type"]) for r in rows})
    return {"tau": table, "mean_distance_by_k": mean_by_k, "n_units": n_units}


def distance_by_k(rows: Sequence[Mapping[str, Any]], methods: Sequence[str], n_resamples: int = 10_000,
                  seed: int = 0) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Mean distance d_k per (method, type, fork position k), in the method's own units (not
    rescaled), with a percentile bootstrap 95% CI over the type's units (the units resampled
    jointly across methods and positions; :func:`~dialfork_metrics.stats.bootstrap_column_means_ci`).

    Returns ``{method: {type: {"mean": [4], "low": [4], "high": [4], "n": n_units}}}``; a type with
    fewer than two units has ``low``/``high`` equal to ``mean``.
    """
    dist: dict[tuple, dict[str, list[float]]] = defaultdict(dict)  # (source, type) -> method -> d_1..d_4
    for r in rows:
        dist[(r["source_id"], r["type"])][r["method"]] = list(r["distances"])
    out: dict[str, dict[str, dict[str, list[float]]]] = {m: {} for m in methods}
    for i, h in enumerate(TYPES):
        keys = sorted(k for k in dist if k[1] == h and all(m in dist[k] for m in methods))
        if not keys:
            continue
        X = np.array([[v for m in methods for v in dist[k][m]] for k in keys], dtype=float)  # (units, 4 * methods)
        mean = X.mean(axis=0)
        if len(keys) >= 2:
            lo, hi = bootstrap_column_means_ci(X, n_resamples=n_resamples, seed=seed + i, batch=100)
        else:
            lo, hi = mean, mean
        for j, m in enumerate(methods):
            sl = slice(4 * j, 4 * j + 4)
            out[m][h] = {"mean": mean[sl].tolist(), "low": np.asarray(lo)[sl].tolist(),
                         "high": np.asarray(hi)[sl].tolist(), "n": len(keys)}
    return out


def task2_significance(per_encoder: Mapping[str, Mapping[str, Any]], reference: str = "flowscore",
                       n_resamples: int = 10_000, seed: int = 0) -> list[dict[str, Any]]:
    """Table 7: FlowScore tau minus each method's tau per unit; one-sided Wilcoxon (statistic ``W``,
    the sum of the positive ranks) and paired t-test (statistic ``t``), Holm-corrected across
    encoders within each (method, test); bootstrap 95% CI."""
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
            out.append({"encoder": enc, "method": m, "n_units": int(diff.size), "mean_diff": float(diff.mean()),
                        "ci_low": lo, "ci_high": hi, "W": w, "p_wilcoxon": p_w,
                        "t": t if np.isfinite(t) else None, "p_ttest": p_t})  # constant differences: t undefined
    for test in ("p_wilcoxon", "p_ttest"):
        for m in {r["method"] for r in out}:
            grp = [r for r in out if r["method"] == m]
            for r, p in zip(grp, holm([r[test] for r in grp])):
                r[test + "_holm"] = p
    return out


# ----------------------------------------------------------------------------- Task 3
#: N-gram orders of the order ablation (issue: the paper claims results are similar across N).
TASK3_ABLATION_ORDERS: tuple[int, ...] = (2, 3, 6, 10)
#: The paper's Table 9 runs its streaming detectors with a 3-gram LM (Table 4: 6-gram).
TABLE9_ORDER = 3


def _task3_fit_predict(name: str, train, train_emb, test, test_emb, settings: Mapping[str, Any], *,
                       preset: str = "selected", false_alarm_rate: float = 0.05, curve: bool = False,
                       save_to: str | os.PathLike | None = None) -> dict[str, Any]:
    """Fit one streaming detector on the conformant train split, predict and score the test
    split; ``curve`` adds its trade-off curve and the coverage at 1/5/10% false alarms."""
    from .task3 import make_detector, score_predictions
    from .task3.selection import FALSE_ALARM_POINTS, coverage_at, tradeoff_curve

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
        cur = tradeoff_curve(stats, keys, [ex["hallucination_type"] is not None for ex in test],
                             {k: m.calibration_stats for k, m in det.models().items()}, det.method)
        res["curve"] = {"level": [None if np.isnan(v) else float(v) for v in cur["level"]],
                        "cov_c": cur["cov_c"].tolist(), "cov_h": cur["cov_h"].tolist()}
        res["coverage_at"] = {f"{a:g}": coverage_at(cur, a) for a in FALSE_ALARM_POINTS}
    if save_to is not None:
        det.save(save_to)
    return {"result": res, "predictions": pmap}


def _subsample_test(test: Sequence[Mapping[str, Any]], records_by_id: Mapping[str, Mapping[str, Any]],
                    max_forks_per_source: int | None, seed: int) -> list[int]:
    from .task3.selection import _subsample_forks

    recs = [{**ex, "source_id": records_by_id.get(ex["dialogue_id"], {}).get("source_id")} for ex in test]
    return _subsample_forks(recs, max_forks_per_source, seed)


def run_task3(corpus: Corpus, encoder: Any, detectors: Sequence[str] = TASK3_DETECTORS, seed: int = 0,
              order: int | None = None, progress: bool = True, save_dir: str | os.PathLike | None = None, *,
              preset: str = "selected", scope: str | None = None, false_alarm_rate: float = 0.05,
              select: bool = False, selection_kwargs: Mapping[str, Any] | None = None, ablations: bool = True,
              ablation_orders: Sequence[int] = TASK3_ABLATION_ORDERS, paper_table: bool = True,
              ablation_max_forks_per_source: int | None = None) -> dict[str, Any]:
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
    """
    from dialfork_dataset.views import task3_examples

    from .task3 import make_detector, score_predictions
    from .task3.detectors import STREAMING_DETECTORS
    from .task3.streaming import SCOPES

    train = corpus.split("train", forks=False)
    test = task3_examples(corpus.split("test", forks=True))
    if not train or not test:
        raise BenchError(f"Task 3 needs a train and a test split; got {len(train)} train and {len(test)} test dialogues")
    streaming = [d for d in detectors if d in STREAMING_DETECTORS]
    out: dict[str, Any] = {"n_train": len(train), "n_test": len(test), "preset": preset,
                           "false_alarm_rate": false_alarm_rate}
    train_emb = test_emb = None
    if streaming:
        train_emb = encoder.encode_dialogues(train)
        test_emb = encoder.encode_dialogues(test)
    overrides: dict[str, dict[str, Any]] = {d: {} for d in streaming}
    if select and streaming:
        from .task3.selection import select_settings

        sel_recs = corpus.split("train", forks=True)  # train sources only: never the test split
        t0 = time.perf_counter()
        sel = select_settings(sel_recs, encoder.encode_dialogues(sel_recs), detectors=streaming, seed=seed,
                              false_alarm_rate=false_alarm_rate, progress=progress, **(selection_kwargs or {}))
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
    for name in detectors:
        if name in STREAMING_DETECTORS:
            r = _task3_fit_predict(name, train, train_emb, test, test_emb, overrides[name], preset=preset,
                                   false_alarm_rate=false_alarm_rate, curve=True,
                                   save_to=None if save_dir is None else Path(save_dir) / name.replace("+", "_"))
            results[name], predictions[name] = r["result"], r["predictions"]
            continue
        det = make_detector(name, **({"seed": seed} if name == "random" else {}))
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
        out["table9"] = {d: _task3_fit_predict(d, train, train_emb, test, test_emb, {"order": TABLE9_ORDER},
                                               preset="paper", false_alarm_rate=false_alarm_rate)["result"]
                         for d in streaming}
    if streaming and ablations:
        keep = _subsample_test(test, corpus.by_id, ablation_max_forks_per_source, seed)
        sub, sub_emb = [test[i] for i in keep], [test_emb[i] for i in keep]
        out["ablation_n_test"] = len(sub)
        base = {d: {**results[d]["settings"]} for d in streaming}
        out["ablation_order"] = {str(n): {d: _task3_fit_predict(d, train, train_emb, sub, sub_emb,
                                                                {**base[d], "order": n}, preset=preset,
                                                                false_alarm_rate=false_alarm_rate)["result"]
                                          for d in streaming} for n in ablation_orders}
        out["ablation_scope"] = {sc: {d: _task3_fit_predict(d, train, train_emb, sub, sub_emb, {**base[d], "scope": sc},
                                                            preset=preset, false_alarm_rate=false_alarm_rate)["result"]
                                      for d in streaming} for sc in SCOPES}
    return out


#: Appendix I's weight grid: the weight of each MAE component, from the uniform 0.25 to 0.40; each
#: coverage component gets ``0.5 - w`` (the paper's Score uses 0.35 / 0.15).
SWEEP_MAE_WEIGHTS: tuple[float, ...] = (0.25, 0.275, 0.30, 0.325, 0.35, 0.375, 0.40)
#: Regimes whose winners Appendix I compares; a detector not listed is its own regime "other".
TASK3_REGIMES: dict[str, tuple[str, ...]] = {"baselines": ("first", "last", "random"),
                                             "streaming": ("it", "ss", "it+nc", "ss+nc")}


def _regime(detector: str) -> str:
    return next((r for r, ds in TASK3_REGIMES.items() if detector in ds), "other")


def task3_weight_sweep(results: Mapping[str, Mapping[str, Any]],
                       mae_weights: Sequence[float] = SWEEP_MAE_WEIGHTS) -> dict[str, Any]:
    """Appendix I: the Score of every detector under each weight vector ``(w, w, 0.5 - w, 0.5 - w)``
    for ``w`` in ``mae_weights``, recomputed from its MAEs, coverages and references
    (:func:`~dialfork_metrics.task3.scorer.score_from_stats`; the unit of the MAEs does not matter,
    only their ratio to the references), and the winner of each regime at each weight.

    ``results``: ``{detector: score_predictions(...) result}`` of one encoder. Returns
    ``{"weights": [[w1, w2, w3, w4], ...], "scores": {detector: [Score per weight]},
    "winners": {regime: [detector per weight]}, "stable": {regime: bool}}``, where ``stable`` says
    whether the regime's winner is the same detector at every weight (ties broken by name).
    """
    from .task3.scorer import score_from_stats

    ws: list[list[float]] = []
    for w in mae_weights:
        if not 0.0 <= w <= 0.5:
            raise ValueError(f"MAE weight {w} outside [0, 0.5]: each coverage weight is 0.5 - w")
        ws.append([float(w), float(w), 0.5 - float(w), 0.5 - float(w)])
    scores: dict[str, list[float]] = {}
    for det, r in results.items():
        if r.get("mae_h_ref") is None or r.get("mae_c_ref") is None or r.get("cov_h") is None or r.get("cov_c") is None:
            continue
        scores[det] = [score_from_stats(r["mae_h"], r["cov_h"], r["mae_c"], r["cov_c"], r["mae_h_ref"],
                                        r["mae_c_ref"], weights=wv) for wv in ws]
    winners: dict[str, list[str]] = {}
    for det in scores:
        winners.setdefault(_regime(det), [])
    for reg in winners:
        dets = sorted(d for d in scores if _regime(d) == reg)
        winners[reg] = [max(dets, key=lambda d, i=i: scores[d][i]) for i in range(len(ws))]  # ties: first name
    return {"weights": ws, "scores": scores, "winners": winners,
            "stable": {reg: len(set(w)) == 1 for reg, w in winners.items()}}


# ----------------------------------------------------------------------------- helpers
def _check_methods(methods: Sequence[str], known: Sequence[str], what: str) -> None:
    bad = [m for m in methods if m not in known]
    if bad:
        raise BenchError(f"unknown {what} method(s) {bad}; known: {', '.join(known)}")


def load_custom_metric(spec: str) -> tuple[str, Callable[[Any, Any], float]]:
    """``NAME=module.path:function`` (a callable ``(ref, cand) -> distance``) or a path to an
    evaluate module folder/script (its ``compute(predictions=[cand], references=[ref])`` must
    return a dict holding a per-pair list under a plural key such as ``"scores"``)."""
    name, _, target = spec.partition("=")
    if not target:
        target, name = spec, Path(spec.rstrip("/")).stem
    if ":" in target and not Path(target).exists():
        mod, _, fn = target.partition(":")
        try:
            f = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as e:
            raise BenchError(f"--metric {spec!r}: cannot import {fn!r} from {mod!r} ({e})") from None
        return name, f
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


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for pkg in ("dialfork", "numpy", "scipy", "scikit-learn", "torch", "transformers", "sentence-transformers",
                "datasets", "evaluate", "statsmodels", "numba"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def run_benchmark(data: str | os.PathLike, tasks: Sequence[int] = (1, 2, 3), encoders: Sequence[str] = ("minilm",),
                  out: str | os.PathLike | None = None, seed: int = 0, task1_methods: Sequence[str] = TASK1_METHODS,
                  task2_methods: Sequence[str] = TASK2_METHODS, task3_detectors: Sequence[str] = TASK3_DETECTORS,
                  custom_metrics: Sequence[str] = (), graph_task: str | None = None, device: str | None = None,
                  batch_size: int = 64, n_resamples: int = 10_000, plots: bool = True, progress: bool = True,
                  cache_dir: str | None = None, prd_kwargs: Mapping[str, Any] | None = None,
                  task1_encoder: str | None = None, pair_encoder: str | Mapping[str, str] | None = None,
                  task1_compare: Sequence[str] = TASK1_COMPARED, runtime: str = "torch",
                  task3_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run the benchmark and (when ``out`` is given) write every report. Returns the report dict.

    ``prd_kwargs`` go to :func:`~dialfork_metrics.setlevel.prd_from_embeddings` (``num_runs``,
    ``n_init``, ``kmeans``) on top of :data:`DEFAULT_PRD`.

    Encoders of Task 1: ``task1_encoder`` embeds the turns of FlowKL's graph (default: the first
    of ``encoders``; the paper uses ``"d2f"``); ``pair_encoder`` embeds the (system, user) pairs
    of FBD and PRD, one name for both or ``{"fbd": name, "prd": name}`` (default: the model of
    ``task1_encoder``). ``task1_compare``: the methods FlowKL is tested against (Appendix J's Holm
    family, :data:`TASK1_COMPARED`). ``runtime``: the encoders' runtime (``"torch"``, ``"onnx"``,
    ``"onnx-int8"``; see :mod:`dialfork_metrics.runtimes`). ``task3_kwargs`` go to :func:`run_task3`
    (``preset``, ``order``, ``scope``, ``select``, ``false_alarm_rate``, ``ablations``, ...).
    """
    prd_kwargs = {**DEFAULT_PRD, **(prd_kwargs or {})}
    from .encoders import resolve_encoder_name

    bad = [t for t in tasks if t not in (1, 2, 3)]
    if bad:
        raise BenchError(f"unknown task(s) {bad}; DialFork has tasks 1, 2, 3")
    for e in encoders:
        resolve_encoder_name(e)  # unknown name -> ValueError before any work
    if not encoders and task1_encoder is None:
        raise BenchError("no encoder: give --encoders (and/or --task1-encoder for Task 1)")
    t1_name = task1_encoder or encoders[0]
    pair_names = _pair_encoder_names(pair_encoder, t1_name)
    for e in (t1_name, *pair_names.values()):
        resolve_encoder_name(e)
    _check_methods(task1_compare, TASK1_METHODS, "Task 1 comparison")
    _check_methods(task1_methods, TASK1_METHODS, "Task 1")
    _check_methods(task2_methods, TASK2_METHODS, "Task 2")
    _check_methods(task3_detectors, TASK3_DETECTORS, "Task 3")
    custom = dict(load_custom_metric(s) for s in custom_metrics)

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    skipped: list[str] = []
    corpus = load_corpus(data, skipped)
    timings["load"] = time.perf_counter() - t_start
    report: dict[str, Any] = {
        "meta": {"data": str(data), "fingerprint": corpus.fingerprint(), "n_records": len(corpus.records),
                 "n_conformant": len(corpus.conformant), "tasks": list(tasks), "encoders": list(encoders),
                 "seed": seed, "bootstrap_resamples": n_resamples, "runtime": runtime, "prd": dict(prd_kwargs or {}),
                 "task1_encoders": {"flowkl": t1_name, **pair_names}, "versions": package_versions()},
        "skipped": skipped,
    }
    task2_by_encoder: dict[str, Any] = {}
    task3_by_encoder: dict[str, Any] = {}
    graph = None
    t1_kw = dict(methods=task1_methods, pair_names=pair_names, seed=seed, skipped=skipped, progress=progress,
                 prd_kwargs=prd_kwargs, compare=task1_compare, n_resamples=n_resamples, timings=timings,
                 device=device, batch_size=batch_size, cache_dir=cache_dir, graph_task=graph_task)
    t1_resolved = resolve_encoder_name(t1_name)
    if 1 in tasks and all(resolve_encoder_name(e) != t1_resolved for e in encoders):
        enc1 = prepare_encoder(t1_name, corpus.records, device=device, batch_size=batch_size, cache_dir=cache_dir,
                               transcripts=False, timings=timings, progress=progress, runtime=runtime)
        report["task1"], graph = _task1_stage(corpus, enc1, t1_name, **t1_kw)
        del enc1
    for name in encoders:
        runs_task1 = 1 in tasks and "task1" not in report and resolve_encoder_name(name) == t1_resolved
        if not (runs_task1 or 2 in tasks or 3 in tasks):
            continue
        enc = prepare_encoder(name, corpus.records, device=device, batch_size=batch_size, cache_dir=cache_dir,
                              transcripts=2 in tasks, timings=timings, progress=progress, runtime=runtime)
        if runs_task1:
            report["task1"], graph = _task1_stage(corpus, enc, name, **t1_kw)
        if 2 in tasks:
            t0 = time.perf_counter()
            with _summarised(f"Task 2 ({name})"):
                task2_by_encoder[name] = run_task2(corpus, enc, task2_methods, seed=seed, custom=custom,
                                                   skipped=skipped)
            timings[f"task2:{name}"] = time.perf_counter() - t0
        if 3 in tasks:
            t0 = time.perf_counter()
            with _summarised(f"Task 3 ({name})"):
                r3 = run_task3(corpus, enc, task3_detectors, seed=seed, progress=progress, **(task3_kwargs or {}))
            r3.pop("predictions")
            task3_by_encoder[name] = r3
            timings[f"task3:{name}"] = time.perf_counter() - t0
    if 2 in tasks:
        t0 = time.perf_counter()
        report["task2"] = {"per_encoder": {e: {"summary": r["summary"], "units": r["units"], "methods": r["methods"]}
                                           for e, r in task2_by_encoder.items()},
                           "significance": task2_significance(task2_by_encoder, n_resamples=n_resamples, seed=seed)}
        _task2_intervals(report["task2"]["per_encoder"], n_resamples, seed)
        timings["task2:significance"] = time.perf_counter() - t0
    if 3 in tasks:
        report["task3"] = task3_by_encoder
        report["task3_weight_sweep"] = {e: task3_weight_sweep(r["results"]) for e, r in task3_by_encoder.items()}
    timings["total"] = time.perf_counter() - t_start
    enc_time = sum(v for k, v in timings.items() if k.startswith("encode:"))
    timings["encoding_share"] = enc_time / timings["total"] if timings["total"] else 0.0
    report["timings"] = timings
    report["skipped"] = skipped
    report["meta"]["n_skipped_units"] = len(skipped)
    if out is not None:
        from .report import write_reports

        write_reports(report, out, plots=plots, graph=graph)
    return report


def _pair_encoder_names(pair_encoder: str | Mapping[str, str] | None, default: str) -> dict[str, str]:
    """``{"fbd": name, "prd": name}`` from ``--pair-encoder`` (one name, or per metric)."""
    if pair_encoder is None:
        return {"fbd": default, "prd": default}
    if isinstance(pair_encoder, str):
        return {"fbd": pair_encoder, "prd": pair_encoder}
    unknown = set(pair_encoder) - {"fbd", "prd"}
    if unknown:
        raise BenchError(f"pair encoders are given per metric 'fbd' and 'prd', got {sorted(unknown)}")
    return {m: pair_encoder.get(m) or default for m in ("fbd", "prd")}


def _task1_stage(corpus: Corpus, enc: Any, name: str, *, methods, pair_names, seed, skipped, progress, prd_kwargs,
                 compare, n_resamples, timings, device, batch_size, cache_dir, graph_task) -> tuple[dict, Any]:
    """Task 1 with ``enc`` for FlowKL and the pair encoders named in ``pair_names``; every (system,
    user) pair of the corpus is encoded once per pair model, up front. Returns (report part, graph)."""
    from .encoders import Encoder, resolve_encoder_name

    loaded: dict[str, Any] = {}
    pes: dict[str, Any] = {}
    for m in (m for m in ("fbd", "prd") if m in methods):
        key = resolve_encoder_name(pair_names[m])
        if key not in loaded:
            t0 = time.perf_counter()
            base = enc if key == resolve_encoder_name(name) else Encoder(
                pair_names[m], device=device, batch_size=batch_size, cache_dir=cache_dir,
                show_progress=None if progress else False, runtime=getattr(enc, "runtime", "torch"))
            pe = _pair_encoder(base, progress)
            pe.encode_sets(corpus.records)  # every (system, user) pair once; Task 1 reads the cache
            timings[f"encode:{pair_names[m]}:pairs"] = time.perf_counter() - t0
            loaded[key] = pe
        pes[m] = loaded[key]
    t0 = time.perf_counter()
    r1 = run_task1(corpus, enc, methods, seed=seed, skipped=skipped, progress=progress, pair_encoder=pes,
                   prd_kwargs=prd_kwargs)
    r1["comparisons"] = task1_comparisons(r1["units"], against=compare, n_resamples=n_resamples, seed=seed)
    r1["summary"]["tau_ci"] = tau_confidence_intervals(r1["units"], methods, "task", n_resamples, seed)
    timings["task1"] = time.perf_counter() - t0
    graphs = {k: v for k, v in r1.pop("graphs").items() if isinstance(k, str)}
    gt = graph_task or (sorted(graphs)[0] if graphs else None)
    used = {"flowkl": name, **{m: pair_names[m] for m in pes}}
    return {**r1, "encoder": name, "encoders": used}, ((gt, graphs.get(gt)) if gt else None)


def _task2_intervals(per_encoder: Mapping[str, dict[str, Any]], n_resamples: int, seed: int) -> None:
    """Add each encoder's tau CIs and absolute distance-by-k curves (with CIs) to its summary."""
    for res in per_encoder.values():
        res["summary"]["tau_ci"] = tau_confidence_intervals(res["units"], res["methods"], "source_id", n_resamples, seed)
        res["summary"]["distance_by_k"] = distance_by_k(res["units"], res["methods"], n_resamples, seed)


def parse_pair_encoder(spec: str | None) -> str | dict[str, str] | None:
    """``--pair-encoder``: ``NAME`` (FBD and PRD) or ``fbd=NAME[,prd=NAME]``."""
    if spec is None or not spec.strip():
        return None
    if "=" not in spec:
        return spec.strip()
    out: dict[str, str] = {}
    for part in _csv_list(spec):
        metric, _, name = part.partition("=")
        metric, name = metric.strip().lower(), name.strip()
        if metric not in ("fbd", "prd") or not name:
            raise BenchError(f"--pair-encoder {spec!r}: expected NAME or fbd=NAME,prd=NAME")
        out[metric] = name
    return out


def _csv_list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults

    p = argparse.ArgumentParser(prog=prog_name("dialfork_metrics.bench"),
                                description="Reproduce the DialFork paper's evaluation (Tables 2, 3, 4, 7, 9) on a corpus.")
    p.add_argument("--data", required=True, help="generator output folder, exported Hub layout folder, or Hub dataset id")
    p.add_argument("--tasks", default="1,2,3", help="comma-separated tasks among 1,2,3 (default: all)")
    p.add_argument("--encoders", default="minilm", help="comma-separated encoder aliases/paths of Tasks 2 and 3 "
                   "(the first one is also Task 1's unless --task1-encoder is given)")
    p.add_argument("--task1-encoder", default=None, metavar="NAME",
                   help="encoder of FlowKL's graph in Task 1 (default: the first of --encoders; the paper: d2f)")
    p.add_argument("--pair-encoder", default=None, metavar="NAME|fbd=NAME,prd=NAME",
                   help="encoder of the (system, user) pairs of FBD and PRD, one for both or one each "
                        "(default: the Task 1 encoder's model)")
    p.add_argument("--task1-compare", default=",".join(TASK1_COMPARED),
                   help="methods FlowKL is tested against in Task 1 (one Holm family; default: fbd,prd as the paper)")
    p.add_argument("--out", default="reports", help="output folder (Markdown, CSV, JSON, PNG; default: reports)")
    p.add_argument("--seed", type=int, default=0, help="seed of PRD, bootstrap and the random baselines")
    p.add_argument("--task1-methods", default=",".join(TASK1_METHODS), help="comma-separated Task 1 methods")
    p.add_argument("--task2-methods", default=",".join(TASK2_METHODS), help="comma-separated Task 2 methods")
    p.add_argument("--task3-detectors", default=",".join(TASK3_DETECTORS), help="comma-separated Task 3 detectors")
    p.add_argument("--metric", action="append", default=[], metavar="NAME=module:function|EVALUATE_PATH",
                   help="add a user Task 2 distance as a row (repeatable)")
    p.add_argument("--graph-task", default=None, help="task whose flow graph is drawn (default: the first)")
    p.add_argument("--device", default=None, help="torch device of the encoders (default: auto)")
    p.add_argument("--batch-size", type=int, default=64, help="encoder batch size")
    p.add_argument("--runtime", choices=["torch", "onnx", "onnx-int8"], default="torch",
                   help="encoder runtime (onnx: the transformer exported to ONNX, equal values, faster on CPUs)")
    p.add_argument("--bootstrap-resamples", type=int, default=10_000, help="paired bootstrap resamples")
    p.add_argument("--cache-dir", default=None, help="persistent embedding cache folder (default: memory only)")
    p.add_argument("--prd-runs", type=int, default=DEFAULT_PRD["num_runs"], help="PRD: clusterings averaged (default 10)")
    p.add_argument("--prd-n-init", type=int, default=DEFAULT_PRD["n_init"],
                   help="PRD: k-means initialisations per clustering (default 1; Sajjadi et al.: 10)")
    p.add_argument("--prd-kmeans", choices=["minibatch", "full"], default=DEFAULT_PRD["kmeans"],
                   help="PRD: scikit-learn KMeans (default) or MiniBatchKMeans (Sajjadi et al.'s reference code)")
    g3 = p.add_argument_group("Task 3 streaming detectors")
    g3.add_argument("--task3-preset", choices=["selected", "paper"], default="selected",
                    help="settings of the streaming detectors: the packaged per-encoder selection (default) or the "
                         "paper's literal protocol (in-sample calibration, no back-off, threshold 0.55, N=6, per task)")
    g3.add_argument("--order", type=int, default=None, help="N of the N-gram LM for the main Task 3 rows (overrides "
                    "the preset; the paper: 6 in Table 4; Table 9 always runs at 3)")
    g3.add_argument("--task3-scope", choices=["task", "pooled"], default=None,
                    help="fit one streaming model per task or one over all tasks (overrides the preset)")
    g3.add_argument("--task3-select", action="store_true",
                    help="choose the streaming settings by cross-validation over the train sources of --data")
    g3.add_argument("--false-alarm-rate", type=float, default=0.05, help="operating point of the streaming "
                    "detectors: target conformant false-alarm rate (default 0.05)")
    g3.add_argument("--no-task3-ablations", action="store_true", help="skip the N-order and scope ablation tables")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    add_verbosity_options(p, default="INFO")
    return state_defaults(p)


def main(argv: Sequence[str] | None = None) -> int:
    from dialfork_dataset.console import console

    a = build_parser().parse_args(argv)
    with console(a.verbose, a.quiet):
        return _main(a)


def _main(a: argparse.Namespace) -> int:
    if a.order is not None and a.order < 1:
        print(f"error: --order N must be an integer >= 1, got {a.order}", file=sys.stderr)
        return 2
    if not 0 < a.false_alarm_rate < 1:
        print(f"error: --false-alarm-rate must be in (0, 1), got {a.false_alarm_rate}", file=sys.stderr)
        return 2
    try:
        tasks = [int(t) for t in _csv_list(a.tasks)]
    except ValueError:
        print(f"error: --tasks must be comma-separated integers among 1,2,3, got {a.tasks!r}", file=sys.stderr)
        return 2
    try:
        pair = parse_pair_encoder(a.pair_encoder)
        from .sharded import sharded_bench_encoding

        if not sharded_bench_encoding(a, pair):  # under `accelerate launch`: the corpus is encoded across
            return 0                             # the processes first; the main one then runs the benchmark
        rep = run_benchmark(a.data, tasks, _csv_list(a.encoders), a.out, seed=a.seed,
                            task1_methods=_csv_list(a.task1_methods), task2_methods=_csv_list(a.task2_methods),
                            task3_detectors=_csv_list(a.task3_detectors), custom_metrics=a.metric,
                            graph_task=a.graph_task, device=a.device, batch_size=a.batch_size,
                            n_resamples=a.bootstrap_resamples, plots=not a.no_plots, progress=not a.quiet,
                            cache_dir=a.cache_dir, runtime=a.runtime,
                            prd_kwargs={"num_runs": a.prd_runs, "n_init": a.prd_n_init, "kmeans": a.prd_kmeans},
                            task1_encoder=a.task1_encoder, pair_encoder=pair,
                            task1_compare=_csv_list(a.task1_compare),
                            task3_kwargs={"preset": a.task3_preset, "order": a.order, "scope": a.task3_scope,
                                          "select": a.task3_select, "false_alarm_rate": a.false_alarm_rate,
                                          "ablations": not a.no_task3_ablations})
    except (BenchError, ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t = rep["timings"]
    print(f"wrote {a.out}/ (total {t['total']:.1f} s, encoding {100 * t['encoding_share']:.1f}%, "
          f"{rep['meta']['n_skipped_units']} skipped unit(s))")
    print((Path(a.out) / "report.md").read_text(encoding="utf-8"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
