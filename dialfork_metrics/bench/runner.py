"""``run_benchmark``: every task on every encoder, each encoder encoding the corpus once, then the reports."""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .. import registry
from ..methods import (
    TASK1_COMPARED,
    TASK1_METHODS,
    TASK2_METHODS,
    TASK3_DETECTORS,
)
from .common import DEFAULT_PRD, BenchError, _check_methods, _summarised
from .corpus import Corpus, load_corpus, prepare_encoder
from .protocols import DEFAULT_N_REFERENCES, cross_references, parse_task2_protocol
from .task1 import _pair_encoder, run_task1, task1_comparisons, tau_confidence_intervals
from .task2 import distance_by_k, load_custom_metric, run_task2, task2_significance
from .task3 import run_task3, task3_weight_sweep

logger = logging.getLogger(__name__)


def package_versions() -> dict[str, str]:
    """The versions of Python and of the packages the results depend on, for the report's metadata.

    Returns:
        A dict with ``python`` and one key per distribution (``dialfork``, ``numpy``, ``scipy``,
        ``scikit-learn``, ``torch``, ``transformers``, ``sentence-transformers``, ``datasets``,
        ``evaluate``, ``statsmodels``, ``numba``) mapping to its version string or
        ``"not installed"``.
    """
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for pkg in (
        "dialfork",
        "numpy",
        "scipy",
        "scikit-learn",
        "torch",
        "transformers",
        "sentence-transformers",
        "datasets",
        "evaluate",
        "statsmodels",
        "numba",
    ):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


