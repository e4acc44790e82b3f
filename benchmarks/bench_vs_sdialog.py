"""FlowKL and FBD: DialFork (``compat="sdialog"``) against sdialog 0.5.3, same inputs, same encoder.

Reads the STAR human dialogues of one task (``../shared/star/dialogues.jsonl.gz`` beside the project, or
``--star``), takes the first ``--n-ref`` single-task dialogues (by STAR id) as the reference set
and the next ``--n-tgt`` as the target set, and computes

- FlowKL: sdialog ``KDEDistanceEvaluator(DialogFlowScore(refs, node_embedding_model=<minilm>))(tgts)``
  vs ``dialfork_metrics.flowkl(refs, tgts, Encoder("minilm"), compat="sdialog")``;
- FBD: sdialog ``FrechetBERTDistanceEvaluator(refs, model_name=<minilm>)(tgts)``
  vs ``dialfork_metrics.fbd(refs, tgts, Encoder("minilm"), compat="sdialog")``;

both with the packaged all-MiniLM-L6-v2 (offline). sdialog runs in its own virtual environment
(``benchmarks/_venvs/sdialog``; built here with ``pip`` if missing, which needs network once), in
a subprocess. Times are wall-clock seconds of the metric call *including* loading the model, on
each side, excluding Python imports; DialFork is also timed warm (model already loaded). The
script prints the times, the speed ratios (target >= 10x), the relative differences of the
values (target < 1e-4) and of the per-dialogue flow scores, and the machine's load average.

    python3 benchmarks/bench_vs_sdialog.py [--task doctor_schedule] [--n-ref 150] [--n-tgt 70] [--json out.json]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VENV = ROOT / "benchmarks" / "_venvs" / "sdialog"
DEFAULT_STAR = ROOT.parent / "shared" / "star"

WORKER = r"""
import json, sys, time, os, logging
logging.disable(logging.WARNING)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
args = json.load(open(sys.argv[1]))
from sdialog import Dialog, Turn
from sdialog.evaluation import DialogFlowScore, KDEDistanceEvaluator, FrechetBERTDistanceEvaluator
from sdialog.util import CacheDialogScore
CacheDialogScore.set_enable_cache(False)
def load(path):
    return [Dialog(id=d["id"], turns=[Turn(speaker=t["speaker"], text=t["text"]) for t in d["turns"]])
            for d in json.load(open(path))]
refs, tgts = load(args["ref"]), load(args["tgt"])
out = {}
if "flowkl" in args["metrics"]:
    t = time.perf_counter()
    dfs = DialogFlowScore(refs, node_embedding_model=args["model"], verbose=False)
    ev = KDEDistanceEvaluator(dfs)
    kl, scores = ev(tgts, return_scores=True)
    out["flowkl"] = {"value": kl, "time": time.perf_counter() - t,
                     "ref_scores": [float(x) for x in ev.reference_scores], "tgt_scores": [float(x) for x in scores],
                     "vocab_size": dfs.vocab_size}
if "fbd" in args["metrics"]:
    t = time.perf_counter()
    fb = FrechetBERTDistanceEvaluator(refs, model_name=args["model"], verbose=False)
    v = fb(tgts)
    out["fbd"] = {"value": v, "time": time.perf_counter() - t}
