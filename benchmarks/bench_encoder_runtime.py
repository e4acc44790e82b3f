"""Encoder runtimes: ``runtime="onnx"`` (and ``"onnx-int8"``) against ``runtime="torch"``, same CPU,
same texts, in one run (target: onnx >= 1.4x the texts/s of torch, with equal values).

    python benchmarks/bench_encoder_runtime.py                      # 2,000 STAR turns, 500 pairs, 3 repeats
    python benchmarks/bench_encoder_runtime.py --int8 --drift       # + int8, + Tasks 1-3 drift on a template corpus
    python benchmarks/bench_encoder_runtime.py --n-transcripts 400 --project benchmarks/results/pipeline_full_summary.json

Takes the first ``--n-texts`` unique turn texts of the STAR human dialogues (and the first
``--n-pairs`` (system, user) turn pairs for FBD/PRD's pair encoder), exports the packaged MiniLM
to ONNX (cached; the export is not timed), then times each runtime encoding the same texts from
an empty memory cache, ``--repeats`` times, interleaved (the order alternates each repeat, so a
noisy machine loads both alike). Prints each repeat, the median ratio (torch seconds / onnx
seconds), the smallest cosine of each embedding to the torch one and the largest absolute
difference.

``--n-transcripts N`` also times N whole-dialogue transcripts (``"user: ...\nsystem: ..."``, the
Full-dialog input, truncated at the encoder's 256 tokens) of the STAR human dialogues: 97% of the
full template corpus's encoding time is its 79,407 transcripts (16.4M token positions), so their
ratio, not the turns', decides the pipeline. ``--project SUMMARY`` reads the stage times of a
``bench_pipeline.py`` run with ``runtime="torch"`` (its ``pipeline_full_summary.json``) and
projects that run's time with onnx: each encoding stage divided by the ratio measured here for its
kind (transcripts for the turn-and-transcript stage, pairs for the pair stage), the rest unchanged.

``--drift`` also runs Tasks 1-3 (``dialfork_metrics.bench.run_benchmark``) on a small template
corpus with each runtime and reports, against torch, the largest difference of any number of the
reports, each tau / Score difference, and whether any ranking of methods (Task 1 and Task 2 by
their average tau, Task 3 by Score) changes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def star_dialogue_turns(star: Path):
    """Each STAR human dialogue's utterances as ``(speaker, text)``, file order (the package's reader,
    either STAR layout)."""
    from dialfork_dataset.star import StarCorpus

    for d in StarCorpus(star).human_dialogues():
        yield [
            ("user" if e["agent"] == "User" else "system", e["text"])
            for e in d["events"]
            if isinstance(e.get("text"), str)
            and e["text"].strip()
            and e.get("action") in ("utter", "pick_suggestion")
        ]


def star_turns(star: Path, n_texts: int, n_pairs: int) -> tuple[list[str], list[tuple[str, str]]]:
    """First unique turn texts and (system, user) pairs of the STAR human dialogues, file order."""
    texts: dict[str, None] = {}
    pairs: dict[tuple[str, str], None] = {}
    for turns in star_dialogue_turns(star):
        for (prev_spk, prev_text), (spk, text) in zip([(None, None)] + turns, turns):
            if len(texts) < n_texts:
                texts[text] = None
            if prev_spk == "system" and spk == "user" and len(pairs) < n_pairs:
                pairs[(prev_text, text)] = None
        if len(texts) >= n_texts and len(pairs) >= n_pairs:
            break
    return list(texts), list(pairs)


def star_transcripts(star: Path, n: int) -> list[str]:
    """Transcripts (the Full-dialog input) of the first ``n`` STAR human dialogues, file order."""
    from dialfork_dataset.turns import transcript

    out: list[str] = []
    for turns in star_dialogue_turns(star):
        if len(out) >= n:
            break
        if turns:
            out.append(transcript([{"speaker": spk, "text": text} for spk, text in turns]))
    return list(dict.fromkeys(out))


def project(summary_path: Path, ratios: dict[str, float]) -> dict:
    """A torch ``bench_pipeline`` run's time with each encoding stage divided by its measured ratio."""
    t = json.loads(summary_path.read_text())["timings"]
    enc_turns = sum(v for k, v in t.items() if k.startswith("encode:") and not k.endswith(":pairs"))
    enc_pairs = sum(v for k, v in t.items() if k.startswith("encode:") and k.endswith(":pairs"))
    total = t["total"]
    rest = total - enc_turns - enc_pairs
    onnx = enc_turns / ratios["transcripts"] + enc_pairs / ratios["pairs"] + rest
    return {
        "from": str(summary_path),
        "torch_total_s": round(total, 1),
        "encode_turns_and_transcripts_s": round(enc_turns, 1),
        "encode_pairs_s": round(enc_pairs, 1),
        "rest_s": round(rest, 1),
        "ratios_used": ratios,
        "projected_onnx_total_s": round(onnx, 1),
        "projected_time_ratio_onnx_vs_torch": round(onnx / total, 3),
    }


