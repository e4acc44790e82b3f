"""The audit's bottom layer: its error, a planned dialogue (:class:`Job`) and its outcome
(:class:`Outcome`), the DialFork record of an outcome, and the output folder (:class:`Store`).

:mod:`.core` (running the conversations) and :mod:`.report` (scoring them) both read these; this
module imports neither.

Output folder (``out``): ``dialogues.jsonl`` (one DialFork record per finished dialogue,
``generator = "agent:<model>"``, rewritten atomically after each one), ``failed.json`` (every
dialogue the agent could not complete: its turns so far and the error), ``steps.json`` (the
workflow step of every agent turn), and the report files.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DIALOGUES_FILE = "dialogues.jsonl"
FAILED_FILE = "failed.json"
STEPS_FILE = "steps.json"


class AuditError(ValueError):
    """Bad input to the audit (unreachable agent, unknown task or scenario, unusable reference)."""


@dataclass
class Job:
    """One conversation of the audit: a scenario of a task.

    Attributes:
        task: The task object of the workflow source.
        scenario: The scenario the user plays.
        seed: The conversation's seed.
        budget: The task's length budget, in turns.
    """

    task: Any
    scenario: Any
    seed: int
    budget: int

    @property
    def dialogue_id(self) -> str:
        return f"audit-{self.task.name}-{self.scenario.scenario_id}"


@dataclass
class Outcome:
    """What one conversation produced (:func:`~dialfork_metrics.audit.core.converse`).

    Attributes:
        job: The conversation's job.
        turns: The turns, ``{speaker, text}``.
        steps: The workflow step of each agent turn (None: off-workflow).
        similarities: The similarity of each agent turn to its step.
        ended_by_agent: Whether the agent closed the dialogue (goodbye step or ``[END]``).
        error: Why the conversation stopped early; None when it finished.
        extra: Further fields kept with the steps (``tool_calls`` with KB tools).
    """

    job: Job
    turns: list[dict[str, str]]
    steps: list[str | None]
    similarities: list[float]
    ended_by_agent: bool
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def record_decoding(sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The record's ``decoding`` (SPEC 4: temperature, top_p, top_k, max_new_tokens) from the
    agent's OpenAI sampling parameters (``max_tokens`` is the OpenAI name of ``max_new_tokens``;
    parameters the record has no field for are left out).

    Args:
        sampling: The agent's sampling parameters.

    Returns:
        The subset of those four fields that ``sampling`` sets.
    """
    out = {k: sampling[k] for k in ("temperature", "top_p", "top_k", "max_new_tokens") if k in sampling}
    if "max_tokens" in sampling and "max_new_tokens" not in out:
        out["max_new_tokens"] = sampling["max_tokens"]
    return out


def record_of(o: Outcome, generator: str, decoding: Mapping[str, Any]) -> dict[str, Any]:
    """The DialFork record (SPEC 4) of a finished conversation: a conformant dialogue whose
    ``dialogue_id`` and ``source_id`` are the job's.

    Args:
        o: The conversation's outcome.
        generator: The record's ``generator`` field.
        decoding: The agent's sampling parameters (:func:`record_decoding`).

    Returns:
        The record (not validated here).
    """
    from generation.api import code_version

    j = o.job
    return {
        "dialogue_id": j.dialogue_id,
        "source_id": j.dialogue_id,
        "scenario_id": str(j.scenario.scenario_id),
        "task": j.task.name,
        "domain": j.task.domain,
        "hallucination_type": None,
        "variant": None,
        "instruction": None,
        "substitute_task": None,
        "fork_position": None,
        "fork_turn": None,
        "num_system_turns": sum(t["speaker"] == "system" for t in o.turns),
        "turns": o.turns,
        "seed": j.seed,
        "generator": generator,
        "decoding": record_decoding(decoding),
        "prefix_mode": None,
        "prefix_divergence": None,
        "code_version": code_version("openai"),
    }


class Store:
    """The audit's output folder: records and failures, each file rewritten atomically.

    Existing files are read back, so that a rerun resumes.

    Args:
        out: The folder (made if missing).

    Attributes:
        out: The folder.
        records: Dialogue id -> record of each finished conversation.
        failed: Dialogue id -> failure (the error and the turns so far).
        steps: Dialogue id -> matched steps, similarities, ``ended_by_agent`` and extras.
    """

    def __init__(self, out: str | os.PathLike):
        from dialfork_dataset.jsonl import read_jsonl

        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.lock = threading.Lock()
        p, f, s = self.out / DIALOGUES_FILE, self.out / FAILED_FILE, self.out / STEPS_FILE
        self.records: dict[str, dict] = {r["dialogue_id"]: r for r in read_jsonl(p)} if p.is_file() else {}
        import json

        self.failed: dict[str, dict] = (
            {r["dialogue_id"]: r for r in json.loads(f.read_text(encoding="utf-8"))} if f.is_file() else {}
        )
        self.steps: dict[str, Any] = json.loads(s.read_text(encoding="utf-8")) if s.is_file() else {}

    def done(self, dialogue_id: str) -> bool:
        """Whether a conversation finished in an earlier run (its record and steps are stored).

        Args:
            dialogue_id: The job's dialogue id.

        Returns:
            True when both are stored.
        """
        return dialogue_id in self.records and dialogue_id in self.steps

    def add(self, o: Outcome, generator: str, decoding: Mapping[str, Any]) -> None:
        """Store an outcome and rewrite the files (thread-safe).

        A finished conversation replaces any earlier failure of the same id; a failed one is listed
        under the failures.

        Args:
            o: The outcome.
            generator: The record's ``generator`` field.
            decoding: The agent's sampling parameters.
        """
        from dialfork_dataset.jsonl import write_json_atomic, write_jsonl
        from dialfork_dataset.records import validate_record

        did = o.job.dialogue_id
        with self.lock:
            if o.error is None:
                rec = record_of(o, generator, decoding)
                validate_record(rec)
                self.records[did] = rec
                self.failed.pop(did, None)
                self.steps[did] = {
                    "steps": o.steps,
                    "similarities": [round(x, 6) for x in o.similarities],
                    "ended_by_agent": o.ended_by_agent,
                    **o.extra,
                }
                write_json_atomic(self.out / STEPS_FILE, self.steps)
                write_jsonl(self.out / DIALOGUES_FILE, self.records.values())
            else:
                self.failed[did] = {
                    "dialogue_id": did,
                    "task": o.job.task.name,
                    "scenario_id": str(o.job.scenario.scenario_id),
                    "generator": generator,
                    "error": o.error,
                    "turns": o.turns,
                    **o.extra,
                }
            write_json_atomic(self.out / FAILED_FILE, list(self.failed.values()))
