"""Task 3 streaming detectors: cost of the detector vs encoding the corpus once, and per-turn latency.

Corpus: ``--data DIR`` (a generator output folder or Hub layout) or, by default, a template corpus
generated on the fly (``generation``, ``--tasks``, ``--per-task``). Measured in one run:

1. ``encode``: the packaged encoder embedding the train and test dialogues (fresh cache; model load
   and a warm-up batch not counted) -- the baseline: any embedding-based detector pays it;
2. ``fit``: nodes (clustering), N-gram LM and calibration on the precomputed train embeddings,
   per detector; ``predict``: ``predict_many`` on the precomputed test embeddings;
   ratio ``(fit + predict) / encode`` (target < 0.5: the detector is not the bottleneck);
3. ``update``: streaming latency per turn (``stream.update(turn, embedding)``), microseconds,
   vs the encoder's per-turn time for one turn (batch of one): ratio (target < 0.1);
4. the Score of every streaming detector and trivial baseline on the test split.

    python benchmarks/bench_task3.py [--data DIR] [--tasks weather,bank_balance] [--per-task 40]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=None)
    ap.add_argument("--tasks", default="weather,bank_balance,hotel_book,doctor_schedule")
    ap.add_argument("--per-task", type=int, default=40)
    ap.add_argument(
        "--star",
        default=os.environ.get(
            "DIALFORK_STAR_DIR", str(Path(__file__).resolve().parents[2] / "shared" / "star")
        ),
    )
    ap.add_argument("--encoder", default="minilm")
    args = ap.parse_args(argv)

    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.task3 import load_examples, make_detector, score_predictions

    data = args.data
    if data is None:
        from generation.engine import GenerationConfig, generate_corpus

        data = tempfile.mkdtemp(prefix="bench_task3_")
        t = time.perf_counter()
        generate_corpus(
            GenerationConfig(
                star=args.star, out=data, tasks=tuple(args.tasks.split(",")), per_task=args.per_task
            ),
            progress=False,
        )
        print(f"generated a template corpus in {time.perf_counter() - t:.1f} s (not counted): {data}")
    train, test = load_examples(data, "train"), load_examples(data, "test")
    n_turns = sum(len(e["turns"]) for e in train + test)
    print(f"corpus: {len(train)} train conformant, {len(test)} test dialogues, {n_turns} turns")

    warm = Encoder(args.encoder, show_progress=False)
    warm.encode(["warm-up", "batch"])
    enc = Encoder(args.encoder, show_progress=False, model=warm.model)
    t = time.perf_counter()
    Etr, Ete = enc.encode_dialogues(train), enc.encode_dialogues(test)
    t_enc = time.perf_counter() - t
    print(f"encode: {t_enc:.2f} s ({enc.stats['encoded']} unique texts of {enc.stats['requested']})")
    one = Encoder(args.encoder, show_progress=False, model=warm.model)
    texts = [t["text"] for e in test[:50] for t in e["turns"]][:200]
    t = time.perf_counter()
    for x in texts:
        one.encode([x + " "])  # defeat the cache: one forward pass per turn
    t_one = (time.perf_counter() - t) / len(texts)

    gold = [
        {k: e[k] for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for e in test
    ]

    def score(preds):
        return score_predictions({g["dialogue_id"]: p for g, p in zip(gold, preds)}, gold)["score"]

    for name in ("first", "last", "random"):
        print(f"{name:6s} Score {score(make_detector(name).predict_many(test)):6.2f}")
    for name in ("it", "ss", "it+nc", "ss+nc"):
        t = time.perf_counter()
        det = make_detector(name, encoder=None).fit(train, embeddings=Etr)
        t_fit = time.perf_counter() - t
        t = time.perf_counter()
        preds = det.predict_many(test, embeddings=Ete)
        t_pred = time.perf_counter() - t
        lat = []
        for e, E in zip(test[:100], Ete[:100]):
            s = det.start()
            for turn, x in zip(e["turns"], E):
                t = time.perf_counter()
                s.update(turn, x)
                lat.append(time.perf_counter() - t)
        per_turn = statistics.median(lat)
        print(
            f"{name:6s} Score {score(preds):6.2f}  fit {t_fit:.2f} s  predict {t_pred:.2f} s  "
            f"ratio (fit+predict)/encode {(t_fit + t_pred) / t_enc:.3f} (target < 0.5)  "
            f"update {1e6 * per_turn:.0f} us/turn vs encoding one turn {1e3 * t_one:.1f} ms: "
            f"ratio {per_turn / t_one:.3f} (target < 0.1)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
