"""Rebuild the shipped step reader from ../shared (one seeded command).

Usage::

    python -m dialfork_metrics.task3.workflow.reader train --sgd ../shared/sgd --star ../shared/star \\
        --out dialfork_metrics/task3/workflow/reader/weights

It reads the labelled reading set (:mod:`.data`: SGD's system turns of the ten services with a
workflow file, STAR's and the SGD files' workflow texts; never STAR's human dialogues), trains one
reader per leave-services-out fold to calibrate the chosen step's probability on held-out services
(isotonic), trains the shipped reader on every row, and writes ``reader.npz`` and ``config.json``.
Embeddings are cached under ``--cache`` (the encoder's disk cache), so a re-run encodes nothing.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np


def train(args: argparse.Namespace) -> int:
    """Run the ``train`` command.

    Args:
        args: The parsed arguments.

    Returns:
        int: The exit status.
    """
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.tracks.sgd import WORKFLOWS_DIR
    from dialfork_dataset.workflow.files import WorkflowCorpus
    from dialfork_metrics.encoders import get_encoder, portable_encoder_id

    from . import data as D
    from . import train as T
    from .steps import encoder_fingerprint

    t0 = time.perf_counter()
    enc = get_encoder(args.encoder, cache_dir=args.cache) if args.cache else get_encoder(args.encoder)
    sgd = D.sgd_turns(args.sgd)
    star = D.star_workflow_turns(args.star) + D.file_phrasings()
    texts = list(dict.fromkeys(r.text for r in sgd + star if r.text))
    vec = dict(zip(texts, D.embed(texts, enc)))
    sa = T.assigner_for(WorkflowCorpus(WORKFLOWS_DIR), enc)
    tables = {**T.tables_of(sa), **T.tables_of(T.assigner_for(StarCorpus(args.star), enc))}
    params = {"epochs": args.epochs, "seed": args.seed}
    p, ok = [], []
    for f, rd in zip(D.FOLDS, T.fold_readers(sgd, star, tables, vec.__getitem__, **params)):
        rows = [r for r in sgd if r.service in f and r.step is not None]
        steps = T.read_rows(rd, sa, rows, vec.__getitem__)[0]
        p.append(T.raw_confidence(rd, sa, rows, vec.__getitem__))
        ok.append(np.array([s == r.step for s, r in zip(steps, rows)]))
        print(f"fold {','.join(f)}: held-out step accuracy {100 * ok[-1].mean():.1f}% ({len(rows)} turns)")
    fp = encoder_fingerprint(enc)
    reader = T.fit_reader(
        D.default_training_turns(sgd, star), tables, vec.__getitem__, fingerprint=fp, **params
    )
    reader.calibrate(np.concatenate(p), np.concatenate(ok))
    reader.info_.update(
        {
            "encoder_id": portable_encoder_id(args.encoder),
            "held_out_accuracy": round(float(np.concatenate(ok).mean()), 4),
            "sgd_rows": sum(r.task is not None for r in sgd),
            "workflow_rows": len(star),
            "human_rows": 0,
        }
    )
    out = reader.save_pretrained(args.out)
    size = sum(f.stat().st_size for f in Path(out).iterdir())
    print(f"wrote {out} ({size / 1e6:.2f} MB) in {time.perf_counter() - t0:.0f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line.

    Args:
        argv: Arguments (None: ``sys.argv[1:]``).

    Returns:
        int: The exit status.
    """
    from .steps import WEIGHTS_DIR

    ap = argparse.ArgumentParser(prog="python -m dialfork_metrics.task3.workflow.reader", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="rebuild the step reader's weights from ../shared")
    t.add_argument("--sgd", default="../shared/sgd")
    t.add_argument("--star", default="../shared/star")
    t.add_argument("--out", default=str(WEIGHTS_DIR))
    t.add_argument("--encoder", default="minilm")
    t.add_argument(
        "--cache", default="benchmarks/out/reader/emb", help="embedding cache folder ('' for none)"
    )
    t.add_argument("--epochs", type=int, default=16)
    t.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return train(args)


if __name__ == "__main__":
    raise SystemExit(main())