json.dump(out, open(args["out"], "w"))
"""


def load_star_task(star: Path, task: str) -> list[dict]:
    """The single-task STAR human dialogues of ``task``, as DialFork dialogues, sorted by id."""
    out = []
    with gzip.open(star / "dialogues.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if d.get("tasks") != [task]:
                continue
            turns = []
            for e in d["events"]:
                text = e.get("text")
                if not isinstance(text, str) or not text.strip():
                    continue
                if e["agent"] == "User" and e["action"] == "utter":
                    turns.append({"speaker": "user", "text": text})
                elif e["agent"] == "Wizard" and e["action"] in ("utter", "pick_suggestion"):
                    turns.append({"speaker": "system", "text": text})
            if len(turns) >= 2:
                out.append({"dialogue_id": f"star-{d['dialogue_id']}", "turns": turns})
    out.sort(key=lambda d: int(d["dialogue_id"].split("-")[1]))
    return out


def ensure_venv(build: bool) -> Path:
    py = VENV / "bin" / "python"
    if py.exists():
        return py
    if not build:
        sys.exit(f"no sdialog venv at {VENV}; rerun without --no-build (needs network once)")
    print(f"building {VENV} (torch 2.13.0 + sdialog 0.5.3; takes minutes)...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "torch==2.13.0"], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "sdialog==0.5.3"], check=True)
    return py


def padded_tokens(dialogues: list[dict], model: str, batch_size: int = 64, sdialog_batch: int = 128) -> dict:
    """Token positions each side feeds the transformer for the FBD pairs of ``dialogues``."""
    from transformers import AutoTokenizer

    from dialfork_metrics.pair_encoder import set_turn_pairs

    tok = AutoTokenizer.from_pretrained(model)
    pairs = set_turn_pairs(dialogues, "sliding")
    lens = [len(x) for x in tok([a for a, _ in pairs], [b for _, b in pairs], truncation=True)["input_ids"]]
    longest = max(lens)
    ulen = sorted(dict(zip(pairs, lens)).values())
    ours = sum(
        max(ulen[i : i + batch_size]) * len(ulen[i : i + batch_size]) for i in range(0, len(ulen), batch_size)
    )
    sd = longest * len(lens)
    return {
        "pairs": len(lens),
        "unique_pairs": len(ulen),
        "longest": longest,
        "sdialog": sd,
        "ours": ours,
        "bound": sd / ours,
        "sdialog_batch": sdialog_batch,
    }


def print_fbd_bounds(star: Path, n: int) -> None:
    """The FBD token-position ratio (sdialog / ours) on the first ``n`` dialogues of each STAR task."""
    from dialfork_metrics.encoders import packaged_minilm_path

    model = packaged_minilm_path()
    with gzip.open(star / "dialogues.jsonl.gz", "rt", encoding="utf-8") as f:
        tasks = sorted({d["tasks"][0] for d in map(json.loads, f) if len(d.get("tasks") or []) == 1})
    bounds = []
    for task in tasks:
        dialogues = load_star_task(star, task)
        if len(dialogues) < n:
            print(f"{task:24s} {len(dialogues):4d} single-task dialogues (< {n}): skipped")
            continue
        t = padded_tokens(dialogues[:n], model)
        bounds.append(t["bound"])
        print(
            f"{task:24s} longest pair {t['longest']:4d} tokens | sdialog {t['sdialog']:8,} positions | "
            f"ours {t['ours']:8,} | ratio {t['bound']:.2f}x"
        )
    if bounds:
        print(
            f"{len(bounds)} tasks: ratio {min(bounds):.2f}x to {max(bounds):.2f}x (median {sorted(bounds)[len(bounds) // 2]:.2f}x)"
        )


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-300)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="doctor_schedule")
    ap.add_argument("--n-ref", type=int, default=150)
    ap.add_argument("--n-tgt", type=int, default=70)
    ap.add_argument("--star", type=Path, default=Path(os.environ.get("DIALFORK_STAR_DIR", DEFAULT_STAR)))
    ap.add_argument("--metrics", default="flowkl,fbd", help="comma-separated: flowkl,fbd")
    ap.add_argument("--no-build", action="store_true", help="do not build the sdialog venv if missing")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument(
        "--runtime",
        default="torch",
        choices=["torch", "onnx", "onnx-int8"],
        help="DialFork's encoder runtime (onnx: exported once and cached on disk; the export is not timed)",
    )
    ap.add_argument(
        "--fbd-bound-all-tasks",
        action="store_true",
        help="only print, for every STAR task with enough single-task dialogues, the FBD token-position "
        "ratio sdialog/ours (the ceiling of a value-preserving cold speed-up); runs no model",
    )
    args = ap.parse_args()
    metrics = [m for m in args.metrics.split(",") if m]

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.fbd_bound_all_tasks:
        print_fbd_bounds(args.star, args.n_ref + args.n_tgt)
        return
    dialogues = load_star_task(args.star, args.task)
    if len(dialogues) < args.n_ref + args.n_tgt:
        sys.exit(
            f"task {args.task} has {len(dialogues)} single-task dialogues, need {args.n_ref + args.n_tgt}"
        )
    ref, tgt = dialogues[: args.n_ref], dialogues[args.n_ref : args.n_ref + args.n_tgt]
    n_turns = sum(len(d["turns"]) for d in ref + tgt)
    load0 = os.getloadavg()
    print(
        f"STAR task {args.task}: {len(ref)} reference vs {len(tgt)} target dialogues ({n_turns} turns); "
        f"{os.cpu_count()} CPUs, load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f}",
        flush=True,
    )

    from dialfork_metrics.encoders import packaged_minilm_path
    from dialfork_metrics.sdialog_compat import write_sdialog_json

    model = packaged_minilm_path()
    py = ensure_venv(not args.no_build)
    results: dict = {
        "task": args.task,
        "n_ref": len(ref),
        "n_tgt": len(tgt),
        "n_turns": n_turns,
        "load_before": load0,
        "cpus": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        write_sdialog_json(Path(tmp) / "ref.json", ref, "reference set")
        write_sdialog_json(Path(tmp) / "tgt.json", tgt, "target set")
        (Path(tmp) / "worker.py").write_text(WORKER)
        (Path(tmp) / "args.json").write_text(
            json.dumps(
                {
                    "ref": str(Path(tmp) / "ref.json"),
                    "tgt": str(Path(tmp) / "tgt.json"),
                    "model": model,
                    "metrics": metrics,
                    "out": str(Path(tmp) / "out.json"),
                }
            )
        )
        print("running sdialog 0.5.3 ...", flush=True)
        t = time.perf_counter()
        proc = subprocess.run([str(py), "worker.py", "args.json"], cwd=tmp, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"sdialog worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        sd = json.loads((Path(tmp) / "out.json").read_text())
        print(
            f"  sdialog subprocess wall time {time.perf_counter() - t:.1f} s (imports included)", flush=True
        )

    import numpy as np
    import sentence_transformers  # noqa: F401  (imports are outside the timings, as in the sdialog worker)
    import transformers  # noqa: F401

    from dialfork_metrics import fbd, flowkl
    from dialfork_metrics.encoders import Encoder

    if args.runtime != "torch":  # make the ONNX export (cached on disk) before the cold timing
        Encoder("minilm", runtime=args.runtime).encode(["warm up"])
        from dialfork_metrics.pair_encoder import PairEncoder

        PairEncoder(Encoder("minilm", runtime=args.runtime)).encode_pairs(["a"], ["b"])
    results["runtime"] = args.runtime

    def cold_and_warm(metric):
        """A first call that loads the model, then one with a fresh cache and the model loaded."""
        t = time.perf_counter()
        enc = Encoder("minilm", runtime=args.runtime)
        det = metric(ref, tgt, enc, compat="sdialog", return_details=True)
        t_cold = time.perf_counter() - t
        t = time.perf_counter()
        metric(ref, tgt, Encoder("minilm", model=enc.model, runtime=args.runtime), compat="sdialog")
        return det, t_cold, time.perf_counter() - t, enc

    if "flowkl" in metrics:
        det, t_cold, t_warm, _ = cold_and_warm(flowkl)
        s = sd["flowkl"]
        lr, lt = np.asarray(s["ref_scores"]), np.asarray(s["tgt_scores"])
        d_scores = max(
            float(np.max(np.abs(det["likelihoods_ref"] - lr) / np.abs(lr))),
            float(np.max(np.abs(det["likelihoods_tgt"] - lt) / np.abs(lt))),
        )
        r = {
            "sdialog": s["value"],
            "ours": det["flowkl"],
            "rel_diff": rel(det["flowkl"], s["value"]),
            "max_rel_diff_flow_scores": d_scores,
            "sdialog_s": s["time"],
            "ours_s": t_cold,
            "ours_warm_s": t_warm,
            "speedup": s["time"] / t_cold,
            "speedup_warm": s["time"] / t_warm,
            "vocab_size": {"sdialog": s["vocab_size"], "ours": det["graph"].vocab_size},
        }
        results["flowkl"] = r
        print(
            f"FlowKL  sdialog {r['sdialog']:.8g} in {r['sdialog_s']:.2f} s | ours {r['ours']:.8g} in "
            f"{r['ours_s']:.2f} s (warm {r['ours_warm_s']:.2f} s) | speed ratio {r['speedup']:.1f}x "
            f"(warm {r['speedup_warm']:.1f}x) | rel. diff {r['rel_diff']:.2e} | per-dialogue flow scores "
            f"max rel. diff {d_scores:.2e} | V {r['vocab_size']}",
            flush=True,
        )
    if "fbd" in metrics:
        det, t_cold, t_warm, enc = cold_and_warm(fbd)
        with tempfile.TemporaryDirectory() as cache:  # a second process of a user with --cache-dir
            fbd(
                ref,
                tgt,
                Encoder("minilm", model=enc.model, cache_dir=cache, runtime=args.runtime),
                compat="sdialog",
            )
            t = time.perf_counter()
            v_disk = fbd(
                ref,
                tgt,
                Encoder("minilm", model=enc.model, cache_dir=cache, runtime=args.runtime),
                compat="sdialog",
            )
            t_disk = time.perf_counter() - t
        s = sd["fbd"]
        tokens = padded_tokens(ref + tgt, model)
        r = {
            "sdialog": s["value"],
            "ours": det["fbd"],
            "rel_diff": rel(det["fbd"], s["value"]),
            "n_ref": det["n_ref"],
            "n_tgt": det["n_tgt"],
            "sdialog_s": s["time"],
            "ours_s": t_cold,
            "ours_warm_s": t_warm,
            "speedup": s["time"] / t_cold,
            "speedup_warm": s["time"] / t_warm,
            "ours_disk_cache_s": t_disk,
            "speedup_disk_cache": s["time"] / t_disk,
            "rel_diff_disk_cache": rel(v_disk, s["value"]),
            "tokens": tokens,
        }
        results["fbd"] = r
        print(
            f"FBD     sdialog {r['sdialog']:.8g} in {r['sdialog_s']:.2f} s | ours {r['ours']:.8g} in "
            f"{r['ours_s']:.2f} s (warm {r['ours_warm_s']:.2f} s) | speed ratio {r['speedup']:.1f}x "
            f"(warm {r['speedup_warm']:.1f}x) | rel. diff {r['rel_diff']:.2e} | n pairs {r['n_ref']}/{r['n_tgt']}",
            flush=True,
        )
        print(
            f"FBD     rerun from the disk cache (new encoder, cache_dir): {t_disk:.3f} s, {r['speedup_disk_cache']:.0f}x "
            f"sdialog, rel. diff {r['rel_diff_disk_cache']:.2e}",
            flush=True,
        )
        print(
            f"FBD     transformer input: sdialog pads all {tokens['pairs']} pairs to the longest "
            f"({tokens['longest']} tokens) = {tokens['sdialog']:,} token positions; ours encodes {tokens['unique_pairs']} "
            f"unique pairs batched by length = {tokens['ours']:,} positions ({tokens['bound']:.2f}x fewer). Both run the same "
            "fp32 forward per position, so that ratio bounds a cold speed-up that keeps the values.",
            flush=True,
        )
    load1 = os.getloadavg()
    results["load_after"] = load1
    print(
        f"load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} (shared machine: other jobs "
        "slow both sides alike only if they run throughout)"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