def _numbers(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in ("seconds", "timings"):
                yield from _numbers(v, f"{path}/{k}")
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{path}/{i}")
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool):
        yield path, float(obj)


def _rankings(rep: dict) -> dict[str, list[str]]:
    t1 = rep["task1"]["summary"]["tau"]
    t2 = next(iter(rep["task2"]["per_encoder"].values()))["summary"]["tau"]
    t3 = next(iter(rep["task3"].values()))["results"]

    def order(d: dict, key) -> list[str]:
        return sorted(d, key=lambda m: (-(key(d[m]) if key(d[m]) is not None else float("-inf")), m))

    return {
        "task1_by_avg_tau": order(t1, lambda r: r["Avg"]),
        "task2_by_avg_tau": order(t2, lambda r: r["Avg"]),
        "task3_by_score": order(t3, lambda r: r["score"]),
    }


def drift(args, runtimes: list[str]) -> dict:
    from dialfork_metrics.bench import run_benchmark
    from generation import GenerationConfig, generate_corpus

    corpus = Path(args.out) / "drift_corpus"
    generate_corpus(
        GenerationConfig(
            star=str(args.star),
            out=str(corpus),
            tasks=tuple(args.drift_tasks.split(",")),
            per_task=args.drift_per_task,
            seed=0,
        ),
        progress=False,
    )
    reps = {
        rt: run_benchmark(
            corpus,
            tasks=(1, 2, 3),
            encoders=("minilm",),
            out=None,
            n_resamples=1000,
            progress=False,
            runtime=rt,
        )
        for rt in runtimes
    }
    base = dict(_numbers({k: reps["torch"][k] for k in ("task1", "task2", "task3")}))
    rank0 = _rankings(reps["torch"])
    out = {"corpus": str(corpus), "n_records": reps["torch"]["meta"]["n_records"]}
    for rt in runtimes[1:]:
        got = dict(_numbers({k: reps[rt][k] for k in ("task1", "task2", "task3")}))
        diffs = {k: abs(got[k] - v) for k, v in base.items() if k in got and v == v and got[k] == got[k]}
        key = lambda k: ("/summary/tau/" in k) or k.endswith("/score")  # noqa: E731
        tau_score = {k: d for k, d in diffs.items() if key(k)}
        rk = _rankings(reps[rt])
        out[rt] = {
            "numbers_compared": len(diffs),
            "max_abs_diff_any": max(diffs.values(), default=0.0),
            "numbers_differing_at_4_decimals": sum(d >= 5e-5 for d in diffs.values()),
            "max_abs_diff_tau_or_score": max(tau_score.values(), default=0.0),
            "tau_and_score_diffs": {k: round(d, 6) for k, d in sorted(tau_score.items()) if d > 0},
            "rankings_changed": {k: {"torch": rank0[k], rt: rk[k]} for k in rk if rk[k] != rank0[k]},
        }
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--star",
        type=Path,
        default=Path(os.environ.get("DIALFORK_STAR_DIR", ROOT.parent / "shared" / "star")),
    )
    ap.add_argument("--n-texts", type=int, default=2000)
    ap.add_argument("--n-pairs", type=int, default=500)
    ap.add_argument(
        "--n-transcripts",
        type=int,
        default=0,
        help="also time this many whole-dialogue transcripts (256-token Full-dialog inputs)",
    )
    ap.add_argument(
        "--project",
        type=Path,
        default=None,
        help="a torch bench_pipeline summary JSON: project its time with onnx (needs --n-transcripts)",
    )
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--int8", action="store_true", help="also time runtime='onnx-int8' and report its drift")
    ap.add_argument("--drift", action="store_true", help="Tasks 1-3 on a template corpus with each runtime")
    ap.add_argument("--drift-tasks", default="weather,doctor_schedule")
    ap.add_argument("--drift-per-task", type=int, default=8)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "encoder_runtime"))
    ap.add_argument("--json", default=None, help="also write the summary here")
    args = ap.parse_args()

    import numpy as np
    import torch

    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.pair_encoder import PairEncoder

    texts, pairs = star_turns(args.star, args.n_texts, args.n_pairs)
    transcripts = star_transcripts(args.star, args.n_transcripts) if args.n_transcripts else []
    if args.project and not (transcripts and pairs):
        ap.error("--project needs --n-transcripts > 0 and --n-pairs > 0")
    runtimes = ["torch", "onnx"] + (["onnx-int8"] if args.int8 else [])
    base = Encoder("minilm", batch_size=args.batch_size, show_progress=False)
    encs = {
        rt: base
        if rt == "torch"
        else Encoder("minilm", batch_size=args.batch_size, show_progress=False, runtime=rt, model=base.model)
        for rt in runtimes
    }
    pencs = {
        rt: PairEncoder(e, batch_size=args.batch_size, show_progress=False, cache_dir=False)
        for rt, e in encs.items()
    }
    t0 = time.perf_counter()
    for rt in runtimes:  # warm-up, and the export (cached on disk) outside the timings
        encs[rt].encode(texts[:8])
        pencs[rt].encode_pairs([a for a, _ in pairs[:8]], [b for _, b in pairs[:8]])
    setup_s = time.perf_counter() - t0
    kinds = ("texts", "pairs", "transcripts")
    times: dict[str, dict[str, list[float]]] = {w: {rt: [] for rt in runtimes} for w in kinds}
    emb: dict[str, dict[str, np.ndarray]] = {w: {} for w in kinds}
    load_before = os.getloadavg()
    for r in range(args.repeats):
        for rt in runtimes if r % 2 == 0 else runtimes[::-1]:
            encs[rt].clear_cache()
            t = time.perf_counter()
            emb["texts"][rt] = encs[rt].encode(texts)
            times["texts"][rt].append(time.perf_counter() - t)
            if pairs:
                pencs[rt]._cache.clear()
                t = time.perf_counter()
                emb["pairs"][rt] = pencs[rt].encode_pairs([a for a, _ in pairs], [b for _, b in pairs])
                times["pairs"][rt].append(time.perf_counter() - t)
            if transcripts:
                encs[rt].clear_cache()
                t = time.perf_counter()
                emb["transcripts"][rt] = encs[rt].encode(transcripts)
                times["transcripts"][rt].append(time.perf_counter() - t)
    summary: dict = {
        "n_texts": len(texts),
        "n_pairs": len(pairs),
        "n_transcripts": len(transcripts),
        "repeats": args.repeats,
        "batch_size": args.batch_size,
        "torch_threads": torch.get_num_threads(),
        "cpus": os.cpu_count(),
        "setup_and_export_s": round(setup_s, 1),
        "load_before": [round(x, 2) for x in load_before],
    }
    for what in kinds:
        if not times[what]["torch"]:
            continue
        ref = emb[what]["torch"].astype(np.float64)
        n = len(ref)
        for rt in runtimes:
            per = times[what][rt]
            row = {
                "seconds": [round(x, 2) for x in per],
                "per_s_median": round(n / statistics.median(per), 1),
            }
            if rt != "torch":
                ratios = [a / b for a, b in zip(times[what]["torch"], per)]
                got = emb[what][rt].astype(np.float64)
                cos = (ref * got).sum(1) / np.linalg.norm(ref, axis=1) / np.linalg.norm(got, axis=1)
                row.update(
                    {
                        "ratio_vs_torch_each": [round(x, 3) for x in ratios],
                        "ratio_vs_torch_median": round(statistics.median(ratios), 3),
                        "min_cosine_to_torch": float(cos.min()),
                        "max_abs_diff": float(np.abs(ref - got).max()),
                    }
                )
            summary[f"{what}:{rt}"] = row
    summary["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.project:
        summary["projection"] = project(
            args.project, {w: summary[f"{w}:onnx"]["ratio_vs_torch_median"] for w in ("transcripts", "pairs")}
        )
    if args.drift:
        summary["drift"] = drift(args, runtimes)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    o = summary["texts:onnx"]
    ok = o["ratio_vs_torch_median"] >= 1.4 and o["min_cosine_to_torch"] >= 1 - 1e-6
    print(
        f"onnx vs torch: {o['ratio_vs_torch_median']:.2f}x the texts/s (median of {args.repeats}), min cosine "
        f"{o['min_cosine_to_torch']:.9f}; target >= 1.4x with cosine >= 1 - 1e-6: {'met' if ok else 'NOT met'}"
    )
    if "pairs:onnx" in summary:
        print(f"onnx vs torch on turn pairs: {summary['pairs:onnx']['ratio_vs_torch_median']:.2f}x")
    if "transcripts:onnx" in summary:
        print(f"onnx vs torch on transcripts: {summary['transcripts:onnx']['ratio_vs_torch_median']:.2f}x")
    if "projection" in summary:
        pr = summary["projection"]
        print(
            f"projected bench_pipeline time with onnx: {pr['projected_onnx_total_s']:.0f} s against torch's "
            f"{pr['torch_total_s']:.0f} s, {pr['projected_time_ratio_onnx_vs_torch']:.2f}x the time (target <= 0.7x)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
