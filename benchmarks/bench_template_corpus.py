"""Throughput of the template backend on the full DialFork corpus.

Target (issue 3): every single-task STAR scenario, conformant + 16 forks each (4,671 x 17 =
79,407 dialogues) in at most 2 minutes on a 2-core machine. The script generates the corpus
into a temporary folder and prints dialogues/s and the ratio of the 2-minute target to the
measured wall time (> 1 means the target is met), with the machine's load average so that a
shared machine's figures can be read correctly.

    python benchmarks/bench_template_corpus.py --star ../shared/star --workers 2
    python benchmarks/bench_template_corpus.py --star ../shared/star --per-task 20 --profile
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

TARGET_SECONDS = 120.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--star", default=str(Path(__file__).resolve().parents[2] / "shared" / "star"))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--per-task", type=int, default=None, help="subset (default: the full corpus)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", default=None, help="keep the corpus here (default: a temporary folder)")
    ap.add_argument("--profile", action="store_true", help="cProfile one process and print the top functions")
    args = ap.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from generation.engine import GenerationConfig, generate_corpus

    tmp = None
    if args.out is None:
        tmp = tempfile.mkdtemp(prefix="dialfork-bench-")
        out = Path(tmp) / "corpus"
    else:
        out = Path(args.out)
        if out.exists():
            shutil.rmtree(out)
    workers = 1 if args.profile else args.workers
    cfg = GenerationConfig(
        star=args.star, out=str(out), per_task=args.per_task, workers=workers, batch_size=args.batch_size
    )
    load0 = os.getloadavg()
    ru0 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        if args.profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            manifest = prof.runcall(generate_corpus, cfg, progress=False)
        else:
            manifest = generate_corpus(cfg, progress=False)
        wall = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = sum(b.ru_utime + b.ru_stime - a.ru_utime - a.ru_stime for a, b in zip(ru0, ru1))
        load1 = os.getloadavg()
        n = manifest.counts["total"]["records"]
        size = sum(f.stat().st_size for f in out.glob("*.jsonl"))
        full = args.per_task is None
        result = {
            "dialogues": n,
            "scenarios": manifest.counts["total"]["scenarios"],
            "workers": workers,
            "wall_seconds": round(wall, 2),
            "cpu_seconds": round(cpu, 2),
            "dialogues_per_second": round(n / wall, 1),
            "dialogues_per_cpu_second": round(n / cpu, 1) if cpu else None,
            "corpus_mb": round(size / 2**20, 1),
            "cores": os.cpu_count(),
            "loadavg_before": [round(x, 2) for x in load0],
            "loadavg_after": [round(x, 2) for x in load1],
        }
        if full:
            result["target_seconds"] = TARGET_SECONDS
            result["ratio_target_over_wall"] = round(TARGET_SECONDS / wall, 2)
        else:
            est = 79407 / (n / wall)
            result["estimated_full_corpus_seconds"] = round(est, 1)
            result["ratio_target_over_estimate"] = round(TARGET_SECONDS / est, 2)
        print(json.dumps(result, indent=2))
        print(
            f"{n} dialogues in {wall:.1f} s = {n / wall:.0f} dialogues/s with {workers} worker(s) "
            f"(load average {load0[0]:.1f} -> {load1[0]:.1f} on {os.cpu_count()} cores)"
        )
        if full:
            print(
                f"target: the full corpus in {TARGET_SECONDS:.0f} s -> ratio target/measured = {TARGET_SECONDS / wall:.2f} "
                f"({'met' if wall <= TARGET_SECONDS else 'NOT met'})"
            )
        if args.profile:
            pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
            pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
