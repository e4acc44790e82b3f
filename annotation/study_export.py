"""Monitoring and export of a study: progress per annotator and task, the raw answer rows, and the
re-derivation of presentation orders and cues (checks that a study can be reconstructed)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from .db import DONE, NEW, Annotator, Assignment, Block, Conversation
from .design import assign_cue, block_order
from .inputs import NotFound


class StudyExport:
    """Progress and answer export of a study (needs ``engine``)."""

    # -- monitoring and export ------------------------------------------------------------------
    def progress(self) -> list[dict[str, Any]]:
        """Per annotator and task: assigned, started, done.

        Returns:
            One ``{"annotator_id", "annotator", "task", "assigned", "started", "done"}`` per
            (annotator, task) with assignments, sorted by annotator id and task.
        """
        with Session(self.engine) as s:
            rows = s.execute(
                select(Annotator.id, Annotator.name, Conversation.task, Assignment.state)
                .join(Assignment, Assignment.annotator_id == Annotator.id)
                .join(Conversation, Assignment.conversation_id == Conversation.id)
            ).all()
        agg: dict[tuple[int, str, str], dict[str, int]] = {}
        for aid, name, task, state in rows:
            d = agg.setdefault((aid, name, task), {"assigned": 0, "started": 0, "done": 0})
            d["assigned"] += 1
            d["started"] += int(state > NEW)
            d["done"] += int(state == DONE)
        return [
            {"annotator_id": aid, "annotator": name, "task": task, **v}
            for (aid, name, task), v in sorted(agg.items())
        ]

    EXPORT_FIELDS = (
        "annotator",
        "annotator_id",
        "position",
        "block_id",
        "batch_id",
        "dialogue_id",
        "source_id",
        "task",
        "hallucination_type",
        "variant",
        "fork_position",
        "fork_turn",
        "num_system_turns",
        "cue_kind",
        "cue_type",
        "cue_variant",
        "cue_text",
        "cue_seed",
        "order_seed",
        "state",
        "slider",
        "cue_answer",
        "onset_turn",
        "prefix_answer",
        "note",
        "assigned_at",
        "step1_at",
        "step2_at",
        "step3_at",
        "completed_at",
    )

    def export_rows(self, completed_only: bool = False) -> list[dict[str, Any]]:
        """The raw answers, one row per assignment (fields :attr:`EXPORT_FIELDS`).

        Args:
            completed_only: Only completed assignments (all three steps, or two where there is
                no step 3); False exports every assignment, unanswered fields None.

        Returns:
            One dict per assignment with the :attr:`EXPORT_FIELDS`, by annotator id and
            position; timestamps as ISO 8601 strings.
        """
        with Session(self.engine) as s:
            q = (
                select(Assignment, Conversation, Annotator)
                .join(Conversation, Assignment.conversation_id == Conversation.id)
                .join(Annotator, Assignment.annotator_id == Annotator.id)
                .order_by(Annotator.id, Assignment.position)
            )
            if completed_only:
                q = q.where(Assignment.state == DONE)
            out = []
            for a, c, an in s.execute(q).all():
                row = {
                    "annotator": an.name,
                    "annotator_id": an.id,
                    "position": a.position,
                    "block_id": a.block_id,
                    "batch_id": a.batch_id,
                    "dialogue_id": c.dialogue_id,
                    "source_id": c.source_id,
                    "task": c.task,
                    "hallucination_type": c.hallucination_type,
                    "variant": c.variant,
                    "fork_position": c.fork_position,
                    "fork_turn": c.fork_turn,
                    "num_system_turns": c.num_system_turns,
                    "cue_kind": c.cue_kind,
                    "cue_type": c.cue_type,
                    "cue_variant": c.cue_variant,
                    "cue_text": c.cue_text,
                    "cue_seed": c.cue_seed,
                    "order_seed": a.order_seed,
                    "state": a.state,
                    "slider": a.slider,
                    "cue_answer": a.cue_answer,
                    "onset_turn": a.onset_turn,
                    "prefix_answer": a.prefix_answer,
                    "note": a.note,
                }
                for k in ("assigned_at", "step1_at", "step2_at", "step3_at", "completed_at"):
                    v = getattr(a, k)
                    row[k] = v.isoformat(timespec="microseconds") if v is not None else None
                out.append(row)
            return out

    def judgments(self) -> list[dict[str, Any]]:
        """Completed judgments, the input of :mod:`annotation.analysis`.

        Returns:
            :meth:`export_rows` with ``completed_only=True``.
        """
        return self.export_rows(completed_only=True)


def reconstruct_presentation(study: Any, annotator_id: int) -> list[str]:
    """Re-derive an annotator's presentation order (dialogue ids) from the stored block contents
    and order seeds; equals the stored positions' order (a check that presentations can be
    reconstructed).

    Args:
        study: The :class:`~annotation.store.Study`.
        annotator_id: The annotator's database id.

    Returns:
        The dialogue ids in the order the annotator is shown them (blocks in the order of their
        first stored position); empty for an unknown annotator.
    """
    with Session(study.engine) as s:
        rows = s.execute(
            select(Assignment.block_id, Assignment.order_seed, func.min(Assignment.position))
            .where(Assignment.annotator_id == annotator_id)
            .group_by(Assignment.block_id, Assignment.order_seed)
            .order_by(func.min(Assignment.position))
        ).all()
        out: list[str] = []
        for bid, oseed, _ in rows:
            b = s.get(Block, bid)
            out.extend(b.dialogue_ids[i] for i in block_order(oseed, len(b.dialogue_ids)))
        return out


def recompute_cue(study: Any, dialogue_id: str):
    """The cue of a conversation re-derived from the study seed (equals the stored one).

    Args:
        study: The :class:`~annotation.store.Study`.
        dialogue_id: The conversation's dialogue id.

    Returns:
        The :class:`~annotation.design.Cue` that :func:`~annotation.design.assign_cue` gives it
        with the study's seed, foil share, variant pool and stored task catalog.

    Raises:
        NotFound: The study has no conversation ``dialogue_id``.
    """
    with Session(study.engine) as s:
        c = s.scalar(select(Conversation).where(Conversation.dialogue_id == dialogue_id))
        if c is None:
            raise NotFound(f"no conversation {dialogue_id!r}")
        return assign_cue(
            c.record,
            study.study_seed,
            study.variants,
            float(study.meta("foil_share")),
            tasks=study.task_catalog() or None,
        )
