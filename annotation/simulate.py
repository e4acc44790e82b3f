"""Synthetic material for trying the tool without a generated corpus or real annotators.

* :func:`synthetic_records`: small but valid DialFork records (SPEC section 4) of one task:
  conformant dialogues and their forks (16 for the paper's four types), with texts that make the deviation visible;
* :func:`simulate_judgments`: judgments of simulated annotators with known properties (how
  the slider depends on the fork position, how often instructions and foils are confirmed,
  where the onset is placed), in the format of :meth:`annotation.store.Study.export_rows`.

Used by the tests, the demo and anyone checking the analyses on data with a known answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns
from dialfork_dataset.records import validate_record
from dialfork_dataset.taxonomy import FORK_POSITIONS, forks_per_source

from .design import CUE_FOIL, CUE_TRUE, FOIL_SHARE_FORKED, derive_seed

_USER = [
    "Hi, I need some help.",
    "My name is {name}.",
    "It is for {day}.",
    "In {city}, please.",
    "Yes, that sounds right.",
    "Could you repeat that?",
    "Great, thanks.",
    "No, that is all.",
    "Bye!",
]
_SYSTEM = [
    "Hello, how can I help?",
    "May I have your name, please?",
    "For what day would you like it?",
    "For what location?",
    "Let me look that up for you.",
    "It will be sunny on {day} in {city}.",
    "Is there anything else that I can do for you?",
    "Thank you and goodbye.",
    "Have a nice day.",
]
_NAMES = ["Alex", "Sam", "Robin", "Kim", "Jo", "Lee", "Max", "Ana"]
_CITIES = ["Paris", "Oslo", "Lima", "Rome", "Kyoto", "Quito", "Cairo", "Perth"]
_DAYS = ["Monday", "Tuesday", "Friday", "Sunday"]


def _dialogue(T: int, rng: np.random.Generator) -> list[dict[str, str]]:
    fill = {"name": str(rng.choice(_NAMES)), "city": str(rng.choice(_CITIES)), "day": str(rng.choice(_DAYS))}
    turns = []
    for i in range(T):
        turns.append({"speaker": "user", "text": _USER[min(i, len(_USER) - 1)].format(**fill)})
        turns.append({"speaker": "system", "text": _SYSTEM[min(i, len(_SYSTEM) - 1)].format(**fill)})
    return turns


def synthetic_records(
    task: str = "weather",
    n_sources: int = 6,
    seed: int = 0,
    pool: Any = None,
    domain: str | None = None,
    min_turns: int = 6,
    max_turns: int = 8,
) -> list[dict[str, Any]]:
    """``n_sources`` conformant dialogues of ``task`` with their forks, one per registered type
    and position (16 for the paper's four types; valid records).

    Variants and instructions come from ``pool`` (default: the packaged variant file); a fork
    keeps the conformant turns before t_k and says its type's ``example_line`` (its registry
    entry) from system turn t_k on. A type with a substitute task records ``restaurant_book``.

    Args:
        task: The task of every dialogue (default ``"weather"``).
        n_sources: Number of conformant source dialogues (default 6).
        seed: Seed of the draw (turn counts, variants); also stored in the records.
        pool: The variant pool (type -> variants); None loads the packaged variant file.
        domain: The records' domain; None takes the task's name up to the first underscore.
        min_turns: Least number of system turns of a dialogue (default 6).
        max_turns: Greatest number of system turns of a dialogue (default 8).

    Returns:
        The records, each source's conformant dialogue followed by its forks (by type, then
        position); every record has passed ``validate_record``.
    """
    if pool is None:
        from generation.variants import load_variants

        pool = load_variants()
    rng = np.random.default_rng(derive_seed("synthetic", task, seed))
    domain = domain or task.split("_")[0]
    out = []
    for i in range(n_sources):
        T = int(rng.integers(min_turns, max_turns + 1))
        turns = _dialogue(T, rng)
        sid = f"{task}-{1000 + i}"
        base = {
            "source_id": sid,
            "scenario_id": str(1000 + i),
            "task": task,
            "domain": domain,
            "num_system_turns": T,
            "seed": int(seed) * 1000 + i,
            "generator": "synthetic",
            "decoding": {"temperature": None, "top_p": None, "top_k": None, "max_new_tokens": None},
            "code_version": "synthetic",
        }
        conf = {
            **base,
            "dialogue_id": sid,
            "turns": turns,
            "hallucination_type": None,
            "variant": None,
            "instruction": None,
            "substitute_task": None,
            "fork_position": None,
            "fork_turn": None,
            "prefix_mode": None,
            "prefix_divergence": None,
        }
        validate_record(conf)
        out.append(conf)
        ts = fork_turns(T)
        for h in taxonomy.names():
            variants = list(pool[h])
            for k in FORK_POSITIONS:
                tk = ts[k - 1]
                v = variants[int(rng.integers(len(variants)))]
                spec = taxonomy.get(h)
                sub = "restaurant_book" if spec.substitute else None
                new, n = [], 0
                for t in turns:
                    if t["speaker"] == "system":
                        n += 1
                        new.append({"speaker": "system", "text": spec.example_line if n >= tk else t["text"]})
                    else:
                        new.append(dict(t))
                rec = {
                    **base,
                    "dialogue_id": f"{sid}-{h}-k{k}",
                    "turns": new,
                    "hallucination_type": h,
                    "variant": v.id,
                    "instruction": v.render_instruction(sub, task.replace("_", " ")),
                    "substitute_task": sub,
                    "fork_position": k,
                    "fork_turn": tk,
                    "prefix_mode": "reuse",
                    "prefix_divergence": 0,
                }
                validate_record(rec)
                out.append(rec)
    return out


def simulate_judgments(
    n_annotators: int = 12,
    tasks: tuple[str, ...] = ("weather", "hotel_book"),
    forks_per_unit: int | None = None,
    conformant_per_unit: int = 4,
    seed: int = 0,
    slope: float | Mapping[str, float] = 20.0,
    noise: float = 10.0,
    conformant_mean: float = 95.0,
    base: float = 10.0,
    p_confirm_true: float = 0.9,
    p_confirm_foil: float = 0.1,
    p_onset_exact: float = 0.7,
    p_prefix_yes: float = 0.9,
    overlap: int = 0,
    foil_share: float = FOIL_SHARE_FORKED,
) -> list[dict[str, Any]]:
    """Judgments of simulated annotators (one row per judgment, export format).

    Each annotator judges, per task, ``forks_per_unit`` forks (default: one per registered type
    and position; types and positions balanced) and
    ``conformant_per_unit`` conformant dialogues. The slider is ``base + slope[type] * (k - 1) +
    N(0, noise)`` for forks and ``conformant_mean + N(0, noise)`` for conformant dialogues,
    clipped to 0..100 (``slope=0``: pure noise). True instructions are confirmed with
    ``p_confirm_true``, foils with ``p_confirm_foil``; a confirmed onset is t_k with
    ``p_onset_exact``, else t_k + 1 or t_k + 2. ``overlap`` extra annotators re-judge the first
    annotator's conversations (agreement data).

    Args:
        n_annotators: Number of annotators (default 12), named ``A00``, ``A01``, ...
        tasks: The tasks each annotator judges.
        forks_per_unit: Forks per (annotator, task); None: one per registered type and position.
        conformant_per_unit: Conformant dialogues per (annotator, task); each is shown a foil.
        seed: Seed of every draw.
        slope: Slider points per position step, one number or ``{type: slope}`` (every
            registered type needs an entry).
        noise: Standard deviation of the slider noise, in slider points.
        conformant_mean: Mean slider of conformant dialogues.
        base: Mean slider of a fork at k=1.
        p_confirm_true: Probability that a true instruction is confirmed.
        p_confirm_foil: Probability that a foil is confirmed.
        p_onset_exact: Probability that a confirmed onset is exactly t_k.
        p_prefix_yes: Probability that the step-3 answer is ``"yes"`` (else ``"mostly"`` or
            ``"no"``).
        overlap: Extra annotators (``R00``, ...) who re-judge the first annotator's
            conversations.
        foil_share: Share of forks shown a foil (default :data:`FOIL_SHARE_FORKED`).

    Returns:
        The judgment rows, completed (``state`` 3), in each annotator's order.
    """
    rng = np.random.default_rng(derive_seed("simulate", seed))
    types = taxonomy.names()
    per_source = forks_per_source()
    forks_per_unit = per_source if forks_per_unit is None else int(forks_per_unit)
    slopes = {h: float(slope[h]) if isinstance(slope, Mapping) else float(slope) for h in types}
    rows: list[dict[str, Any]] = []

    def judge(annot: str, conv: dict[str, Any], pos: int) -> dict[str, Any]:
        h, k = conv["hallucination_type"], conv["fork_position"]
        mean = conformant_mean if h is None else base + slopes[h] * (k - 1)
        slider = int(np.clip(round(mean + rng.normal(0, noise)), 0, 100))
        p = p_confirm_true if conv["cue_kind"] == CUE_TRUE else p_confirm_foil
        ans = "no"
        if rng.random() < p:
            ans = "yes" if rng.random() < 0.85 else "partly"
        onset = None
        if ans != "no":
            tk = conv["fork_turn"] or 1
            onset = tk if rng.random() < p_onset_exact else tk + int(rng.integers(1, 3))
            onset = min(onset, conv["num_system_turns"])
        prefix = None
        if h is not None and conv["fork_turn"] > 1:
            prefix = "yes" if rng.random() < p_prefix_yes else str(rng.choice(["mostly", "no"]))
        return {
            **conv,
            "annotator": annot,
            "annotator_id": None,
            "position": pos,
            "slider": slider,
            "cue_answer": ans,
            "onset_turn": onset,
            "prefix_answer": prefix,
            "note": None,
            "state": 3,
            "completed_at": f"2026-01-01T00:00:{len(rows):06d}",
        }

    first_convs: list[dict[str, Any]] = []
    for a in range(n_annotators):
        pos = 0
        for task in tasks:
            convs = []
            for j in range(forks_per_unit):
                h = types[j % len(types)]
                k = FORK_POSITIONS[(j // len(types)) % len(FORK_POSITIONS)]
                # quartet (type h, source q) is split over annotators q+1..q+4 (mod n): no annotator
                # sees two versions of a source, and every quartet is complete when n >= 4
                src = f"{task}-{h}-{(a - k) % n_annotators}-{j // per_source}"
                T = int(np.random.default_rng(derive_seed("T", src)).integers(6, 12))
                tk = fork_turns(T)[k - 1]
                foil = rng.random() < foil_share
                convs.append(
                    {
                        "dialogue_id": f"{src}-k{k}",
                        "source_id": src,
                        "task": task,
                        "hallucination_type": h,
                        "fork_position": k,
                        "fork_turn": tk,
                        "num_system_turns": T,
                        "cue_kind": CUE_FOIL if foil else CUE_TRUE,
                        "cue_type": types[(j + 1) % len(types)] if foil else h,
                    }
                )
            for j in range(conformant_per_unit):
                convs.append(
                    {
                        "dialogue_id": f"{task}-a{a}-c{j}",
                        "source_id": f"{task}-a{a}-c{j}",
                        "task": task,
                        "hallucination_type": None,
                        "fork_position": None,
                        "fork_turn": None,
                        "num_system_turns": 8,
                        "cue_kind": CUE_FOIL,
                        "cue_type": types[j % len(types)],
                    }
                )
            for i in rng.permutation(len(convs)):
                rows.append(judge(f"A{a:02d}", convs[i], pos))
                pos += 1
                if a == 0:
                    first_convs.append(convs[i])
    for o in range(overlap):
        for pos, conv in enumerate(first_convs):
            rows.append(judge(f"R{o:02d}", conv, pos))
    return rows
