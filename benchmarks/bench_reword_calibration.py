"""Calibrate the ``reword`` prefix mode's rate against the paper's Shared-prefix tau (issue 13).

The paper's Task 2 Shared-prefix control reaches tau = 0.682 with LLM replay: the replayed prefix of
a fork sometimes rewords a turn, so the number of opening turns a fork shares verbatim with D+ is a
noisy proxy of its fork turn. With the template backend, ``replay`` copies the prefix exactly and
the control is an oracle (tau = 1); ``reword`` realises each prefix turn with another surface form at
a set rate. This script generates a template corpus (a few tasks, ``--per-task`` scenarios each) at
each rate of ``--rates``, computes the Shared-prefix control's Task 2 tau (no encoder needed) and
prints it next to the paper's value and the realised share of reworded prefix turns.

    python benchmarks/bench_reword_calibration.py --star $DIALFORK_STAR_DIR
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PAPER_SHARED_PREFIX_TAU = 0.682
DEFAULT_TASKS = ("weather", "bank_balance", "hotel_book", "doctor_schedule", "apartment_search", "trivia")


def shared_prefix_tau(out: Path) -> dict[str, float]:
    """Mean Task 2 tau of the Shared-prefix control, per type and averaged (SPEC section 6), and the
    realised share of reworded prefix turns."""
    import numpy as np

    from dialfork_dataset import taxonomy
    from dialfork_dataset.forks import system_turn_to_position
    from dialfork_dataset.jsonl import read_jsonl
    from dialfork_dataset.views import task2_quartets
    from dialfork_metrics.dialogue import score_quartets

    records = [r for f in sorted(out.glob("*.jsonl")) for r in read_jsonl(f)]
    rows = score_quartets(task2_quartets(records), methods=["shared_prefix"])
    res: dict[str, float] = {}
    types = taxonomy.names()
    for h in types:
        res[h] = float(np.mean([r["tau"]["shared_prefix"] for r in rows if r["type"] == h]))
    res["Avg"] = float(np.mean([res[h] for h in types]))
    src = {r["dialogue_id"]: r for r in records if r["hallucination_type"] is None}
    n_prefix = sum(
        system_turn_to_position(src[r["source_id"]]["turns"], r["fork_turn"])
        for r in records
        if r["hallucination_type"] is not None
    )
    n_div = sum(r["prefix_divergence"] for r in records if r["hallucination_type"] is not None)
    res["realised_rate"] = n_div / n_prefix if n_prefix else 0.0
    res["units"] = len(rows)
    return res


def main(argv: list[str] | None = None) -> int:
    from generation.engine import DEFAULT_REWORD_RATE, GenerationConfig, generate_corpus

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--star", default=os.environ.get("DIALFORK_STAR_DIR", "../shared/star"))
    p.add_argument("--tasks", default=",".join(DEFAULT_TASKS))
    p.add_argument("--per-task", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    rates = sorted({0.0, 0.02, DEFAULT_REWORD_RATE, 0.1, 0.2})
    p.add_argument(
        "--rates",
        default=",".join(f"{r:g}" for r in rates),
        help="comma-separated rewording rates (default includes the packaged default)",
    )
    args = p.parse_args(argv)
    tasks = tuple(t for t in args.tasks.split(",") if t)
    print(
        f"Shared-prefix control, Task 2 tau (paper, LLM replay: {PAPER_SHARED_PREFIX_TAU}); template corpus "
        f"{len(tasks)} task(s) x {args.per_task} scenarios, seed {args.seed}; default rate {DEFAULT_REWORD_RATE}"
    )
    print(
        f"{'rate':>6} {'realised':>9} {'WIC':>6} {'SSPC':>6} {'GR':>6} {'CSC':>6} {'Avg':>6} {'Avg-paper':>10} units"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (float(x) for x in args.rates.split(",") if x):
            out = Path(tmp) / f"r{rate}"
            generate_corpus(
                GenerationConfig(
                    star=args.star,
                    out=str(out),
                    tasks=tasks,
                    per_task=args.per_task,
                    seed=args.seed,
                    prefix_mode="reword",
                    reword_rate=rate,
                ),
                progress=False,
            )
            r = shared_prefix_tau(out)
            print(
                f"{rate:>6.3f} {r['realised_rate']:>9.3f} {r['WIC']:>6.3f} {r['SSPC']:>6.3f} {r['GR']:>6.3f} "
                f"{r['CSC']:>6.3f} {r['Avg']:>6.3f} {r['Avg'] - PAPER_SHARED_PREFIX_TAU:>+10.3f} {r['units']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
