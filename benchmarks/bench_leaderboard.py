"""Benchmark: validate + score a full blind-test submission (~18,000 dialogues) in under 2 s.

Builds a synthetic blind set and gold of the paper's Task 3 test size (1,059 sources x 17 =
18,003 dialogues) in the published layout, writes a random detector submission, then times
the whole ``evaluate`` path (read the blind ids and T from parquet, validate every line,
read the gold, score the public and private parts through the Task 3 scorer). Also times the
metric track (16,944 pairs). Prints each time and its ratio to the 2 s target (< 1 = met).

    python benchmarks/bench_leaderboard.py [--sources 1059] [--repeats 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_S = 2.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=1059, help="conformant sources (x17 dialogues)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)

    from leaderboard.submissions import evaluate
    from leaderboard.synthetic import make_fixture, write_distances, write_metadata, write_predictions

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        env = make_fixture(tmp, n_sources=a.sources, seed=0)
        print(
            f"setup: {len(env['blind']):,} blind dialogues, {len(env['pairs']):,} pairs "
            f"({time.perf_counter() - t:.1f} s, not timed)"
        )
        rng = random.Random(0)
        preds = {
            b["dialogue_id"]: (None if rng.random() < 0.2 else rng.randint(1, b["num_system_turns"]))
            for b in env["blind"]
        }
        conf = {d: rng.random() for d in preds}
        sub = write_predictions(preds, tmp / "sub.jsonl", confidences=conf)
        write_metadata(tmp / "sub.metadata.json", method="Random")
        msub = write_distances({p["pair_id"]: rng.random() for p in env["pairs"]}, tmp / "m.jsonl")
        write_metadata(tmp / "m.metadata.json", method="Random", track="metric")
        print(f"submission: {sub.stat().st_size / 1e6:.2f} MB, {len(preds):,} lines")

        # warm-up: imports (pyarrow, numpy, the scorer) are not part of a Space request
        evaluate(sub, track="detector", gold=env["gold_dir"], blind=env["blind_dir"])
        for track, path in (("detector", sub), ("metric", msub)):
            times = []
            for _ in range(a.repeats):
                t = time.perf_counter()
                ev = evaluate(path, track=track, gold=env["gold_dir"], blind=env["blind_dir"])
                times.append(time.perf_counter() - t)
            med = statistics.median(times)
            main_score = ev.scores["public"]["score" if track == "detector" else "tau"]
            print(
                f"{track}: validate + score {med:.3f} s (median of {a.repeats}; min {min(times):.3f} s); "
                f"ratio to the {TARGET_S:.0f} s target: {med / TARGET_S:.3f} "
                f"({'met' if med < TARGET_S else 'MISSED'}); public score {main_score:.3f}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
