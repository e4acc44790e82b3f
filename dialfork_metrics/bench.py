"""One-command benchmark: the paper's Tables 2, 3, 4, 7 and 9 on any DialFork corpus.

``python -m dialfork_metrics.bench --data DIR_or_HUB_ID --tasks 1,2,3 --encoders minilm --out reports/``

* Task 1 (SPEC 5): FlowKL, FBD, PRD and the controls per (task, type) unit; Kendall tau per
  type and Avg; exact recovery; each method against chance (exact per-unit permutation test,
  Fisher-combined); methods against each other (paired Wilcoxon over units, Holm).
* Task 2 (SPEC 6), per encoder: Mean, Full, FlowDTW, FlowScore, the controls and any user
  metric; Table 7: FlowScore against each method (one-sided Wilcoxon and paired t-test, Holm
  across encoders within each test, paired bootstrap 95% CI with 10,000 seeded resamples).
* Task 3 (SPEC 8): trivial baselines and the four streaming detectors per encoder (Table 9).

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
from pathlib import Path
from typing import Any

import numpy as np

from dialfork_dataset.records import HALLUCINATION_TYPES

from .stats import (
    bootstrap_mean_ci,
    exact_recovery,
    fisher_combine,
    holm,
    paired_t_greater,
    ranking_tau,
    unit_permutation_pvalue,
    wilcoxon_greater,
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
    from datasets import load_dataset

    return list(load_dataset(str(data), cfg, split=split))


# ----------------------------------------------------------------------------- encoders
def prepare_encoder(name: str, records: Sequence[Mapping[str, Any]], *, device: str | None = None,
                    batch_size: int = 64, cache_dir: str | None = None, transcripts: bool = True,
                    timings: dict[str, float] | None = None, progress: bool = True):
    """Load an encoder and encode every unique turn (and transcript) of ``records`` once."""
    from .encoders import Encoder

    t0 = time.perf_counter()
    enc = Encoder(name, device=device, batch_size=batch_size, cache_dir=cache_dir,
                  show_progress=None if progress else False)
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

    ``pair_encoder``: a :class:`~dialfork_metrics.pair_encoder.PairEncoder` for FBD/PRD (default:
    one over ``encoder``'s model); pass one that already encoded the corpus to reuse its cache.
    """
    from dialfork_dataset.views import task1_sets

    _check_methods(methods, TASK1_METHODS, "Task 1")
    skipped = skipped if skipped is not None else []
    units = task1_sets(corpus.records, skipped=skipped)
    graphs: dict[str, Any] = {}
    need_pairs = any(m in methods for m in ("fbd", "prd"))
    if need_pairs and pair_encoder is None:
        pair_encoder = _pair_encoder(encoder)
    small_n = _CountingFilter("covariance is singular")
    logging.getLogger("dialfork_metrics.setlevel").addFilter(small_n)
    try:
        rows = _task1_rows(units, methods, encoder, seed, flowkl_kwargs, prd_kwargs, graphs, pair_encoder, progress)
    finally:
        logging.getLogger("dialfork_metrics.setlevel").removeFilter(small_n)
    if small_n.count:
        logger.warning("FBD: %d set(s) had no more pair embeddings than dimensions: their covariance is singular and "
                       "the Frechet estimate is biased at small n (SPEC 7); compare FBD only between sets of similar size",
                       small_n.count)
    return {"units": rows, "summary": summarise_task1(rows, methods), "graphs": graphs,
            "fbd_small_n_sets": small_n.count}


def _task1_rows(units, methods, encoder, seed, flowkl_kwargs, prd_kwargs, graphs, pair_encoder, progress) -> list[dict]:
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
                    d[m].append(_set_metric("fbd", task, ref, tgt, pair_encoder, pair_cache))
                elif m == "prd":
                    d[m].append(_set_metric("prd", task, ref, tgt, pair_encoder, pair_cache, {"seed": seed, **(prd_kwargs or {})}))
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
            from scipy.stats import wilcoxon

            p = 1.0 if np.all(diff == 0) else float(wilcoxon(diff, zero_method="wilcox").pvalue)
            pairs.append({"a": a, "b": b, "n_units": int(diff.size), "mean_diff": float(diff.mean()), "p": p})
            pvals.append(p)
    for pr, ph in zip(pairs, holm(pvals)):
        pr["p_holm"] = ph
    n_units = len({(r["task"], r["type"]) for r in rows})
    return {"tau": table, "exact_recovery": exact, "fisher_p": fisher, "pairwise": pairs, "n_units": n_units}


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

    key = ("ref", task)
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


