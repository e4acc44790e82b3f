"""Task 2 throughput: total time vs encoding the corpus's unique texts once, and batched vs per-pair math.

Corpus: quartets (a conformant source and its four forks). With ``--data DIR`` they come from a
generated DialFork corpus (record files, ``dialfork_dataset.views.task2_quartets``); without it
they are built from the STAR human dialogues (``../shared/star`` beside the project, or ``$DIALFORK_STAR_DIR``)
with synthetic forks by splicing: fork k keeps the source's turns before system turn t_k
(``dialfork_dataset.forks.fork_turns``) and continues with the turns of another dialogue of the
same task from its own system turn t_k on (a different donor per fork, seeded).

Measured in one run, with one loaded model shared by fresh encoders (empty caches), after a
warm-up (model load, first forward pass, numba compilation: reported, not counted):

1. ``encode_turns``: encoding the corpus's unique turn texts once (one call);
   ``encode_transcripts``: encoding its unique transcripts once (Full-dialog input).
2. ``task2_turns``: ``score_quartets`` with FlowScore, FlowDTW, Mean-turn and the controls on all
   (source, fork) pairs, from raw dialogues to Kendall tau per unit; ratio vs ``encode_turns``.
3. ``task2_all``: the same plus Full-dialog; ratio vs ``encode_turns + encode_transcripts``.
   Target for both ratios: <= 1.2.
4. math only, on precomputed embeddings: a per-pair loop of ``flowscore_from_embeddings`` +
   ``flowdtw_from_embeddings`` vs ``flowscore_batch_from_embeddings`` +
   ``flowdtw_batch_from_embeddings`` (ratio loop / batched), and vs the dialogue-level path
   (validate once, one similarity pass for both metrics; ratio loop / one-pass).

Usage: ``python benchmarks/bench_task2.py [--units 150] [--data DIR] [--encoder minilm] [--json out.json]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from dialfork_dataset.forks import fork_turns, system_turn_to_position  # noqa: E402
from dialfork_dataset.turns import as_turns, transcript  # noqa: E402


def star_dir() -> Path:
    env = os.environ.get("DIALFORK_STAR_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "star"


def star_dialogues(path: Path) -> list[dict]:
    """STAR human dialogues as records {dialogue_id, task, turns} (user utterances and the
    system's sent messages; single-task dialogues only)."""
    out = []
    with gzip.open(path / "dialogues.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            if len(d.get("tasks") or []) != 1:
                continue
            turns = []
            for e in d["events"]:
                text = (e.get("text") or "").strip()
                if not text:
                    continue
                if e.get("agent") == "User" and e.get("action") == "utter":
                    turns.append({"speaker": "user", "text": text})
                elif e.get("agent") == "Wizard" and e.get("action") in ("utter", "pick_suggestion"):
                    turns.append({"speaker": "system", "text": text})
            out.append(
                {"dialogue_id": f"{d['tasks'][0]}-{d['dialogue_id']}", "task": d["tasks"][0], "turns": turns}
            )
    return out


def spliced_quartets(dialogues: list[dict], units: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    by_task: dict[str, list[dict]] = defaultdict(list)
    for d in dialogues:
        T = sum(t["speaker"] == "system" for t in d["turns"])
        if T >= 4 and len(set(fork_turns(T))) == 4:
            by_task[d["task"]].append(d)
    pool = [d for task in sorted(by_task) for d in by_task[task] if len(by_task[task]) >= 5]
    rng.shuffle(pool)
    quartets = []
    for src in pool[:units]:
        T = sum(t["speaker"] == "system" for t in src["turns"])
        donors = rng.sample([d for d in by_task[src["task"]] if d is not src], 4)
        forks = {}
        for k, (t_k, donor) in enumerate(zip(fork_turns(T), donors), start=1):
            cut = system_turn_to_position(src["turns"], t_k)
            T2 = sum(t["speaker"] == "system" for t in donor["turns"])
            dcut = system_turn_to_position(donor["turns"], min(t_k, T2))
            forks[k] = {
                "dialogue_id": f"{src['dialogue_id']}-SPLICE-k{k}",
                "turns": src["turns"][:cut] + donor["turns"][dcut:],
            }
        quartets.append({"source": src, "type": "SPLICE", "forks": forks})
    return quartets


def load_quartets(args) -> tuple[list[dict], str]:
    if args.data:
        from dialfork_dataset.builder import load_records
        from dialfork_dataset.views import task2_quartets

        q = task2_quartets(load_records(args.data))
        return q[: args.units] if args.units else q, f"generated corpus {args.data}"
    return spliced_quartets(
        star_dialogues(star_dir()), args.units, args.seed
    ), "STAR human dialogues + spliced forks"


def timed(fn, repeats: int = 1):
    best, out = float("inf"), None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="folder of generated record files (default: STAR + spliced forks)")
    ap.add_argument("--units", type=int, default=150, help="number of quartets (0 = all with --data)")
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--device", default=None)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--math-repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the figures to this JSON file")
    args = ap.parse_args(argv)

    from dialfork_metrics import (
        Encoder,
        flowdtw_batch_from_embeddings,
        flowdtw_from_embeddings,
        flowscore_batch_from_embeddings,
        flowscore_from_embeddings,
    )
    from dialfork_metrics.dialogue import ALL_METHODS, score_quartets
    from dialfork_metrics.distances import _check_pairs, task2_embedding_scores

    quartets, corpus = load_quartets(args)
    dialogues, pair_index = [], []
    for q in quartets:
        dialogues.append(q["source"])
        s = len(dialogues) - 1
        for k in sorted(q["forks"]):
            dialogues.append(q["forks"][k])
            pair_index.append((s, len(dialogues) - 1))
    turns = [as_turns(d) for d in dialogues]
    unique_turns = list(dict.fromkeys(t["text"] for d in turns for t in d))
    unique_transcripts = list(dict.fromkeys(transcript(d) for d in turns))
    n_pairs = len(pair_index)
    print(
        f"corpus: {corpus}: {len(quartets)} units, {n_pairs} pairs, {sum(map(len, turns))} turns, "
        f"{len(unique_turns)} unique turns, {len(unique_transcripts)} unique transcripts"
    )

    # warm-up: model load, first forward pass, numba compilation (not counted)
    t0 = time.perf_counter()
    shared = Encoder(args.encoder, device=args.device, batch_size=args.batch_size)
    model = shared.model
    shared.encode(unique_turns[:64])
    flowdtw_batch_from_embeddings([(np.eye(3), np.eye(3))])
    warm = time.perf_counter() - t0

    def fresh() -> Encoder:
        return Encoder(shared.name, model=model, batch_size=args.batch_size)

    t_enc_turns, _ = timed(lambda: fresh().encode(unique_turns))
    t_enc_tr, _ = timed(lambda: fresh().encode(unique_transcripts))
    turn_methods = [m for m in ALL_METHODS if m != "full_dialog"]
    t_task2_turns, rows = timed(lambda: score_quartets(quartets, turn_methods, encoder=fresh()))
    t_task2_all, rows_all = timed(lambda: score_quartets(quartets, list(ALL_METHODS), encoder=fresh()))

    # math only, on precomputed embeddings
    enc = fresh()
    E = enc.encode_dialogues(dialogues)
    pairs = [(E[a], E[b]) for a, b in pair_index]

    def loop():
        return (
            [flowscore_from_embeddings(a, b) for a, b in pairs],
            [flowdtw_from_embeddings(a, b) for a, b in pairs],
        )

    def batched():
        return flowscore_batch_from_embeddings(pairs), flowdtw_batch_from_embeddings(pairs)

    def one_pass():  # what the dialogue-level API does: validate once, one similarity pass for both
        refs, cands = _check_pairs(pairs, True, None)
        res = task2_embedding_scores(refs, cands)
        return res["flowscore"], res["flowdtw"]

    t_loop, (fs_l, dtw_l) = timed(loop, args.math_repeats)
    t_batch, (fs_b, dtw_b) = timed(batched, args.math_repeats)
    t_one, (fs_o, dtw_o) = timed(one_pass, args.math_repeats)
    max_diff = float(
        max(
            np.abs(np.asarray(fs_l) - fs_b).max(),
            np.abs(np.asarray(dtw_l) - dtw_b).max(),
            np.abs(np.asarray(fs_l) - fs_o).max(),
            np.abs(np.asarray(dtw_l) - dtw_o).max(),
        )
    )

    mean_tau = {m: float(np.mean([r["tau"][m] for r in rows_all])) for m in ALL_METHODS}
    figures = {
        "corpus": corpus,
        "units": len(quartets),
        "pairs": n_pairs,
        "unique_turns": len(unique_turns),
        "unique_transcripts": len(unique_transcripts),
        "encoder": shared.name,
        "warmup_s": warm,
        "encode_turns_s": t_enc_turns,
        "encode_transcripts_s": t_enc_tr,
        "task2_turns_s": t_task2_turns,
        "task2_all_s": t_task2_all,
        "ratio_task2_turns_vs_encode_turns": t_task2_turns / t_enc_turns,
        "ratio_task2_all_vs_encode_all": t_task2_all / (t_enc_turns + t_enc_tr),
        "ratio_task2_all_vs_encode_turns": t_task2_all / t_enc_turns,
        "math_pairs": len(pairs),
        "math_loop_s": t_loop,
        "math_batched_s": t_batch,
        "ratio_loop_vs_batched": t_loop / t_batch,
        "math_one_pass_s": t_one,
        "ratio_loop_vs_one_pass": t_loop / t_one,
        "math_max_abs_diff": max_diff,
        "mean_tau": mean_tau,
    }
    print(f"warm-up (model load, first pass, numba compile; not counted): {warm:.2f} s")
    print(f"encode unique turns once:        {t_enc_turns:8.2f} s")
    print(f"encode unique transcripts once:  {t_enc_tr:8.2f} s")
    print(
        f"Task 2 (FlowScore, FlowDTW, Mean, controls, tau): {t_task2_turns:8.2f} s  "
        f"ratio vs encoding turns = {figures['ratio_task2_turns_vs_encode_turns']:.3f}x (target <= 1.2)"
    )
    print(
        f"Task 2 (all, with Full-dialog):   {t_task2_all:8.2f} s  "
        f"ratio vs encoding turns + transcripts = {figures['ratio_task2_all_vs_encode_all']:.3f}x (target <= 1.2); "
        f"vs turns only = {figures['ratio_task2_all_vs_encode_turns']:.3f}x"
    )
    print(
        f"math on {len(pairs)} pairs (FlowScore + FlowDTW): per-pair loop {t_loop:.3f} s; batched functions "
        f"{t_batch:.3f} s (loop/batched = {figures['ratio_loop_vs_batched']:.2f}x); one validated similarity pass "
        f"for both (plus Mean-turn) {t_one:.3f} s (loop/one-pass = {figures['ratio_loop_vs_one_pass']:.2f}x); max |diff| {max_diff:.1e}"
    )
    print("mean Kendall tau per method: " + ", ".join(f"{m} {v:+.3f}" for m, v in mean_tau.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
