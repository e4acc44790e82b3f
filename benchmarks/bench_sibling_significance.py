"""Benchmark: at what blind-set size does a sibling cheat's gap become significant (issue 37 item 9)?

Two figures, both with the audit's own test (:func:`leaderboard.leakcheck.power.significant_size`: the
matched Random of ``leaderboard audit``, 400 draws, seed 0, on the blind set repeated in whole
copies):

* the sibling cheat (:func:`leaderboard.leakcheck.sibling_attack`'s stronger rule) on the layout's
  blind set;
* a gap like the issue's (the cheat that scored 69.1 against a matched Random of 38.0, p = 0.12,
  on another run's 24 blind dialogues, which are not kept): every two-flag cheat on this layout's
  gold (all dialogues called conformant but two forks, each flagged 0-2 turns after its fork turn)
  that scores within ``--tol`` of 69.1 against a matched Random within ``--tol`` of 38.0, with
  p >= 0.08 on the measured set.

    python benchmarks/bench_sibling_significance.py demo_out/hub demo_out/hub-gold [--tol 1.5]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    from dialfork_dataset.hub import load_gold
    from leaderboard.leakcheck import ALPHA
    from leaderboard.leakcheck.power import gap_at, significant_size
    from leaderboard.leakcheck.power import main as power_main

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("hub")
    ap.add_argument("gold")
    ap.add_argument("--tol", type=float, default=1.5, help="Score points around 69.1 and 38.0 (default 1.5)")
    a = ap.parse_args(argv)
    power_main([a.hub, a.gold])
    gold = load_gold(a.gold)["task3"]
    forks = [g for g in gold if g["hallucination_type"] is not None]
    profiles = []
    for f1, f2 in itertools.combinations(forks, 2):
        for d1, d2 in itertools.product(range(3), repeat=2):
            pred = {g["dialogue_id"]: None for g in gold}
            pred[f1["dialogue_id"]] = min(int(f1["fork_turn"]) + d1, int(f1["num_system_turns"]))
            pred[f2["dialogue_id"]] = min(int(f2["fork_turn"]) + d2, int(f2["num_system_turns"]))
            r = gap_at(gold, pred, len(gold))
            if abs(r["value"] - 69.1) <= a.tol and abs(r["control"] - 38.0) <= a.tol and r["p_value"] >= 0.08:
                profiles.append(pred)
    print(f"gaps like 69.1 vs 38.0 (p >= 0.08 on {len(gold)} dialogues): {len(profiles)} two-flag cheats")
    for alpha in (0.05, ALPHA):
        sizes = [significant_size(gold, p, alpha=alpha)["size"] for p in profiles]
        known = [s for s in sizes if s is not None]
        counts = {s: sizes.count(s) for s in sorted(set(sizes), key=lambda s: (s is None, s or 0))}
        med = statistics.median(known) if known else None
        print(f"alpha {alpha}: significant from (blind dialogues: cheats) {counts}; median {med}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