def task2_significance(per_encoder: Mapping[str, Mapping[str, Any]], reference: str = "flowscore",
                       n_resamples: int = 10_000, seed: int = 0) -> list[dict[str, Any]]:
    """Table 7: FlowScore tau minus each method's tau per unit; one-sided Wilcoxon and paired
    t-test, Holm-corrected across encoders within each (method, test); bootstrap 95% CI."""
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
            out.append({"encoder": enc, "method": m, "n_units": int(diff.size), "mean_diff": float(diff.mean()),
                        "ci_low": lo, "ci_high": hi, "p_wilcoxon": wilcoxon_greater(diff),
                        "p_ttest": paired_t_greater(diff)})
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
                  task3_kwargs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run the benchmark and (when ``out`` is given) write every report. Returns the report dict.

    ``prd_kwargs`` go to :func:`~dialfork_metrics.setlevel.prd_from_embeddings` (``num_runs``,
    ``n_init``, ``kmeans``) on top of :data:`DEFAULT_PRD`. ``task3_kwargs`` go to :func:`run_task3`
    (``preset``, ``order``, ``scope``, ``select``, ``false_alarm_rate``, ``ablations``, ...).
    """
    prd_kwargs = {**DEFAULT_PRD, **(prd_kwargs or {})}
    from .encoders import resolve_encoder_name

    bad = [t for t in tasks if t not in (1, 2, 3)]
    if bad:
        raise BenchError(f"unknown task(s) {bad}; DialFork has tasks 1, 2, 3")
    for e in encoders:
        resolve_encoder_name(e)  # unknown name -> ValueError before any work
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
                 "seed": seed, "bootstrap_resamples": n_resamples, "prd": dict(prd_kwargs or {}),
                 "versions": package_versions()},
        "skipped": skipped,
    }
    task2_by_encoder: dict[str, Any] = {}
    task3_by_encoder: dict[str, Any] = {}
    graph = None
    for i, name in enumerate(encoders):
        enc = prepare_encoder(name, corpus.records, device=device, batch_size=batch_size, cache_dir=cache_dir,
                              transcripts=2 in tasks, timings=timings, progress=progress)
        if 1 in tasks and i == 0:
            pe = None
            if any(m in task1_methods for m in ("fbd", "prd")):
                t0 = time.perf_counter()
                pe = _pair_encoder(enc, progress)
                pe.encode_sets(corpus.records)  # every (system, user) pair once; Task 1 reads the cache
                timings[f"encode:{name}:pairs"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            r1 = run_task1(corpus, enc, task1_methods, seed=seed, skipped=skipped, progress=progress, pair_encoder=pe,
                           prd_kwargs=prd_kwargs)
            timings["task1"] = time.perf_counter() - t0
            graphs = {k: v for k, v in r1.pop("graphs").items() if isinstance(k, str)}
            gt = graph_task or (sorted(graphs)[0] if graphs else None)
            graph = (gt, graphs.get(gt)) if gt else None
            report["task1"] = {**r1, "encoder": name}
        if 2 in tasks:
            t0 = time.perf_counter()
            task2_by_encoder[name] = run_task2(corpus, enc, task2_methods, seed=seed, custom=custom, skipped=skipped)
            timings[f"task2:{name}"] = time.perf_counter() - t0
        if 3 in tasks:
            t0 = time.perf_counter()
            r3 = run_task3(corpus, enc, task3_detectors, seed=seed, progress=progress, **(task3_kwargs or {}))
            r3.pop("predictions")
            task3_by_encoder[name] = r3
            timings[f"task3:{name}"] = time.perf_counter() - t0
    if 2 in tasks:
        t0 = time.perf_counter()
        report["task2"] = {"per_encoder": {e: {"summary": r["summary"], "units": r["units"], "methods": r["methods"]}
                                           for e, r in task2_by_encoder.items()},
                           "significance": task2_significance(task2_by_encoder, n_resamples=n_resamples, seed=seed)}
        timings["task2:significance"] = time.perf_counter() - t0
    if 3 in tasks:
        report["task3"] = task3_by_encoder
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


def _csv_list(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dialfork_metrics.bench",
                                description="Reproduce the DialFork paper's evaluation (Tables 2, 3, 4, 7, 9) on a corpus.")
    p.add_argument("--data", required=True, help="generator output folder, exported Hub layout folder, or Hub dataset id")
    p.add_argument("--tasks", default="1,2,3", help="comma-separated tasks among 1,2,3 (default: all)")
    p.add_argument("--encoders", default="minilm", help="comma-separated encoder aliases/paths (first one also for Task 1)")
    p.add_argument("--out", default="reports", help="output folder (Markdown, CSV, JSON, PNG)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--task1-methods", default=",".join(TASK1_METHODS))
    p.add_argument("--task2-methods", default=",".join(TASK2_METHODS))
    p.add_argument("--task3-detectors", default=",".join(TASK3_DETECTORS))
    p.add_argument("--metric", action="append", default=[], metavar="NAME=module:function|EVALUATE_PATH",
                   help="add a user Task 2 distance as a row (repeatable)")
    p.add_argument("--graph-task", default=None, help="task whose flow graph is drawn (default: the first)")
    p.add_argument("--device", default=None)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--bootstrap-resamples", type=int, default=10_000)
    p.add_argument("--cache-dir", default=None, help="persistent embedding cache folder")
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
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING if a.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s")
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
        rep = run_benchmark(a.data, tasks, _csv_list(a.encoders), a.out, seed=a.seed,
                            task1_methods=_csv_list(a.task1_methods), task2_methods=_csv_list(a.task2_methods),
                            task3_detectors=_csv_list(a.task3_detectors), custom_metrics=a.metric,
                            graph_task=a.graph_task, device=a.device, batch_size=a.batch_size,
                            n_resamples=a.bootstrap_resamples, plots=not a.no_plots, progress=not a.quiet,
                            cache_dir=a.cache_dir,
                            prd_kwargs={"num_runs": a.prd_runs, "n_init": a.prd_n_init, "kmeans": a.prd_kmeans},
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