def run_benchmark(
    data: str | os.PathLike,
    tasks: Sequence[int] = (1, 2, 3),
    encoders: Sequence[str] = ("minilm",),
    out: str | os.PathLike | None = None,
    seed: int = 0,
    task1_methods: Sequence[str] = TASK1_METHODS,
    task2_methods: Sequence[str] = TASK2_METHODS,
    task3_detectors: Sequence[str] = TASK3_DETECTORS,
    custom_metrics: Sequence[str] = (),
    graph_task: str | None = None,
    device: str | None = None,
    batch_size: int = 64,
    n_resamples: int = 10_000,
    plots: bool = True,
    progress: bool = True,
    cache_dir: str | None = None,
    prd_kwargs: Mapping[str, Any] | None = None,
    task1_encoder: str | None = None,
    pair_encoder: str | Mapping[str, str] | None = None,
    task1_compare: Sequence[str] = TASK1_COMPARED,
    runtime: str = "torch",
    task3_kwargs: Mapping[str, Any] | None = None,
    task2_protocol: str = "same-source",
    n_references: int = DEFAULT_N_REFERENCES,
) -> dict[str, Any]:
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

    ``task2_protocol`` (:mod:`~dialfork_metrics.bench.protocols`): ``"same-source"`` (the paper's,
    the default), ``"cross"`` (each fork against ``n_references`` conformant dialogues of other
    scenarios; Task 1's reference set from sources disjoint from the forks') or ``"both"``. The
    same-source results go to ``task1``/``task2`` as before, the cross ones to
    ``task1_cross``/``task2_cross``.

    Args:
        data: A generator output folder, an exported Hub layout folder, or a Hub dataset id
            (:func:`load_corpus`).
        tasks: The tasks to run, among 1, 2, 3.
        encoders: Encoder aliases or paths of Tasks 2 and 3 (each gives its own rows); the first
            is also Task 1's unless ``task1_encoder`` is given.
        out: Folder for the reports (Markdown, CSV, JSON, PNG); None: nothing is written.
        seed: Seed of PRD, the bootstraps, the permutation tests and the random baselines.
        task1_methods: Task 1 methods (names of :data:`TASK1_METHODS`).
        task2_methods: Task 2 methods (names of :data:`TASK2_METHODS`).
        task3_detectors: Task 3 detectors: registered names (:mod:`dialfork_metrics.task3.registry`;
            default :data:`TASK3_DETECTORS`, those ``in_benchmark``).
        custom_metrics: User Task 2 distances, each ``NAME=module:function`` or an evaluate module
            path (:func:`load_custom_metric`).
        graph_task: Task whose flow graph is drawn; None: the first.
        device: Torch device of the encoders; None: chosen automatically.
        batch_size: Encoder batch size.
        n_resamples: Paired bootstrap resamples of the confidence intervals.
        plots: Write the PNG figures (with ``out``).
        progress: Show progress bars.
        cache_dir: Persistent embedding cache folder; None: memory only.
        prd_kwargs: PRD options over :data:`DEFAULT_PRD`.
        task1_encoder: Encoder of FlowKL's graph in Task 1; None: the first of ``encoders``.
        pair_encoder: Encoder of the (system, user) pairs of FBD and PRD: one name, or
            ``{"fbd": name, "prd": name}``; None: ``task1_encoder``'s.
        task1_compare: Methods FlowKL is tested against in Task 1 (one Holm family).
        runtime: Encoder runtime: ``"torch"``, ``"onnx"`` or ``"onnx-int8"``.
        task3_kwargs: Keyword arguments of :func:`run_task3`.
        task2_protocol: ``"same-source"``, ``"cross"`` or ``"both"`` (Tasks 1 and 2).
        n_references: Conformant references per source under the cross protocol.

    Returns:
        The report dict: ``meta`` (data, corpus fingerprint, counts, tasks, encoders, seed,
        resamples, runtime, PRD options, Task 1 encoders, package versions, ``n_skipped_units``),
        ``skipped`` (messages of the units and configs that could not be computed), ``timings``
        (seconds per stage, ``total`` and ``encoding_share``), and per task run ``task1``,
        ``task2`` (``per_encoder`` and ``significance``), ``task3`` (per encoder, without the
        per-dialogue predictions) and ``task3_weight_sweep`` (per encoder); under the cross
        protocol ``task1_cross`` and ``task2_cross``, laid out as ``task1`` and ``task2``
        (``meta`` names the ``task2_protocols`` and ``n_references``).

    Raises:
        BenchError: An unknown task, method or protocol, ``n_references`` below 1, no encoder, a
            bad ``pair_encoder`` mapping or custom metric, an unreadable corpus, or a corpus without a train and a test split
            for Task 3.
        ValueError: An unknown encoder name.
        RecordError: The corpus folder holds invalid records.
        FileNotFoundError: The corpus folder holds no record file.
    """
    prd_kwargs = {**DEFAULT_PRD, **(prd_kwargs or {})}
    from ..encoders import resolve_encoder_name

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
    from ..task3 import registry as detector_registry

    _check_methods(task3_detectors, detector_registry.names(), "Task 3")  # any registered detector
    custom = dict(load_custom_metric(s) for s in custom_metrics)
    protocols = parse_task2_protocol(task2_protocol)
    if "cross" in protocols:
        cross_references([], n_references)  # a bad count -> BenchError before any work

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    skipped: list[str] = []
    corpus = load_corpus(data, skipped)
    timings["load"] = time.perf_counter() - t_start
    report: dict[str, Any] = {
        "meta": {
            "data": str(data),
            "fingerprint": corpus.fingerprint(),
            "n_records": len(corpus.records),
            "n_conformant": len(corpus.conformant),
            "tasks": list(tasks),
            "encoders": list(encoders),
            "seed": seed,
            "bootstrap_resamples": n_resamples,
            "runtime": runtime,
            "prd": dict(prd_kwargs or {}),
            "task1_encoders": {"flowkl": t1_name, **pair_names},
            "versions": package_versions(),
            "task2_protocols": list(protocols),
            **({"n_references": n_references} if "cross" in protocols else {}),
        },
        "skipped": skipped,
    }
    task2_by_encoder: dict[str, Any] = {}
    task2_cross_by_encoder: dict[str, Any] = {}
    task3_by_encoder: dict[str, Any] = {}
    graph = None
    t1_kw = dict(
        methods=task1_methods,
        pair_names=pair_names,
        seed=seed,
        skipped=skipped,
        progress=progress,
        prd_kwargs=prd_kwargs,
        compare=task1_compare,
        n_resamples=n_resamples,
        timings=timings,
        device=device,
        batch_size=batch_size,
        cache_dir=cache_dir,
        graph_task=graph_task,
        protocols=protocols,
    )
    t1_resolved = resolve_encoder_name(t1_name)
    if 1 in tasks and all(resolve_encoder_name(e) != t1_resolved for e in encoders):
        enc1 = prepare_encoder(
            t1_name,
            corpus.records,
            device=device,
            batch_size=batch_size,
            cache_dir=cache_dir,
            transcripts=False,
            timings=timings,
            progress=progress,
            runtime=runtime,
        )
        graph = _task1_stages(report, corpus, enc1, t1_name, **t1_kw)
        del enc1
    for name in encoders:
        runs_task1 = (
            1 in tasks
            and "task1" not in report
            and "task1_cross" not in report
            and resolve_encoder_name(name) == t1_resolved
        )
        if not (runs_task1 or 2 in tasks or 3 in tasks):
            continue
        enc = prepare_encoder(
            name,
            corpus.records,
            device=device,
            batch_size=batch_size,
            cache_dir=cache_dir,
            transcripts=2 in tasks,
            timings=timings,
            progress=progress,
            runtime=runtime,
        )
        if runs_task1:
            graph = _task1_stages(report, corpus, enc, name, **t1_kw)
        if 2 in tasks:
            t0 = time.perf_counter()
            if "same-source" in protocols:
                with _summarised(f"Task 2 ({name})"):
                    task2_by_encoder[name] = run_task2(
                        corpus, enc, task2_methods, seed=seed, custom=custom, skipped=skipped
                    )
                timings[f"task2:{name}"] = time.perf_counter() - t0
            if "cross" in protocols:
                t0 = time.perf_counter()
                cross_skipped: list[str] = []
                with _summarised(f"Task 2 cross ({name})"):
                    task2_cross_by_encoder[name] = run_task2(
                        corpus,
                        enc,
                        task2_methods,
                        seed=seed,
                        custom=custom,
                        skipped=cross_skipped,
                        protocol="cross",
                        n_references=n_references,
                    )
                _merge_skipped(skipped, cross_skipped)
                timings[f"task2_cross:{name}"] = time.perf_counter() - t0
        if 3 in tasks:
            t0 = time.perf_counter()
            with _summarised(f"Task 3 ({name})"):
                r3 = run_task3(
                    corpus, enc, task3_detectors, seed=seed, progress=progress, **(task3_kwargs or {})
                )
            r3.pop("predictions")
            task3_by_encoder[name] = r3
            timings[f"task3:{name}"] = time.perf_counter() - t0
    for key, by_encoder in (("task2", task2_by_encoder), ("task2_cross", task2_cross_by_encoder)):
        if 2 not in tasks or not by_encoder:
            continue
        t0 = time.perf_counter()
        report[key] = {
            "per_encoder": {
                e: {"summary": r["summary"], "units": r["units"], "methods": r["methods"]}
                for e, r in by_encoder.items()
            },
            "significance": task2_significance(by_encoder, n_resamples=n_resamples, seed=seed),
            "protocol": "same-source" if key == "task2" else "cross",
        }
        if key == "task2_cross":
            report[key]["n_references"] = n_references
        _task2_intervals(report[key]["per_encoder"], n_resamples, seed)
        timings[f"{key}:significance"] = time.perf_counter() - t0
    if 3 in tasks:
        report["task3"] = task3_by_encoder
        report["task3_weight_sweep"] = {
            e: task3_weight_sweep(r["results"]) for e, r in task3_by_encoder.items()
        }
    timings["total"] = time.perf_counter() - t_start
    enc_time = sum(v for k, v in timings.items() if k.startswith("encode:"))
    timings["encoding_share"] = enc_time / timings["total"] if timings["total"] else 0.0
    report["timings"] = timings
    report["skipped"] = skipped
    report["meta"]["n_skipped_units"] = len(skipped)
    if out is not None:
        from ..report import write_reports

        write_reports(report, out, plots=plots, graph=graph)
    return report


def _pair_encoder_names(pair_encoder: str | Mapping[str, str] | None, default: str) -> dict[str, str]:
    """``{"fbd": name, "prd": name}`` (the registry's set metrics that need a pair encoder) from
    ``--pair-encoder`` (one name, or per metric)."""
    known = registry.names("set", needs="pair_encoder")
    if pair_encoder is None or isinstance(pair_encoder, str):
        return {m: pair_encoder or default for m in known}
    unknown = set(pair_encoder) - set(known)
    if unknown:
        raise BenchError(f"pair encoders are given per metric ({', '.join(known)}), got {sorted(unknown)}")
    return {m: pair_encoder.get(m) or default for m in known}


def _task1_stages(
    report: dict[str, Any], corpus: Corpus, enc: Any, name: str, *, protocols: Sequence[str], **kw: Any
) -> Any:
    """Task 1 under each protocol into ``report`` (``task1``, ``task1_cross``); returns the graph to
    draw (the same-source one when it ran)."""
    graph = None
    loaded: dict[str, Any] = {}  # the pair encoders, shared by the protocols: pairs are encoded once
    skipped = kw.pop("skipped")
    for p in protocols:
        key = "task1" if p == "same-source" else "task1_cross"
        mine: list[str] = []
        report[key], g = _task1_stage(corpus, enc, name, protocol=p, loaded=loaded, skipped=mine, **kw)
        _merge_skipped(skipped, mine)
        graph = graph or g
    return graph


def _merge_skipped(skipped: list[str], more: Sequence[str]) -> None:
    """Append the messages of ``more`` not already in ``skipped`` (a unit the protocols share, e.g. one
    missing a fork position, is reported once)."""
    seen = set(skipped)
    skipped.extend(m for m in more if m not in seen)


def _task1_stage(
    corpus: Corpus,
    enc: Any,
    name: str,
    *,
    methods,
    pair_names,
    seed,
    skipped,
    progress,
    prd_kwargs,
    compare,
    n_resamples,
    timings,
    device,
    batch_size,
    cache_dir,
    graph_task,
    protocol: str = "same-source",
    loaded: dict[str, Any] | None = None,
) -> tuple[dict, Any]:
    """Task 1 with ``enc`` for FlowKL and the pair encoders named in ``pair_names``; every (system,
    user) pair of the corpus is encoded once per pair model, up front. Returns (report part, graph)."""
    from ..encoders import get_encoder, resolve_encoder_name

    loaded = {} if loaded is None else loaded
    pes: dict[str, Any] = {}
    for m in (m for m in methods if "pair_encoder" in registry.get(m, "set").needs):
        key = resolve_encoder_name(pair_names[m])
        if key not in loaded:
            t0 = time.perf_counter()
            base = (
                enc
                if key == resolve_encoder_name(name)
                else get_encoder(
                    pair_names[m],
                    shared=False,
                    device=device,
                    batch_size=batch_size,
                    cache_dir=cache_dir,
                    show_progress=None if progress else False,
                    runtime=getattr(enc, "runtime", "torch"),
                )
            )
            pe = _pair_encoder(base, progress)
            pe.encode_sets(corpus.records)  # every (system, user) pair once; Task 1 reads the cache
            timings[f"encode:{pair_names[m]}:pairs"] = time.perf_counter() - t0
            loaded[key] = pe
        pes[m] = loaded[key]
    t0 = time.perf_counter()
    r1 = run_task1(
        corpus,
        enc,
        methods,
        seed=seed,
        skipped=skipped,
        progress=progress,
        pair_encoder=pes,
        prd_kwargs=prd_kwargs,
        protocol=protocol,
    )
    r1["comparisons"] = task1_comparisons(r1["units"], against=compare, n_resamples=n_resamples, seed=seed)
    r1["summary"]["tau_ci"] = tau_confidence_intervals(r1["units"], methods, "task", n_resamples, seed)
    timings["task1" if protocol == "same-source" else "task1_cross"] = time.perf_counter() - t0
    graphs = {k: v for k, v in r1.pop("graphs").items() if isinstance(k, str)}
    gt = graph_task or (sorted(graphs)[0] if graphs else None)
    used = {"flowkl": name, **{m: pair_names[m] for m in pes}}
    return {**r1, "encoder": name, "encoders": used}, ((gt, graphs.get(gt)) if gt else None)


def _task2_intervals(per_encoder: Mapping[str, dict[str, Any]], n_resamples: int, seed: int) -> None:
    """Add each encoder's tau CIs and absolute distance-by-k curves (with CIs) to its summary."""
    for res in per_encoder.values():
        res["summary"]["tau_ci"] = tau_confidence_intervals(
            res["units"], res["methods"], "source_id", n_resamples, seed
        )
        res["summary"]["distance_by_k"] = distance_by_k(res["units"], res["methods"], n_resamples, seed)
