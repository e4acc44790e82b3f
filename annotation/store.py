"""The study's state and every operation on it (used by the web app, the CLI and the tests).

All writes happen in one transaction each; every answer is a compare-and-set on the
assignment's state (``UPDATE ... WHERE state = expected``), so a replayed or out-of-order
submission changes nothing and is answered with a clear 4xx error.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from .db import (
    DONE,
    NEW,
    STEP1_DONE,
    STEP2_DONE,
    Annotator,
    Assignment,
    Batch,
    Block,
    Conversation,
    IntroSeen,
    Meta,
    make_engine,
    utcnow,
)
from .design import (
    FOIL_SHARE_FORKED,
    MAX_JUDGES,
    OVERLAP_SHARE,
    TaskPool,
    assign_cue,
    block_order,
    derive_seed,
    draw_blocks,
    true_cue_text,
)
from .design import Block as BlockSpec
from .inputs import (  # noqa: F401  (re-exported: the app imports them from here)
    AnnotationError,
    Conflict,
    Invalid,
    NotFound,
    parse_float,
    parse_int,
    parse_json_body,
)
from .inputs import int_field as _int_field
from .security import new_token
from .study_admin import ADMIN_SESSION_HOURS, StudyAdmin  # noqa: F401
from .study_export import StudyExport, recompute_cue, reconstruct_presentation  # noqa: F401

logger = logging.getLogger(__name__)

CUE_ANSWERS = ("yes", "partly", "no")
PREFIX_ANSWERS = ("yes", "mostly", "no")
MAX_NOTE_CHARS = 2000

STEP1_QUESTION = "The assistant was told to follow the steps on the left. How well does it?"
STEP2_INTRO = "At some point, the assistant was given an extra instruction. From then on, it was meant to:"
STEP2_QUESTION = "Does that happen in this conversation?"
STEP3_QUESTION = "Before the highlighted part, did the assistant follow the steps?"


class Study(StudyAdmin, StudyExport):
    """A study database plus the variant pool used to assign cues.

    ``Study(db_url)`` opens (or creates) the database; :meth:`import_records` adds corpus
    records (cues are assigned on import from the study seed, stored in ``meta``).

    Args:
        db_url: An SQLAlchemy database URL, or a bare path (an SQLite file); the tables are
            created when missing.
        variants: The variant pool cues are drawn from
            (:class:`generation.variants.VariantPool`); None loads the packaged variant file
            on first use.
        study_seed: The study's seed, stored when the database is created; None draws a random
            62-bit seed. An existing database keeps its seed.
        foil_share: Share in [0, 1] of forks shown a foil in step 2; stored when the database is
            created (an existing database keeps its stored value).
        task_descriptions: Task -> one-line description (e.g.
            :func:`annotation.corpus.task_descriptions` of the workflow source), added to the
            stored task catalog of WIC cues on the next :meth:`import_records`; None: tasks are
            described by their readable names.

    Raises:
        ValueError: ``study_seed`` is given and differs from the seed the database was created
            with.
    """

    def __init__(
        self,
        db_url: str,
        variants: Any = None,
        study_seed: int | None = None,
        foil_share: float = FOIL_SHARE_FORKED,
        task_descriptions: Mapping[str, str] | None = None,
    ):
        self.engine = make_engine(db_url)
        self.foil_share = foil_share
        self._variants = variants
        self._given_tasks = {
            str(k): " ".join(str(v).split()) for k, v in (task_descriptions or {}).items() if v
        }
        with Session(self.engine) as s, s.begin():
            if s.get(Meta, "study_seed") is None:
                seed = int(study_seed) if study_seed is not None else secrets.randbits(62)
                s.add(Meta(key="study_seed", value=str(seed)))
                s.add(Meta(key="foil_share", value=repr(foil_share)))
            elif study_seed is not None and int(s.get(Meta, "study_seed").value) != int(study_seed):
                raise ValueError(
                    f"{db_url}: the study seed is {s.get(Meta, 'study_seed').value}, not {study_seed}; "
                    "a study keeps its seed (use a new database for a new seed)"
                )

    # -- setup ---------------------------------------------------------------------------------
    @property
    def variants(self):
        """The variant pool cues are drawn from (the packaged variant file, loaded on first use,
        unless one was given)."""
        if self._variants is None:
            from generation.variants import load_variants

            self._variants = load_variants()
        return self._variants

    def meta(self, key: str) -> str | None:
        """A value of the study's ``meta`` table (``study_seed``, ``foil_share``,
        ``task_descriptions``, ``admin_hash``).

        Args:
            key: The entry's name.

        Returns:
            The stored string, or None when the entry does not exist.
        """
        with Session(self.engine) as s:
            m = s.get(Meta, key)
            return m.value if m else None

    @property
    def study_seed(self) -> int:
        """The study's seed, stored when the database was created."""
        return int(self.meta("study_seed"))

    def import_records(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Add the records not yet in the study (by dialogue id); returns how many were added.

        Records must be valid (see :func:`annotation.corpus.load_corpus`). Forks whose source is
        not among the records are kept but never drawn (a mini-block needs every source's
        conformant dialogue).

        Args:
            records: Corpus records (validated and normalized); records whose ``dialogue_id``
                is already in the study are skipped. Their tasks and substitute tasks are added
                to the task catalog.

        Returns:
            The number of conversations added.
        """
        seed = self.study_seed
        foil_share = float(self.meta("foil_share") or self.foil_share)
        records = list(records)
        catalog = self._extend_catalog(records)
        with Session(self.engine) as s, s.begin():
            have = set(s.scalars(select(Conversation.dialogue_id)))
            rows = []
            for r in records:
                if r["dialogue_id"] in have:
                    continue
                cue = assign_cue(r, seed, self.variants, foil_share, tasks=catalog)
                true_text = (
                    true_cue_text(r, self.variants, catalog)[1] if r.get("hallucination_type") else None
                )
                rows.append(
                    dict(
                        dialogue_id=r["dialogue_id"],
                        task=r["task"],
                        source_id=r["source_id"],
                        hallucination_type=r.get("hallucination_type"),
                        variant=r.get("variant"),
                        fork_position=r.get("fork_position"),
                        fork_turn=r.get("fork_turn"),
                        num_system_turns=int(r["num_system_turns"]),
                        record=dict(r),
                        cue_seed=cue.seed,
                        cue_kind=cue.kind,
                        cue_type=cue.htype,
                        cue_variant=cue.variant,
                        cue_text=cue.text,
                        true_cue_text=true_text,
                    )
                )
                have.add(r["dialogue_id"])
            for i in range(0, len(rows), 2000):
                s.execute(insert(Conversation), rows[i : i + 2000])
            n = len(rows)
        logger.info("imported %d new conversation(s)", n)
        return n

    def task_catalog(self) -> dict[str, str]:
        """The study's task catalog (task -> one-line description) used for WIC cues, stored
        in the database so that every cue can be re-derived (:func:`recompute_cue`).

        Returns:
            Task -> description; ``{}`` before the first import.
        """
        raw = self.meta("task_descriptions")
        return json.loads(raw) if raw else {}

    def _extend_catalog(self, records: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """The catalog plus the tasks given at construction (a workflow source such as STAR)
        and every task and substitute task of ``records`` (described by their readable names
        when no source describes them); stored, and returned."""
        from .design import default_task_description

        cat = self.task_catalog()
        new = dict(cat)
        for t, d in self._given_tasks.items():
            new.setdefault(t, d)
        for r in records:
            for t in (r.get("task"), r.get("substitute_task")):
                if t:
                    new.setdefault(str(t), default_task_description(str(t)))
        if new != cat:
            with Session(self.engine) as s, s.begin():
                m = s.get(Meta, "task_descriptions")
                text = json.dumps(dict(sorted(new.items())), ensure_ascii=False)
                if m is None:
                    s.add(Meta(key="task_descriptions", value=text))
                else:
                    m.value = text
        return new

    def tasks(self) -> list[str]:
        """The tasks of the study's conversations.

        Returns:
            The distinct task names, sorted.
        """
        with Session(self.engine) as s:
            return sorted(s.scalars(select(Conversation.task).distinct()))

    # -- batches --------------------------------------------------------------------------------
    def draw_batch(
        self,
        task: str,
        annotator_ids: Sequence[int],
        blocks_per_annotator: int = 1,
        seed: int | None = None,
        overlap_share: float = OVERLAP_SHARE,
        max_judges: int = MAX_JUDGES,
    ) -> dict[str, Any]:
        """Draw mini-blocks of ``task`` for the annotators and assign them (one transaction).

        Returns ``{"batch_id", "seed", "assignments", "blocks", "fresh_blocks"}``.

        Args:
            task: The task whose conversations are drawn.
            annotator_ids: Database ids of the annotators served (see
                :func:`~annotation.design.draw_blocks`).
            blocks_per_annotator: Mini-blocks (five conversations each) per annotator.
            seed: The batch seed (stored with the batch); None draws a random 62-bit seed.
            overlap_share: Probability that a block re-uses an earlier block of another
                annotator (see :func:`~annotation.design.draw_blocks`).
            max_judges: Most annotators per block.

        Returns:
            ``batch_id`` (the new batch), ``seed``, ``assignments`` (conversations assigned),
            ``blocks`` (blocks given) and ``fresh_blocks`` (new blocks among them).

        Raises:
            Invalid: No annotator is given, ``task`` has no conversation, or an id is unknown.
            Conflict: Another batch was drawn at the same time (nothing was assigned).
            SamplingError: The task's pool has no unseen source left for an annotator.
            ValueError: ``blocks_per_annotator < 1``, ``overlap_share`` outside [0, 1], or
                duplicate annotator ids.
        """
        if not annotator_ids:
            raise Invalid("choose at least one annotator for the batch")
        seed = int(seed) if seed is not None else secrets.randbits(62)
        try:
            return self._draw_batch(
                task, annotator_ids, blocks_per_annotator, seed, overlap_share, max_judges
            )
        except IntegrityError:  # another batch was drawn at the same moment (same block ids)
            raise Conflict(
                "another batch was drawn at the same time; nothing was assigned, draw again"
            ) from None

    def _draw_batch(self, task, annotator_ids, blocks_per_annotator, seed, overlap_share, max_judges):
        with Session(self.engine) as s, s.begin():
            rows = (
                s.execute(
                    select(
                        Conversation.dialogue_id,
                        Conversation.source_id,
                        Conversation.task,
                        Conversation.hallucination_type,
                        Conversation.fork_position,
                    ).where(Conversation.task == task)
                )
                .mappings()
                .all()
            )
            if not rows:
                raise Invalid(
                    f"task {task!r} has no conversations in this study (tasks: {', '.join(self.tasks())})"
                )
            pool = TaskPool.from_rows(task, rows)
            annots = {
                a.id: a for a in s.scalars(select(Annotator).where(Annotator.id.in_(list(annotator_ids))))
            }
            missing = [i for i in annotator_ids if i not in annots]
            if missing:
                raise Invalid(f"unknown annotator id(s) {missing}")
            names = [str(i) for i in annotator_ids]
            # the study's state before this draw
            seen: dict[str, set[str]] = defaultdict(set)
            usage: dict[str, int] = defaultdict(int)
            for aid, src, did in s.execute(
                select(Assignment.annotator_id, Conversation.source_id, Conversation.dialogue_id).join(
                    Conversation, Assignment.conversation_id == Conversation.id
                )
            ):
                seen[str(aid)].add(src)
                usage[did] += 1
            existing = []
            judges: dict[int, list[str]] = defaultdict(list)
            for bid, aid in s.execute(select(Assignment.block_id, Assignment.annotator_id).distinct()):
                judges[bid].append(str(aid))
            n_fresh = 0
            for b in s.scalars(select(Block).where(Block.task == task).order_by(Block.id)):
                existing.append(
                    BlockSpec(
                        b.id, b.task, b.latin_row, list(b.dialogue_ids), list(b.sources), sorted(judges[b.id])
                    )
                )
                n_fresh += 1
            next_key = (s.scalar(select(func.max(Block.id))) or 0) + 1
            draws = draw_blocks(
                pool,
                names,
                blocks_per_annotator,
                seed,
                existing=existing,
                seen_sources=seen,
                usage=usage,
                next_row=n_fresh,
                next_key=next_key,
                overlap_share=overlap_share,
                max_judges=max_judges,
            )
            batch = Batch(
                task=task,
                seed=seed,
                params={
                    "annotator_ids": list(annotator_ids),
                    "blocks_per_annotator": blocks_per_annotator,
                    "overlap_share": overlap_share,
                    "max_judges": max_judges,
                },
            )
            s.add(batch)
            s.flush()
            conv_id = dict(
                s.execute(
                    select(Conversation.dialogue_id, Conversation.id).where(Conversation.task == task)
                ).all()
            )
            conv_need3 = {
                c.id: (c.hallucination_type is not None and (c.fork_turn or 0) > 1)
                for c in s.scalars(select(Conversation).where(Conversation.task == task))
            }
            next_pos = {
                aid: (
                    s.scalar(select(func.max(Assignment.position)).where(Assignment.annotator_id == aid)) or 0
                )
                + 1
                for aid in annotator_ids
            }
            n_assign = 0
            for d in draws:
                aid = int(d.annotator)
                if d.fresh:
                    s.add(
                        Block(
                            id=d.block.key,
                            task=task,
                            batch_id=batch.id,
                            latin_row=d.block.latin_row,
                            dialogue_ids=d.block.dialogue_ids,
                            sources=d.block.sources,
                        )
                    )
                    s.flush()
                for slot in block_order(d.order_seed, len(d.block.dialogue_ids)):
                    cid = conv_id[d.block.dialogue_ids[slot]]
                    s.add(
                        Assignment(
                            token=new_token(18),
                            annotator_id=aid,
                            conversation_id=cid,
                            batch_id=batch.id,
                            block_id=d.block.key,
                            block_fresh=d.fresh,
                            position=next_pos[aid],
                            order_seed=d.order_seed,
                            needs_step3=conv_need3[cid],
                            state=NEW,
                        )
                    )
                    next_pos[aid] += 1
                    n_assign += 1
            return {
                "batch_id": batch.id,
                "seed": seed,
                "assignments": n_assign,
                "blocks": len(draws),
                "fresh_blocks": sum(d.fresh for d in draws),
            }

    # -- annotator side -------------------------------------------------------------------------
    def overview(self, annotator: Annotator) -> dict[str, Any]:
        """Progress per task, the next conversation and whether its task's intro is still due.

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).

        Returns:
            ``{"name", "tasks": {task: {"done", "total"}}, "next": {"token", "task"} or None,
            "intro_due": bool, "done", "total"}``.
        """
        with Session(self.engine) as s:
            rows = s.execute(
                select(Assignment.token, Assignment.state, Assignment.position, Conversation.task)
                .join(Conversation, Assignment.conversation_id == Conversation.id)
                .where(Assignment.annotator_id == annotator.id)
                .order_by(Assignment.position)
            ).all()
            seen = set(s.scalars(select(IntroSeen.task).where(IntroSeen.annotator_id == annotator.id)))
        tasks: dict[str, dict[str, int]] = {}
        nxt = None
        for tok, state, _pos, task in rows:
            t = tasks.setdefault(task, {"done": 0, "total": 0})
            t["total"] += 1
            if state == DONE:
                t["done"] += 1
            elif nxt is None:
                nxt = {"token": tok, "task": task}
        return {
            "name": annotator.name,
            "tasks": tasks,
            "next": nxt,
            "intro_due": nxt is not None and nxt["task"] not in seen,
            "done": sum(t["done"] for t in tasks.values()),
            "total": sum(t["total"] for t in tasks.values()),
        }

    def mark_intro_seen(self, annotator: Annotator, task: str) -> None:
        """Record that the annotator read the introduction of ``task`` (idempotent).

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).
            task: The task.
        """
        with Session(self.engine) as s, s.begin():
            if s.get(IntroSeen, (annotator.id, task)) is None:
                s.add(IntroSeen(annotator_id=annotator.id, task=task))

    def intro_seen(self, annotator: Annotator, task: str) -> bool:
        """Whether the annotator read the introduction of ``task``.

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).
            task: The task.

        Returns:
            True once :meth:`mark_intro_seen` was called for them and ``task``.
        """
        with Session(self.engine) as s:
            return s.get(IntroSeen, (annotator.id, task)) is not None

    def annotator_tasks(self, annotator: Annotator) -> list[str]:
        """The tasks of the conversations assigned to the annotator.

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).

        Returns:
            The distinct task names, sorted.
        """
        with Session(self.engine) as s:
            return sorted(
                s.scalars(
                    select(Conversation.task)
                    .distinct()
                    .join(Assignment, Assignment.conversation_id == Conversation.id)
                    .where(Assignment.annotator_id == annotator.id)
                )
            )

    def _load(self, s: Session, annotator: Annotator, token: str) -> tuple[Assignment, Conversation]:
        a = s.scalar(
            select(Assignment).where(Assignment.token == str(token), Assignment.annotator_id == annotator.id)
        )
        if a is None:
            # the same answer for a token of another annotator and for no token at all
            raise NotFound("no such conversation in your assignments")
        return a, s.get(Conversation, a.conversation_id)

    def task_of(self, annotator: Annotator, token: str) -> str:
        """The task of one of the annotator's conversations (404 for a token that is not theirs).

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).
            token: The assignment's token (from the conversation's URL).

        Returns:
            The conversation's task.

        Raises:
            NotFound: ``token`` is not one of the annotator's assignments.
        """
        with Session(self.engine) as s:
            return self._load(s, annotator, token)[1].task

    @staticmethod
    def _check_intro(s: Session, a: Assignment, c: Conversation) -> None:
        """The intro step, enforced here and not only by the pages' redirects."""
        if s.get(IntroSeen, (a.annotator_id, c.task)) is None:
            raise Conflict(
                f"read the introduction of task {c.task!r} first (open your personal link, or "
                f"/a/<your link>/intro/{c.task})"
            )

    def _check_current(self, s: Session, a: Assignment) -> None:
        if a.state == DONE:
            return
        first = s.scalar(
            select(func.min(Assignment.position)).where(
                Assignment.annotator_id == a.annotator_id, Assignment.state != DONE
            )
        )
        if first is not None and a.position != first:
            raise Conflict(
                "finish your current conversation first: conversations are annotated in the given order"
            )

    @staticmethod
    def _turns(c: Conversation) -> list[dict[str, Any]]:
        out, n = [], 0
        for t in c.record["turns"]:
            if t["speaker"] == "system":
                n += 1
                out.append({"speaker": "system", "text": t["text"], "n": n})
            else:
                out.append({"speaker": "user", "text": t["text"], "n": None})
        return out

    def step_payload(self, annotator: Annotator, token: str, step: int | None = None) -> dict[str, Any]:
        """What the browser may know at ``step`` (default: the current step).

        Step 1 holds the task and the turns only; step 2 adds the cue; step 3 adds the fork turn
        and the true instruction. A step after the current one is refused (409).

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).
            token: The assignment's token.
            step: 1, 2 or 3; None: the current step.

        Returns:
            ``{"step": "done", "token", "task"}`` for a completed conversation asked for its
            current step; else ``step``, ``token``, ``task``, ``turns`` (numbered system
            turns), ``num_assistant_turns``, ``question`` and ``answer`` (the stored answer of
            that step, or None), plus for step 2 ``cue_intro``, ``cue``, ``options``,
            ``slider``, and for step 3 ``step2``, ``injected_instruction`` and ``fork_turn``.

        Raises:
            NotFound: ``token`` is not the annotator's, ``step`` is not 1-3, or step 3 is asked
                of a conversation that has none.
            Conflict: An earlier conversation is unfinished, the task's introduction is unread,
                or ``step`` comes after the current step.
        """
        with Session(self.engine) as s:
            a, c = self._load(s, annotator, token)
            self._check_current(s, a)
            self._check_intro(s, a, c)
            current = a.state + 1 if a.state < DONE else None
            if step is None:
                step = current
            if step is None:
                return {"step": "done", "token": a.token, "task": c.task}
            if step not in (1, 2, 3):
                raise NotFound(f"there is no step {step!r}; steps are 1, 2 and 3")
            # order first: before step 2 is submitted, asking for step 3 must not reveal whether
            # the conversation has one
            if current is not None and step > current:
                raise Conflict(f"step {step} cannot be requested before step {current} is submitted")
            if step == 3 and not a.needs_step3:
                raise NotFound(
                    "this conversation has no step 3 (there is no part before the highlighted region)"
                )
            # Nothing before step 3 may tell a fork from a conformant dialogue: not even whether a
            # step 3 will follow (it exists only for forks with t_k > 1).
            p: dict[str, Any] = {
                "step": step,
                "token": a.token,
                "task": c.task,
                "turns": self._turns(c),
                "num_assistant_turns": c.num_system_turns,
                "question": STEP1_QUESTION,
            }
            if step == 1:
                p["answer"] = {"slider": a.slider} if a.state >= STEP1_DONE else None
                return p
            p["question"] = STEP2_QUESTION
            p["cue_intro"] = STEP2_INTRO
            p["cue"] = c.cue_text
            p["options"] = list(CUE_ANSWERS)
            p["slider"] = a.slider
            if step == 2:
                p["answer"] = (
                    {"answer": a.cue_answer, "onset_turn": a.onset_turn} if a.state >= STEP2_DONE else None
                )
                return p
            p["question"] = STEP3_QUESTION
            p["options"] = list(PREFIX_ANSWERS)
            p["step2"] = {"answer": a.cue_answer, "onset_turn": a.onset_turn, "cue": c.cue_text}
            # as in the paper: the instruction actually injected, next to the step-2 answer
            p["injected_instruction"] = (
                " ".join(str(c.record.get("instruction") or "").split()) or c.true_cue_text
            )
            p["fork_turn"] = c.fork_turn
            p["answer"] = {"prefix": a.prefix_answer, "note": a.note} if a.state >= DONE else None
            return p

    def submit(self, annotator: Annotator, token: str, step: int, data: Mapping[str, Any]) -> dict[str, Any]:
        """Record the answer of ``step`` (one transaction, compare-and-set on the state).

        Raises :class:`Invalid` (422) for a malformed answer, :class:`Conflict` (409) for a step
        out of order or already answered, :class:`NotFound` (404) for a token that is not the
        annotator's. Returns ``{"state", "next_step"}``.

        Args:
            annotator: The annotator (from :meth:`annotator_by_link`).
            token: The assignment's token.
            step: The step answered: 1 (``slider``, an integer 0-100), 2 (``answer``:
                yes/partly/no, with ``onset_turn`` in 1..T for yes/partly and empty for no) or 3
                (``prefix``: yes/mostly/no, optional ``note`` of at most ``MAX_NOTE_CHARS``
                characters).
            data: The answer's fields (a JSON object or a form).

        Returns:
            ``{"state": the assignment's new state, "next_step": 2, 3 or None when done}``.

        Raises:
            Invalid: ``data`` is not a mapping, has unknown fields, or a field is missing or
                out of range.
            Conflict: The step is out of order, already answered (also by a concurrent
                submission), a step 3 the conversation does not have, an earlier conversation
                is unfinished, or the task's introduction is unread.
            NotFound: ``token`` is not the annotator's, or ``step`` is not 1-3.
        """
        if not isinstance(data, Mapping):
            raise Invalid("the answer must be a JSON object or a form")
        with Session(self.engine) as s, s.begin():
            a, c = self._load(s, annotator, token)
            self._check_current(s, a)
            self._check_intro(s, a, c)
            if step not in (1, 2, 3):
                raise NotFound(f"there is no step {step!r}; steps are 1, 2 and 3")
            if a.state < step - 1:  # order first (see step_payload)
                raise Conflict(f"step {step} cannot be submitted before step {a.state + 1}")
            if step == 3 and not a.needs_step3:
                raise Conflict("this conversation has no step 3")
            if a.state >= step:
                raise Conflict(
                    f"step {step} was already submitted; an answer cannot be changed once the next step is shown"
                )
            now = utcnow()
            unknown = set(data) - {"slider", "answer", "onset_turn", "prefix", "note"}
            if unknown:
                raise Invalid(f"unknown field(s) {sorted(unknown)} in the answer of step {step}")
            if step == 1:
                v = _int_field(data, "slider")
                if v is None:
                    raise Invalid("step 1 needs 'slider', an integer from 0 to 100")
                if not 0 <= v <= 100:
                    raise Invalid(f"slider must be between 0 and 100, got {v}")
                values = {"slider": v, "step1_at": now, "state": STEP1_DONE}
            elif step == 2:
                ans = data.get("answer")
                if ans not in CUE_ANSWERS:
                    raise Invalid(f"step 2 needs 'answer', one of {', '.join(CUE_ANSWERS)}; got {ans!r}")
                onset = _int_field(data, "onset_turn")
                T = c.num_system_turns
                if ans in ("yes", "partly"):
                    if onset is None:
                        raise Invalid(
                            f"with '{ans}', click the first assistant turn where it starts (onset_turn)"
                        )
                    if not 1 <= onset <= T:
                        raise Invalid(
                            f"onset_turn {onset} is not an assistant turn (assistant turns are numbered 1 to {T})"
                        )
                elif onset is not None:
                    raise Invalid("with 'no', leave onset_turn empty")
                done = not a.needs_step3
                values = {
                    "cue_answer": ans,
                    "onset_turn": onset,
                    "step2_at": now,
                    "state": DONE if done else STEP2_DONE,
                }
                if done:
                    values["completed_at"] = now
            else:
                ans = data.get("prefix")
                if ans not in PREFIX_ANSWERS:
                    raise Invalid(f"step 3 needs 'prefix', one of {', '.join(PREFIX_ANSWERS)}; got {ans!r}")
                note = data.get("note") or None
                if note is not None and (not isinstance(note, str) or len(note) > MAX_NOTE_CHARS):
                    raise Invalid(f"note must be text of at most {MAX_NOTE_CHARS} characters")
                values = {
                    "prefix_answer": ans,
                    "note": note,
                    "step3_at": now,
                    "state": DONE,
                    "completed_at": now,
                }
            res = s.execute(
                update(Assignment)
                .where(Assignment.id == a.id, Assignment.state == step - 1)
                .values(**values)
                .execution_options(synchronize_session=False)
            )
            if res.rowcount != 1:  # a concurrent submission won the race
                raise Conflict(f"step {step} was already submitted")
            state = values["state"]
            return {"state": state, "next_step": None if state == DONE else state + 1}


__all__ = [
    "AnnotationError",
    "Conflict",
    "Invalid",
    "NotFound",
    "Study",
    "derive_seed",
    "parse_float",
    "parse_int",
    "parse_json_body",
    "reconstruct_presentation",
    "recompute_cue",
]
