"""Encoding throughput on a GPU (fp32, and bf16/fp16 opt-in) against the CPU, in one run.

Encodes the same STAR turn texts (and (system, user) turn pairs, FBD/PRD's pair encoder) with the
packaged MiniLM (or ``--encoder``) on the CPU (torch, and ONNX fp32 when onnxruntime is installed)
and on each ``--device`` / ``--dtype``, from an empty cache, and prints texts/s, pairs/s, the
ratio of each to the CPU torch figure measured in the same run, and each half-precision run's
drift against its fp32 embeddings (smallest cosine, largest absolute difference). No new batch
starts once ``--max-seconds`` of wall time are used: the CPU baseline gets a quarter of the time
left, ONNX a third of the rest, each GPU dtype an equal share of the remainder (model loading is
not timed, and each run times at least one batch; figures are items/s over what was done).

On a GPU machine (e.g. one H200)::

    python benchmarks/gpu_encode.py --device cuda --dtype fp32,bf16,fp16 --n-texts 200000 \\
        --batch-size 512 --max-seconds 300 --json benchmarks/results/gpu_encode.json

Dry run on a CPU (no GPU: the "GPU" rows run on the CPU and the half-precision ones are skipped)::

    python benchmarks/gpu_encode.py --device cpu --n-texts 256 --n-pairs 64 --max-seconds 60
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _timed(fn, items: list, step: int, deadline: float) -> tuple[int, float, list]:
    """Run ``fn`` over ``items`` in steps until done or past ``deadline``: (n done, seconds, outputs)."""
    done, outs, t0 = 0, [], time.perf_counter()
    while done < len(items) and (done == 0 or time.perf_counter() < deadline):  # at least one step
        chunk = items[done : done + step]
        outs.append(fn(chunk))
        done += len(chunk)
    return done, time.perf_counter() - t0, outs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--star",
        type=Path,
        default=Path(os.environ.get("DIALFORK_STAR_DIR", ROOT.parent / "shared" / "star")),
    )
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument(
        "--device", default="cuda", help="device of the accelerated runs (cuda, cuda:1, cpu for a dry run)"
    )
    ap.add_argument(
        "--dtype", default="fp32,bf16", help="comma-separated among fp32, bf16, fp16 (half: CUDA only)"
    )
    ap.add_argument("--n-texts", type=int, default=20000)
    ap.add_argument("--n-pairs", type=int, default=5000)
    ap.add_argument("--cpu-texts", type=int, default=2000, help="texts timed on the CPU (the baseline)")
    ap.add_argument("--batch-size", type=int, default=256, help="batch size of the accelerated runs")
    ap.add_argument("--cpu-batch-size", type=int, default=64)
    ap.add_argument("--max-seconds", type=float, default=600, help="wall-time limit of the whole run")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    t_start = time.perf_counter()
    end = t_start + args.max_seconds

    import numpy as np
    import torch
    from bench_encoder_runtime import star_turns

    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.pair_encoder import PairEncoder

    texts, pairs = star_turns(args.star, args.n_texts, args.n_pairs)
    cuda = torch.cuda.is_available()
    out: dict = {
        "n_texts": len(texts),
        "n_pairs": len(pairs),
        "device": args.device,
        "cuda_available": cuda,
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "max_seconds": args.max_seconds,
        "runs": {},
    }

    def run(label: str, enc: Encoder, share: float, n_texts: int, n_pairs: int) -> dict:
        enc.encode(texts[:4])  # load / export outside the timing
        pe = PairEncoder(enc, batch_size=enc.batch_size, show_progress=False, cache_dir=False)
        pe.encode_pairs([pairs[0][0]], [pairs[0][1]])
        if cuda and str(args.device).startswith("cuda"):
            torch.cuda.synchronize()
        budget_end = time.perf_counter() + share * max(0.0, end - time.perf_counter())
        step = enc.batch_size * 4
        mid = time.perf_counter() + max(0.0, budget_end - time.perf_counter()) / 2  # texts, then pairs
        n, s, embs = _timed(enc.encode, texts[:n_texts], step, mid)
        row = {"texts": n, "texts_s": round(s, 2), "texts_per_s": round(n / s, 1) if s else None}
        firsts, seconds = [a for a, _ in pairs[:n_pairs]], [b for _, b in pairs[:n_pairs]]
        pn, ps, pembs = _timed(
            lambda ch: pe.encode_pairs([a for a, _ in ch], [b for _, b in ch]),
            list(zip(firsts, seconds)),
            max(enc.batch_size * 4, 256),
            budget_end,
        )
        row.update({"pairs": pn, "pairs_s": round(ps, 2), "pairs_per_s": round(pn / ps, 1) if ps else None})
        row["_emb"] = np.concatenate(embs) if embs else np.zeros((0, 0))
        out["runs"][label] = row
        print(
            f"{label}: {row['texts_per_s']} texts/s ({n} texts), {row['pairs_per_s']} pairs/s ({pn} pairs)",
            flush=True,
        )
        return row

    # the CPU baseline: a quarter of the time left at most, ONNX a third of the rest, then the GPU runs
    cpu = Encoder(args.encoder, device="cpu", batch_size=args.cpu_batch_size, show_progress=False)
    base = run("cpu:torch", cpu, 1 / 4, args.cpu_texts, max(1, args.cpu_texts // 4))
    try:
        import onnxruntime  # noqa: F401

        onnx = Encoder(
            args.encoder,
            device="cpu",
            batch_size=args.cpu_batch_size,
            show_progress=False,
            runtime="onnx",
            model=cpu.model,
        )
        run("cpu:onnx", onnx, 1 / 3, args.cpu_texts, max(1, args.cpu_texts // 4))
    except ImportError:
        pass
    fp32 = None
    dtypes = [d.strip() for d in args.dtype.split(",") if d.strip()]
    for i, dt in enumerate(dtypes):
        if time.perf_counter() >= end:
            print(f"{args.device}:{dt}: skipped (--max-seconds reached)")
            continue
        if dt != "fp32" and not str(args.device).startswith("cuda"):
            print(f"{args.device}:{dt}: skipped (half precision needs CUDA)")
            continue
        enc = Encoder(
            args.encoder,
            device=args.device,
            batch_size=args.batch_size,
            show_progress=False,
            dtype=None if dt == "fp32" else dt,
        )
        row = run(f"{args.device}:{dt}", enc, 1 / (len(dtypes) - i), len(texts), len(pairs))
        if dt == "fp32":
            fp32 = row
        elif fp32 is not None:
            m = min(len(row["_emb"]), len(fp32["_emb"]))
            a, b = fp32["_emb"][:m].astype(np.float64), row["_emb"][:m].astype(np.float64)
            cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
            row["drift_vs_fp32"] = {
                "min_cosine": float(cos.min()),
                "max_abs_diff": float(np.abs(a - b).max()),
            }
        del enc
    for label, row in out["runs"].items():
        row.pop("_emb", None)
        if label != "cpu:torch":
            for k in ("texts_per_s", "pairs_per_s"):
                if row.get(k) and base.get(k):
                    row[k.replace("_per_s", "_ratio_vs_cpu_torch")] = round(row[k] / base[k], 2)
    out["wall_s"] = round(time.perf_counter() - t_start, 1)
    text = json.dumps(out, indent=2)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
