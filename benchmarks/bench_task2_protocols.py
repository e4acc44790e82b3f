"""Task 2 under both reference protocols on STAR's human text (issue 38).

A quick human set, built here: for a few tasks, the conformant human dialogues of STAR (happy,
single-task, completed scenarios with at least 4 system turns, ``StarCorpus.human_dialogues()``)
are the sources; fork k keeps a source's turns before system turn t_k
(``dialfork_dataset.forks.fork_turns``) and continues with the turns of a conformant human
dialogue of *another* task from its own system turn t_k on (one donor per source, seeded, the
same for the four forks, so only the cut moves). The forks are typed ``WIC`` (the workflow is
replaced by another task's). Then Task 2 runs under the paper's same-source protocol (each fork
against its own source) and under the cross-reference protocol (each fork against
``--n-references`` conformant human dialogues of its task from other scenarios, no turn shared),
and the script prints Table 3 side by side (``dialfork_metrics.report.task2_protocols_markdown``).

This builder is deliberately minimal (WIC-only edits, the issue's measurement); the full real-text
track with every edit kind is ``dialfork_dataset.tracks.star_human`` (``python -m dialfork_dataset
star-human --out DIR``, then ``python -m dialfork_metrics.bench --data DIR --tasks 2
--task2-protocol both``; docs/metrics-task2.md).

Usage: ``python benchmarks/bench_task2_protocols.py [--tasks weather,doctor_schedule,...]
[--per-task 10] [--n-references 3] [--seed 0] [--encoder minilm] [--out results.md]``
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from dialfork_dataset.forks import fork_turns, system_turn_to_position  # noqa: E402

DEFAULT_TASKS = "weather,doctor_schedule,apartment_schedule,bank_balance,trivia,ride_book"


def star_dir() -> Path:
    env = os.environ.get("DIALFORK_STAR_DIR")
    return Path(env) if env else ROOT.parent / "shared" / "star"


def _n_system(turns: list[dict]) -> int:
    return sum(t["speaker"] == "system" for t in turns)


def conformant_human(star, tasks: list[str], per_task: int, seed: int) -> dict[str, list[dict]]:
    """Up to ``per_task`` conformant human dialogues per task (seeded choice), as records."""
    wanted: dict[str, str] = {}
    for task in tasks:
        for s in star.scenarios_for(task, single_task=True, happy=True):
            if s.completion_level == "Complete":
                wanted[s.scenario_id] = task
    by_task: dict[str, list[dict]] = defaultdict(list)
    for d in star.human_dialogues():
        task = wanted.get(d["scenario_id"])
        if task is None:
            continue
        turns = []
        for e in d["events"]:
            text = (e.get("text") or "").strip()
            if text and e.get("agent") == "User" and e.get("action") == "utter":
                turns.append({"speaker": "user", "text": text})
            elif text and e.get("agent") == "Wizard" and e.get("action") in ("utter", "pick_suggestion"):
                turns.append({"speaker": "system", "text": text})
        if _n_system(turns) >= 4 and turns and turns[0]["speaker"] == "user":
            sid = f"human-{task}-{d['scenario_id']}"
            by_task[task].append(
                {
                    "dialogue_id": sid,
                    "source_id": sid,
                    "scenario_id": d["scenario_id"],
                    "task": task,
                    "hallucination_type": None,
                    "fork_position": None,
                    "fork_turn": None,
                    "turns": turns,
                }
            )
    rng = np.random.default_rng(seed)
    out = {}
    for task in tasks:
        pool = sorted(by_task.get(task, []), key=lambda r: int(r["scenario_id"]))
        idx = sorted(rng.choice(len(pool), size=min(per_task, len(pool)), replace=False)) if pool else []
        out[task] = [pool[i] for i in idx]
    return out


def replaced_forks(sources: dict[str, list[dict]], seed: int) -> list[dict]:
    """Fork k of each source: its turns before system turn t_k, then another task's dialogue from its t_k on."""
    rng = np.random.default_rng(seed + 1)
    tasks = sorted(t for t, v in sources.items() if v)
    out = []
    for task in tasks:
        for src in sources[task]:
            others = [t for t in tasks if t != task]
            donor_pool = sources[others[int(rng.integers(len(others)))]]
            donor = donor_pool[int(rng.integers(len(donor_pool)))]
            T, T2 = _n_system(src["turns"]), _n_system(donor["turns"])
            for k, t_k in enumerate(fork_turns(T), 1):
                cut = system_turn_to_position(src["turns"], t_k)
                dcut = system_turn_to_position(donor["turns"], min(t_k, T2))
                out.append(
                    {
                        **src,
                        "dialogue_id": f"{src['dialogue_id']}-WIC-k{k}",
                        "hallucination_type": "WIC",
                        "fork_position": k,
                        "fork_turn": t_k,
                        "donor_id": donor["dialogue_id"],
                        "turns": src["turns"][:cut] + donor["turns"][dcut:],
                    }
                )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--star", default=str(star_dir()))
    p.add_argument("--tasks", default=DEFAULT_TASKS)
    p.add_argument("--per-task", type=int, default=10, help="conformant human dialogues (sources) per task")
    p.add_argument("--n-references", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--bootstrap-resamples", type=int, default=2000)
    p.add_argument("--out", default=None, help="also write the tables to this Markdown file")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.bench import Corpus, prepare_encoder, run_task2, task2_significance
    from dialfork_metrics.bench.runner import _task2_intervals
    from dialfork_metrics.report import task2_protocols_markdown

    t0 = time.perf_counter()
    sources = conformant_human(
        StarCorpus(a.star), [t.strip() for t in a.tasks.split(",") if t.strip()], a.per_task, a.seed
    )
    records = [r for v in sources.values() for r in v] + replaced_forks(sources, a.seed)
    corpus = Corpus(records, {}, f"STAR human ({a.star})")
    n_src = sum(len(v) for v in sources.values())
    print(
        f"{n_src} conformant human dialogues ({', '.join(f'{t} {len(v)}' for t, v in sources.items())}), "
        f"{len(records) - n_src} forks; built in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    t0 = time.perf_counter()
    enc = prepare_encoder(a.encoder, records, progress=False)
    print(f"encoded in {time.perf_counter() - t0:.1f} s", flush=True)
    parts = {}
    for protocol, key in (("same-source", "task2"), ("cross", "task2_cross")):
        res = run_task2(corpus, enc, seed=a.seed, protocol=protocol, n_references=a.n_references)
        per_encoder = {
            a.encoder: {"summary": res["summary"], "units": res["units"], "methods": res["methods"]}
        }
        _task2_intervals(per_encoder, a.bootstrap_resamples, a.seed)
        parts[key] = {
            "per_encoder": per_encoder,
            "protocol": protocol,
            "n_references": a.n_references,
            "significance": task2_significance(
                {a.encoder: res}, n_resamples=a.bootstrap_resamples, seed=a.seed
            ),
        }
    md = task2_protocols_markdown(parts["task2"], parts["task2_cross"])
    head = (
        f"STAR human text, rest replaced by another task's from system turn t_k: {n_src} sources x 4 forks "
        f"(type WIC), encoder `{a.encoder}`, seed {a.seed}, {a.n_references} references per fork under cross."
    )
    print(head + "\n\n" + md)
    if a.out:
        Path(a.out).write_text(head + "\n\n" + md + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
