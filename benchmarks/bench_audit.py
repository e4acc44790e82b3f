"""Benchmark: the agent audit's own overhead (issue 18, section 3).

Audits the faithful fake agent (loopback, one conversation at a time) on 3 tasks x 20 scenarios
and times:

* ``audit``: the whole ``audit_agent`` call, minus the time spent waiting for the agent (every
  ``chat_one`` call timed): simulation (template user, step matching), encoding, detector fit and
  prediction, FlowKL, FlowScore, the report;
* ``baseline``: encoding the turns of the audited dialogues once, in one batched pass, with a fresh
  encoder (same model, loaded and warmed up before timing).

The reference corpus (template backend, 30 scenarios per task) is generated first; its conformant
dialogues are encoded by a warm-up pass before the audit (as a repeated audit would find them in the
encoder's cache). The time of that pass is printed too, and a second ratio that counts it.
Target: ratio = audit overhead / baseline <= 2.

    python benchmarks/bench_audit.py [--per-task 20] [--star STAR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET = 2.0
TASKS = ("weather", "doctor_schedule", "bank_balance")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-task", type=int, default=20)
    ap.add_argument("--star", default=os.environ.get("DIALFORK_STAR_DIR", "../shared/star"))
    a = ap.parse_args()

    from dialfork_dataset.builder import load_records
    from dialfork_metrics.audit import audit_agent, serve_fake_agent
    from dialfork_metrics.encoders import Encoder
    from generation import GenerationConfig, generate_corpus
    from generation.llm.client import OpenAICompatClient

    waited = [0.0]
    chat_one = OpenAICompatClient.chat_one

    def timed(self, *args, **kw):
        t = time.perf_counter()
        try:
            return chat_one(self, *args, **kw)
        finally:
            waited[0] += time.perf_counter() - t

    OpenAICompatClient.chat_one = timed
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "ref"
        generate_corpus(
            GenerationConfig(star=a.star, out=str(ref), tasks=TASKS, per_task=max(30, a.per_task), seed=0),
            progress=False,
        )
        conformant = [r for r in load_records(ref) if r["hallucination_type"] is None]
        enc = Encoder("minilm")
        enc.encode(["warm-up"])
        t = time.perf_counter()
        enc.encode_dialogues(conformant)
        t_ref = time.perf_counter() - t
        with serve_fake_agent("faithful", star=a.star) as fa:
            t = time.perf_counter()
            audit_agent(
                fa.url,
                fa.model,
                TASKS,
                conformant,
                star=a.star,
                per_task=a.per_task,
                out=Path(tmp) / "audit",
                concurrency=1,
                encoder=enc,
                show_progress=False,
            )
            t_audit = time.perf_counter() - t
        recs = load_records(Path(tmp) / "audit")
        fresh = Encoder("minilm")
        fresh.encode(["warm-up"])
        t = time.perf_counter()
        fresh.encode_dialogues(recs)
        t_base = time.perf_counter() - t
    n_turns = sum(len(r["turns"]) for r in recs)
    overhead = t_audit - waited[0]
    print(f"{len(recs)} dialogues, {n_turns} turns; reference: {len(conformant)} conformant dialogues")
    print(
        f"audit wall {t_audit:.2f} s, waiting for the agent {waited[0]:.2f} s, own overhead {overhead:.2f} s"
    )
    print(f"baseline (encode the audited turns once): {t_base:.2f} s; reference encoding {t_ref:.2f} s")
    ratio = overhead / t_base
    print(
        f"ratio overhead / baseline = {ratio:.2f} (target <= {TARGET}: {'met' if ratio <= TARGET else 'NOT met'})"
    )
    print(f"with the reference encoding counted: {(overhead + t_ref) / t_base:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
