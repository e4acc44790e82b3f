"""Throughput of LLM generation on one machine, and the time it implies for the whole corpus.

Runs the real engine (``generation.engine.generate_corpus``: conformant dialogues, then their 16
forks, lockstep batches) with :class:`generation.backends.hf.TransformersBackend` on a few STAR
scenarios, then reports

* new tokens/s and prompt (prefill) tokens/s of the backend,
* dialogues/s (conformant + forks) and scenarios/s,
* the implied wall time to regenerate the full corpus (every single-task STAR scenario, each with
  its 16 forks, scaled by the share of scenarios kept in this sample),
* peak GPU memory.

On a GPU (e.g. one H200)::

    python benchmarks/gpu_generation.py --model Qwen/Qwen2.5-0.5B-Instruct --star ../shared/star \\
        --scenarios 16 --batch-size 256 --max-new-tokens 128

Dry run on a CPU with a tiny random model (no download)::

    python -c "from generation.backends.hf import build_tiny_chat_model as b; b('/tmp/tiny')"
    python benchmarks/gpu_generation.py --model /tmp/tiny --star ../shared/star --scenarios 1 \\
        --budget 4 --max-new-tokens 4

A random model never writes the closing token, so its dialogues always run to the hard cut and its
turns to ``max_new_tokens``: its figures are a pessimistic bound for a real model of the same size.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DEFAULT_TASKS = "weather,bank_balance,doctor_followup,ride_status"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    ap.add_argument("--model", required=True, help="chat model: Hub id or local folder")
    ap.add_argument("--star", default=str(Path(__file__).resolve().parents[2] / "shared" / "star"))
    ap.add_argument("--tasks", default=DEFAULT_TASKS, help=f"comma-separated tasks (default {DEFAULT_TASKS})")
    ap.add_argument("--scenarios", type=int, default=8, help="scenarios to generate (spread over the tasks)")
    ap.add_argument(
        "--batch-size", type=int, default=128, help="rows per lockstep forward (backend batch_size)"
    )
    ap.add_argument("--engine-batch", type=int, default=64, help="scenarios advanced together by the engine")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument(
        "--budget", type=int, default=None, help="length budget in turns (default: STAR's per task)"
    )
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument(
        "--out", default=None, help="keep the generated corpus here (default: a temporary folder)"
    )
    ap.add_argument("--json", default=None, help="also write the figures to this JSON file")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    import torch

    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.taxonomy import forks_per_source
    from generation.backends.hf import TransformersBackend
    from generation.engine import GenerationConfig, generate_corpus, plan_units

    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip())
    per_task = max(1, -(-args.scenarios // len(tasks)))
    t0 = time.perf_counter()
    backend = TransformersBackend(
        args.model,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        device=args.device,
        dtype=args.dtype,
    )
    backend.load()
    load_s = time.perf_counter() - t0
    cuda = torch.cuda.is_available() and str(backend.describe()["device"]).startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()

    corpus = StarCorpus(args.star)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or str(Path(tmp) / "corpus")
        cfg = GenerationConfig(
            star=args.star,
            out=out,
            backend="transformers",
            backend_options={"model": args.model, "max_new_tokens": args.max_new_tokens},
            tasks=tasks,
            per_task=per_task,
            budget=args.budget,
            batch_size=args.engine_batch,
        )
        t1 = time.perf_counter()
        manifest = generate_corpus(cfg, backend=backend, progress=True, corpus=corpus)
        gen_s = time.perf_counter() - t1
        full = plan_units(corpus, GenerationConfig(star=args.star, out=str(Path(tmp) / "plan")))

    tot = manifest.counts["total"]
    dialogues = tot["scenarios"] + tot["forks"]  # every D+ is generated, kept or not
    keep_rate = tot["kept"] / max(1, tot["scenarios"])
    full_dialogues = len(full) * (1 + forks_per_source() * keep_rate)
    st = backend.stats
    figures = {
        "model": args.model,
        "device": backend.describe()["device"],
        "dtype": backend.describe()["dtype"],
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "batch_size": args.batch_size,
        "max_new_tokens": args.max_new_tokens,
        "scenarios": tot["scenarios"],
        "kept": tot["kept"],
        "dialogues": dialogues,
        "load_seconds": round(load_s, 2),
        "generation_seconds": round(gen_s, 2),
        "new_tokens": st["new_tokens"],
        "prompt_tokens": st["prompt_tokens"],
        "new_tokens_per_s": round(st["new_tokens"] / gen_s, 1),
        "prompt_tokens_per_s": round(st["prompt_tokens"] / gen_s, 1),
        "dialogues_per_s": round(dialogues / gen_s, 4),
        "full_corpus_scenarios": len(full),
        "full_corpus_dialogues_est": round(full_dialogues),
        "full_corpus_hours_est": round(full_dialogues / (dialogues / gen_s) / 3600, 2),
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if cuda else None,
        "oom_retries": st["oom_retries"],
    }
    print(
        f"model {args.model} on {figures['device']} ({figures['dtype']}"
        f"{', ' + figures['gpu'] if figures['gpu'] else ''}); loaded in {load_s:.1f} s"
    )
    print(
        f"generated {tot['scenarios']} scenarios ({tot['kept']} kept) = {dialogues} dialogues in {gen_s:.1f} s"
    )
    print(f"  new tokens/s    : {figures['new_tokens_per_s']:>12,.1f}   ({st['new_tokens']:,} tokens)")
    print(f"  prompt tokens/s : {figures['prompt_tokens_per_s']:>12,.1f}   ({st['prompt_tokens']:,} tokens)")
    print(f"  dialogues/s     : {figures['dialogues_per_s']:>12,.4f}")
    print(
        f"full corpus: {len(full)} single-task scenarios -> ~{figures['full_corpus_dialogues_est']:,} dialogues "
        f"-> ~{figures['full_corpus_hours_est']:,.2f} h on this machine"
    )
    if cuda:
        print(f"peak GPU memory: {figures['peak_gpu_memory_gib']} GiB")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
