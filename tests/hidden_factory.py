"""Corpora for the hidden-split and audit tests (no generator needed).

:func:`llm_like_records` models what an LLM backend's ``replay`` forks look like: before t_k a fork
copies D+ until its first rewording, after which every turn differs (a changed context changes
every later sample), so no turn-by-turn comparison tells more than the shared prefix does. Texts
carry random tokens, so no turn sequence repeats across sources.
"""

from __future__ import annotations

import random

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns

DECODING = {"temperature": 1.3, "top_p": 0.95, "top_k": 64, "max_new_tokens": None}


def _rec(did, sid, scen, task, h, k, tk, turns, seed, mode=None, div=None):
    n_sys = sum(1 for t in turns if t["speaker"] == "system")
    return {
        "dialogue_id": did,
        "source_id": sid,
        "scenario_id": scen,
        "task": task,
        "domain": task.split("_")[0],
        "hallucination_type": h,
        "variant": f"{h.lower()}-v1" if h else None,
        "instruction": f"Do {h}" if h else None,
        "substitute_task": "other_task" if h and taxonomy.get(h).substitute else None,
        "fork_position": k,
        "fork_turn": tk,
        "num_system_turns": n_sys,
        "turns": turns,
        "seed": seed,
        "generator": "llm-like-test",
        "decoding": DECODING,
        "prefix_mode": "replay" if h else None,
        "prefix_divergence": div if h else None,
        "code_version": "test",
    }


def llm_like_records(
    tasks=("weather", "trivia"), per_task=10, seed=0, prefix="", reword=0.2, t_range=(6, 14)
):
    rng = random.Random(seed)

    def say(who, tag):
        return f"{who} {tag} {rng.getrandbits(48):012x}"

    recs = []
    for task in tasks:
        for j in range(per_task):
            sid = f"{prefix}{task}-{j}"
            scen = f"{prefix}{abs(hash(task)) % 1000}{j:03d}"
            T = rng.randint(*t_range)
            base = [(say("user", sid), say("system", sid)) for _ in range(T)]
            conf = [{"speaker": s, "text": x} for u, y in base for s, x in (("user", u), ("system", y))]
            recs.append(_rec(sid, sid, scen, task, None, None, None, conf, j))
            for h in taxonomy.names():
                for k, tk in enumerate(fork_turns(T), 1):
                    turns, diverged, div = [], False, 0
                    for i in range(tk - 1):
                        for who, x in (("user", base[i][0]), ("system", base[i][1])):
                            diverged = diverged or rng.random() < reword
                            div += diverged
                            turns.append({"speaker": who, "text": say(who, "reworded") if diverged else x})
                    Tf = rng.randint(max(tk, t_range[0]), t_range[1])
                    for _ in range(tk - 1, Tf):
                        turns += [
                            {"speaker": "user", "text": say("user", h)},
                            {"speaker": "system", "text": say("system", h)},
                        ]
                    recs.append(_rec(f"{sid}-{h}-k{k}", sid, scen, task, h, k, tk, turns, j, div=div))
    return recs
