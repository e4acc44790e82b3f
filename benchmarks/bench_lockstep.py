"""Lockstep batching vs one dialogue at a time, same model, same device (issue 8 target: >= 5x).

N dialogues of K turns each are generated twice with :class:`TransformersBackend` on a tiny random
Llama model built locally (no download):

* lockstep: one ``generate`` call per turn for all N dialogues (what the engine does);
* one at a time: each dialogue runs alone, one ``generate`` call per turn.

Each turn's context is the dialogue so far (system prompt + alternating messages, grown with the
generated replies). Prints dialogues/s of each, their ratio, and checks that both modes produce the
same text (batch independence of the seeded sampler).

    python benchmarks/bench_lockstep.py [--dialogues 32] [--turns 4] [--max-new-tokens 16] [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SYSTEM = (
    "You are the assistant of a weather service. Follow the workflow faithfully: greet the user, ask for "
    "the city, ask for the day, look the forecast up, tell it, ask if there is anything else. " * 2
)


def run(backend, n: int, turns: int, lockstep: bool) -> tuple[float, list[list[str]]]:
    from generation.backends.base import TurnRequest

    histories = [
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Hi, I am user {i}."}]
        for i in range(n)
    ]
    texts: list[list[str]] = [[] for _ in range(n)]
    t0 = time.perf_counter()
    if lockstep:
        for k in range(turns):
            reqs = [
                TurnRequest(f"d{i}", "system", list(h), 1000 + i, 2 * k + 1) for i, h in enumerate(histories)
            ]
            for i, out in enumerate(backend.generate(reqs)):
                texts[i].append(out)
                histories[i] += [
                    {"role": "assistant", "content": out},
                    {"role": "user", "content": f"ok {k}"},
                ]
    else:
        for i, h in enumerate(histories):
            for k in range(turns):
                out = backend.generate([TurnRequest(f"d{i}", "system", list(h), 1000 + i, 2 * k + 1)])[0]
                texts[i].append(out)
                h += [{"role": "assistant", "content": out}, {"role": "user", "content": f"ok {k}"}]
    return time.perf_counter() - t0, texts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dialogues", type=int, default=32)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--model", default=None, help="a chat model id/path (default: a tiny random Llama built here)"
    )
    args = ap.parse_args(argv)

    import torch

    from generation.backends.hf import TransformersBackend, build_tiny_chat_model

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or str(
            build_tiny_chat_model(
                Path(tmp) / "tiny",
                train_texts=[SYSTEM] * 4,
                vocab_size=600,
                hidden_size=64,
                num_layers=2,
                num_heads=4,
            )
        )
        backend = TransformersBackend(
            model,
            max_new_tokens=args.max_new_tokens,
            batch_size=args.dialogues,
            device=args.device,
            end_strings=(),
        )
        backend.load()
        run(backend, 2, 1, True)  # warm-up
        t_lock, lock_texts = run(backend, args.dialogues, args.turns, lockstep=True)
        t_one, one_texts = run(backend, args.dialogues, args.turns, lockstep=False)
    same = lock_texts == one_texts
    d_lock, d_one = args.dialogues / t_lock, args.dialogues / t_one
    print(
        f"model: {'tiny random Llama (hidden 64, 2 layers)' if args.model is None else args.model} on {args.device}; "
        f"{args.dialogues} dialogues x {args.turns} turns, max_new_tokens={args.max_new_tokens}, "
        f"torch threads={torch.get_num_threads()}"
    )
    print(f"one dialogue at a time: {t_one:8.2f} s  {d_one:8.3f} dialogues/s")
    print(f"lockstep batching     : {t_lock:8.2f} s  {d_lock:8.3f} dialogues/s")
    print(f"ratio lockstep / one-at-a-time: {d_lock / d_one:.1f}x (target >= 5x)")
    print(f"same text in both modes: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
