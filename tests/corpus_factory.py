"""Small synthetic DialFork corpora with known structure (no generator needed)."""

from __future__ import annotations

import zlib

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns


def make_dialogue(n_system: int, tag: str, diverge_from: int | None = None, base: str = "") -> list[dict]:
    turns = []
    for i in range(1, n_system + 1):
        turns.append({"speaker": "user", "text": f"{base} user says {i}"})
        sys_txt = (
            f"{base} system step {i}" if diverge_from is None or i < diverge_from else f"{tag} off-flow {i}"
        )
        turns.append({"speaker": "system", "text": sys_txt})
    return turns


def make_records(tasks=("weather", "trivia"), per_task=5, T=6, domain_of=None) -> list[dict]:
    recs = []
    for task in tasks:
        dom = (domain_of or {}).get(task, task.split("_")[0])
        for j in range(per_task):
            scen = f"{zlib.crc32(task.encode()) % 1000 * 100 + j}"
            sid = f"{task}-{scen}"
            t_sys = T + (j % 3)
            base = f"{task} {j}"
            recs.append(
                {
                    "dialogue_id": sid,
                    "source_id": sid,
                    "scenario_id": scen,
                    "task": task,
                    "domain": dom,
                    "hallucination_type": None,
                    "variant": None,
                    "instruction": None,
                    "substitute_task": None,
                    "fork_position": None,
                    "fork_turn": None,
                    "num_system_turns": t_sys,
                    "turns": make_dialogue(t_sys, "", None, base),
                    "seed": 1000 + j,
                    "generator": "synthetic",
                    "decoding": {"temperature": None, "top_p": None, "top_k": None, "max_new_tokens": None},
                    "prefix_mode": None,
                    "prefix_divergence": None,
                    "code_version": "test",
                }
            )
            for h in taxonomy.names():
                for k, tk in enumerate(fork_turns(t_sys), 1):
                    recs.append(
                        {
                            "dialogue_id": f"{sid}-{h}-k{k}",
                            "source_id": sid,
                            "scenario_id": scen,
                            "task": task,
                            "domain": dom,
                            "hallucination_type": h,
                            "variant": f"{h.lower()}-v1",
                            "instruction": f"Do {h}",
                            "substitute_task": "other_task" if taxonomy.get(h).substitute else None,
                            "fork_position": k,
                            "fork_turn": tk,
                            "num_system_turns": t_sys,
                            "turns": make_dialogue(t_sys, h, tk, base),
                            "seed": 1000 + j,
                            "generator": "synthetic",
                            "decoding": {
                                "temperature": None,
                                "top_p": None,
                                "top_k": None,
                                "max_new_tokens": None,
                            },
                            "prefix_mode": "replay",
                            "prefix_divergence": 0,
                            "code_version": "test",
                        }
                    )
    return recs
