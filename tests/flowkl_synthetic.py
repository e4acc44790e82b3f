"""Synthetic dialogue sets whose flow is known, with their turn embeddings (no encoder needed).

A workflow of ``STEPS`` steps, each a user turn then a system turn, each turn kind one direction
of the embedding space (plus a little noise). A conformant dialogue walks the steps in order, now
and then repeating a step (a re-asked question) or taking the alternative answer of step 5, so
that the per-dialogue flow likelihoods vary. A derailed dialogue follows the workflow up to step
``derail_at`` and then another workflow's steps (other directions), as a WIC fork does.
"""

from __future__ import annotations

import numpy as np

STEPS = 8
DIM = 64


def _direction(k: int) -> np.ndarray:
    v = np.zeros(DIM)
    v[k] = 1.0
    return v


def _turn_kinds(step: int, workflow: int, alt: bool = False) -> tuple[int, int]:
    """The embedding axes of a step's user and system turn (workflow 1 uses other axes)."""
    base = 0 if workflow == 0 else 2 * STEPS + 4
    return base + 2 * step, base + 2 * step + 1 if not alt else 2 * STEPS + 2


def dialogue(rng: np.random.Generator, derail_at: int | None = None, noise: float = 0.04):
    """One dialogue (turn dicts) and its ``(n_turns, DIM)`` embeddings."""
    turns, embs = [], []
    step = 0
    while step < STEPS:
        workflow = 1 if derail_at is not None and step >= derail_at else 0
        alt = workflow == 0 and step == 5 and rng.random() < 0.3
        for speaker, axis in zip(("user", "system"), _turn_kinds(step, workflow, alt)):
            turns.append(
                {
                    "speaker": speaker,
                    "text": f"{speaker} turn of step {step} (workflow {workflow}, axis {axis})",
                }
            )
            v = _direction(axis) + noise * rng.standard_normal(DIM)
            embs.append(v / np.linalg.norm(v))
        if workflow == 0 and 1 <= step <= 4 and rng.random() < 0.2:
            continue  # the step is asked again
        step += 1
    return turns, np.array(embs)


def dialogue_set(n: int, seed: int, derail_at: int | None = None):
    """``(dialogues, embeddings)`` of ``n`` dialogues."""
    rng = np.random.default_rng(seed)
    pairs = [dialogue(rng, derail_at) for _ in range(n)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def agent_sets(n_ref: int = 30, n_tgt: int = 8, seed: int = 0, derail_at: int = 3):
    """A reference set, a faithful agent's set (new draws of the same flow) and a derailed agent's
    set (the same flow up to step ``derail_at``, then another workflow), each ``(dialogues, embeddings)``."""
    return (
        dialogue_set(n_ref, seed),
        dialogue_set(n_tgt, seed + 1000),
        dialogue_set(n_tgt, seed + 2000, derail_at=derail_at),
    )
