"""The study design as pure functions: seeds, cue / foil assignment, mini-block sampling and
presentation order (paper, Appendix N).

Everything here is deterministic given the stored seeds, so that every presentation can be
reconstructed from the database alone:

* the cue shown in step 2 is a function of (study seed, dialogue id) and the variant pool
  (:func:`assign_cue`), independent of the annotator and of the batch;
* the conversations of a batch are drawn from (batch seed, the study's state before the draw)
  (:func:`draw_blocks`);
* the presentation order inside a mini-block is a permutation drawn from the assignment's
  ``order_seed`` (:func:`block_order`).
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import FORK_POSITIONS, breaking_types

logger = logging.getLogger(__name__)

#: Share of forked conversations shown a foil in step 2 (paper: "about 20%"; each forked
#: conversation is a foil with this probability, drawn from its own seed).
FOIL_SHARE_FORKED: float = 0.2
#: Share of fresh mini-blocks that re-use an earlier mini-block of another annotator of the same
#: task, so that it is judged by 2 or 3 annotators (ours; the paper's study: 70 of 428
#: conversations, 16%, judged more than once).
OVERLAP_SHARE: float = 0.15
#: Most annotators judging the same conversation (paper: "two or three").
MAX_JUDGES: int = 3
#: Conversations per mini-block: one fork at each position k=1..4 plus one conformant dialogue
#: (ours, from the paper's counts: 342 forks and 86 conformant conversations, 4 to 1).
BLOCK_SLOTS: tuple[str, ...] = ("k1", "k2", "k3", "k4", "conformant")

CUE_TRUE = "true"
CUE_FOIL = "foil"
#: The step-2 cue of a WIC instruction (ours, after the paper, Appendix N: "for WIC, the
#: description of the substitute task"); ``{description}`` is the substitute task's one-line
#: description (STAR's ``wizard_task``, see :func:`annotation.corpus.task_descriptions`). Each type
#: with a substitute task declares its own in its registry entry (``HallucinationType.cue``).
WIC_CUE_TEMPLATE: str = taxonomy.get("WIC").cue or ""


def default_task_description(task: str) -> str:
    """The description of a task no workflow source describes: its readable name.

    Args:
        task: The task's name (e.g. ``hotel_book``).

    Returns:
        ``"Help the user with TASK."``, underscores replaced by spaces.
    """
    return f"Help the user with {str(task).replace('_', ' ')}."


def task_domain(task: str) -> str:
    """A task's domain: its name up to the first underscore (as in STAR, ``hotel_book`` -> ``hotel``).

    Args:
        task: The task's name.

    Returns:
        The part before the first underscore (the whole name when it has none).
    """
    return str(task).split("_", 1)[0]


def substitute_cue_text(
    htype: str, substitute_task: str, tasks: Mapping[str, str] | None = None
) -> str | None:
    """The cue of a ``htype`` instruction whose fork follows ``substitute_task``: the type's cue
    template (its registry entry's ``cue``) with the task's description from ``tasks`` (task ->
    description), else :func:`default_task_description`.

    Args:
        htype: A registered type code.
        substitute_task: The substitute task's name.
        tasks: Task -> one-line description.

    Returns:
        The cue text; None when the type declares no cue template (its variants' own cues apply).
    """
    template = taxonomy.get(htype).cue
    if template is None:
        return None
    desc = (tasks or {}).get(substitute_task) or default_task_description(substitute_task)
    desc = " ".join(str(desc).split())
    return template.format(description=desc[0].upper() + desc[1:] if desc else desc)


def wic_cue_text(substitute_task: str, tasks: Mapping[str, str] | None = None) -> str:
    """The WIC cue of ``substitute_task`` (:func:`substitute_cue_text` of ``"WIC"``).

    Args:
        substitute_task: The substitute task's name.
        tasks: Task -> one-line description; a task missing from it is described by
            :func:`default_task_description`.

    Returns:
        The cue text; an empty string when the registered ``WIC`` type declares no cue template.
    """
    return substitute_cue_text("WIC", substitute_task, tasks) or ""


def foil_substitute(task: str, tasks: Mapping[str, str], u: float) -> str | None:
    """The substitute task named by a WIC foil shown on a dialogue of ``task``: uniform (by
    ``u`` in [0, 1)) over the other tasks of its domain, else over every other task, as the
    generator draws a WIC fork's substitute; ``None`` when ``tasks`` holds no other task.

    Args:
        task: The task of the dialogue the foil is shown on.
        tasks: The known tasks (task -> description; only the names are used).
        u: A uniform draw in [0, 1) that picks the task.

    Returns:
        The substitute task's name, or None when ``tasks`` holds no task other than ``task``.
    """
    others = sorted(t for t in tasks if t != task)
    same = [t for t in others if task_domain(t) == task_domain(task)]
    pool = same or others
    if not pool:
        return None
    return pool[min(int(u * len(pool)), len(pool) - 1)]


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts (SHA-256 of their ``repr`` joined by ``\\x1f``).

    Args:
        *parts: Any values; the same parts give the same seed in every process.

    Returns:
        A non-negative integer below 2**63.
    """
    h = hashlib.sha256("\x1f".join(repr(p) for p in parts).encode("utf-8")).digest()
    return int.from_bytes(h[:8], "big") >> 1


@dataclass(frozen=True)
class Cue:
    """The instruction shown in step 2. ``kind`` is ``"true"`` (the injected variant) or
    ``"foil"`` (a variant of another type, never injected in this conversation).

    Attributes:
        kind: ``"true"`` (:data:`CUE_TRUE`) or ``"foil"`` (:data:`CUE_FOIL`).
        htype: The hallucination type of the variant shown (``CSC``, ``GR``, ``SSPC`` or
            ``WIC``).
        variant: The variant's id in the variant file (for a true cue, the fork's ``variant``).
        text: The cue text shown to the annotator.
        seed: The seed the cue was drawn from (:func:`derive_seed` of ``"cue"``, the study seed
            and the dialogue id), so that the draw can be reproduced.
    """

    kind: str
    htype: str
    variant: str
    text: str
    seed: int


def _variant_list(pool: Any, htype: str) -> list[Any]:
    vs = list(pool[htype])
    if not vs:
        raise ValueError(f"variant pool has no variants of type {htype}")
    return vs


def true_cue_text(
    record: Mapping[str, Any], pool: Any, tasks: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """``(variant id, cue text)`` of a fork's injected variant. A fork of a type with a cue
    template (a registry entry with ``cue``, such as WIC) and a substitute task gets that
    template filled with the substitute task's description (:func:`substitute_cue_text`,
    descriptions from ``tasks``).

    A fork whose variant is not in ``pool`` (a corpus generated with another variant file) falls
    back to the record's own ``instruction`` text, with a warning.

    Args:
        record: A forked record (``variant``, ``hallucination_type``, ``substitute_task``,
            ``instruction``).
        pool: The variant pool (``pool.by_id(variant_id).cue``).
        tasks: Task -> one-line description, for substitute-task cues.

    Returns:
        The record's variant id and the cue text (whitespace of a fallback instruction collapsed).
    """
    vid = record.get("variant")
    htype = record.get("hallucination_type")
    if htype is not None and record.get("substitute_task") and taxonomy.get(htype).cue is not None:
        return vid, substitute_cue_text(htype, str(record["substitute_task"]), tasks) or ""
    try:
        return vid, pool.by_id(vid).cue
    except KeyError:
        logger.warning(
            "dialogue %r: variant %r is not in the variant file; showing its instruction text as the cue",
            record.get("dialogue_id"),
            vid,
        )
        return vid, " ".join(str(record.get("instruction") or "").split())


def assign_cue(
    record: Mapping[str, Any],
    study_seed: int,
    pool: Any,
    foil_share: float = FOIL_SHARE_FORKED,
    tasks: Mapping[str, str] | None = None,
) -> Cue:
    """The step-2 cue of one conversation (deterministic in ``(study_seed, dialogue_id)`` and
    the task catalog ``tasks``).

    Conformant conversations always get a foil (a variant of a type drawn uniformly from the
    four); a fork gets a foil with probability ``foil_share`` (a variant of one of the three other
    types, uniformly), otherwise its own variant's cue. The same four draws are made for every
    conversation so that changing the corpus never shifts another conversation's cue.

    WIC cues carry a substitute task's description (:func:`wic_cue_text`): a WIC fork's own
    substitute task; for a WIC foil, a task drawn by :func:`foil_substitute` from ``tasks``
    (task -> one-line description: every task of the workflow source), so that true and foil
    WIC cues read alike. Without ``tasks`` a WIC foil falls back to the variant's generic cue.

    Args:
        record: The conversation's record: ``dialogue_id``, ``task``, ``hallucination_type``
            (None for a conformant dialogue) and, for a fork, ``variant`` (and for WIC
            ``substitute_task``; ``instruction`` is the fallback text of a variant missing from
            ``pool``).
        study_seed: The study's seed (stored in the database).
        pool: The variant pool (:class:`generation.variants.VariantPool`: indexable by type,
            with ``by_id``); foils are drawn from it.
        foil_share: Probability in [0, 1] that a fork is shown a foil instead of its own
            variant (conformant conversations always get a foil).
        tasks: Task -> one-line description of every task of the workflow source, used for WIC
            cues; None uses :func:`default_task_description` for a true WIC cue and the variant's
            generic cue for a WIC foil.

    Returns:
        The :class:`Cue` to show in step 2.

    Raises:
        ValueError: ``foil_share`` is outside [0, 1], or ``pool`` has no variant of the foil's
            type.
    """
    if not 0.0 <= foil_share <= 1.0:
        raise ValueError(f"foil_share must be in [0, 1], got {foil_share}")
    seed = derive_seed("cue", int(study_seed), str(record["dialogue_id"]))
    rng = np.random.default_rng(seed)
    u = float(rng.random())
    ut = float(rng.random())
    uv = float(rng.random())
    us = float(rng.random())
    own = record.get("hallucination_type")
    if own is not None and u >= foil_share:
        vid, text = true_cue_text(record, pool, tasks)
        return Cue(CUE_TRUE, own, vid, text, seed)
    choices = [h for h in taxonomy.names() if h != own]
    htype = choices[min(int(ut * len(choices)), len(choices) - 1)]
    vs = _variant_list(pool, htype)
    v = vs[min(int(uv * len(vs)), len(vs) - 1)]
    text = v.cue
    if taxonomy.get(htype).cue is not None and tasks:
        sub = foil_substitute(str(record["task"]), tasks, us)
        if sub is not None:
            text = substitute_cue_text(htype, sub, tasks) or text
    return Cue(CUE_FOIL, htype, v.id, text, seed)


def latin_types(row: int) -> dict[int, str]:
    """Hallucination type at each fork position k for Latin-square row ``row`` (0..n-1, n the
    number of registered types).

    Row r gives position k the type ``(k - 1 + r) mod n``: over any n consecutive rows every
    (type, k) cell occurs exactly once, for any number of types (the paper's four: a 4 x 4 square).

    Args:
        row: The Latin-square row; any integer, taken modulo n.

    Returns:
        ``{k: hallucination type}`` for the fork positions k = 1..4.
    """
    types = taxonomy.names()
    r = int(row) % len(types)
    return {k: types[(k - 1 + r) % len(types)] for k in FORK_POSITIONS}


def block_order(order_seed: int, n: int = len(BLOCK_SLOTS)) -> list[int]:
    """The presentation permutation of a mini-block (``order[i]`` = slot shown i-th).

    Args:
        order_seed: The assignment's ``order_seed`` (seeds a ``numpy`` generator).
        n: Number of slots (5: the slots of :data:`BLOCK_SLOTS`).

    Returns:
        A permutation of ``range(n)``: the indices of the slots in the order they are shown.
    """
    return [int(i) for i in np.random.default_rng(int(order_seed)).permutation(n)]


@dataclass
class TaskPool:
    """The conversations of one task available for sampling, indexed by source dialogue.

    Build it with :meth:`from_rows`.

    Attributes:
        task: The STAR task the conversations belong to.
        conformant: Source id -> dialogue id of its conformant conversation.
        forks: ``(source id, hallucination type, fork position k)`` -> dialogue id of that fork.
    """

    task: str
    conformant: dict[str, str] = field(default_factory=dict)  # source_id -> dialogue_id
    forks: dict[tuple[str, str, int], str] = field(default_factory=dict)  # (source, type, k) -> dialogue_id

    @classmethod
    def from_rows(cls, task: str, rows: Iterable[Mapping[str, Any]]) -> TaskPool:
        """Rows with ``dialogue_id, source_id, task, hallucination_type, fork_position``.

        Args:
            task: The task to keep; rows of other tasks are skipped.
            rows: Conversation rows; ``hallucination_type`` None marks a conformant dialogue.

        Returns:
            The pool of ``task``'s conversations.
        """
        p = cls(task)
        for r in rows:
            if r["task"] != task:
                continue
            if r.get("hallucination_type") is None:
                p.conformant[r["source_id"]] = r["dialogue_id"]
            else:
                p.forks[(r["source_id"], r["hallucination_type"], int(r["fork_position"]))] = r["dialogue_id"]
        return p

    @property
    def sources(self) -> list[str]:
        """The source ids with a conformant conversation in the pool, sorted."""
        return sorted(self.conformant)


@dataclass
class Block:
    """A mini-block: five dialogue ids (slot order of :data:`BLOCK_SLOTS`) of five distinct sources.

    Attributes:
        key: The block's key (unique within the study).
        task: The task of its conversations.
        latin_row: The Latin-square row that gave the types of its forks (modulo the number of
            registered types).
        dialogue_ids: The five dialogue ids, in slot order (k1..k4, conformant).
        sources: Their source ids, in the same order.
        judges: The annotators it was given to so far.
    """

    key: int
    task: str
    latin_row: int
    dialogue_ids: list[str]
    sources: list[str]
    judges: list[str] = field(default_factory=list)


@dataclass
class BlockDraw:
    """One mini-block given to one annotator by :func:`draw_blocks`.

    Attributes:
        annotator: The annotator.
        block: The block given.
        fresh: True when the block was drawn for this annotator, False when it copies another
            annotator's block (overlap).
        order_seed: Seed of the block's presentation order (:func:`block_order`).
    """

    annotator: str
    block: Block
    fresh: bool
    order_seed: int


class SamplingError(ValueError):
    """The pool cannot supply the requested mini-blocks (too few unseen sources)."""


def draw_blocks(
    pool: TaskPool,
    annotators: Sequence[str],
    blocks_per_annotator: int,
    seed: int,
    *,
    existing: Sequence[Block] = (),
    seen_sources: Mapping[str, Iterable[str]] | None = None,
    usage: Mapping[str, int] | None = None,
    next_row: int = 0,
    next_key: int = 0,
    overlap_share: float = OVERLAP_SHARE,
    max_judges: int = MAX_JUDGES,
) -> list[BlockDraw]:
    """Draw mini-blocks for ``annotators`` (round robin, ``blocks_per_annotator`` each).

    Sampling rules (paper, Appendix N): each fresh mini-block holds one fork at each position
    k=1..4, with the types of Latin-square row ``next_row, next_row+1, ...`` (so every n fresh
    blocks of a task, n the number of registered types, cover each type x position once), plus one conformant dialogue; its five
    conversations come from five distinct sources, none of which the annotator has seen (no
    annotator sees two versions of one source dialogue). Sources and conversations used least so
    far are preferred (ties broken at random). With probability ``overlap_share`` a block is
    instead a copy of an earlier block of another annotator (``existing`` or drawn in this call)
    that has fewer than ``max_judges`` judges and no source the annotator has seen, so that a
    share of the conversations is judged by two or three annotators.

    ``seen_sources`` (annotator -> sources already assigned), ``usage`` (dialogue id -> times
    assigned), ``next_row`` and ``next_key`` carry the study's state from earlier batches.
    Raises :class:`SamplingError` naming the annotator and slot when the pool runs out.

    Args:
        pool: The task's conversations.
        annotators: The annotators to serve (distinct names), in round-robin order.
        blocks_per_annotator: Mini-blocks each annotator gets (>= 1).
        seed: The batch seed; the draw is deterministic given it and the state arguments.
        existing: Mini-blocks of earlier batches, candidates for overlap copies (their
            ``judges`` lists are extended in place when copied).
        seen_sources: Annotator -> source ids already assigned to them; None: nobody has seen
            anything.
        usage: Dialogue id -> times already assigned (least-used conversations are preferred);
            None: no usage yet.
        next_row: Latin-square row of the next fresh block.
        next_key: Key of the next fresh block.
        overlap_share: Probability in [0, 1] that a block is a copy of an eligible earlier
            block instead of a fresh one.
        max_judges: Most annotators one block (hence one conversation) is given to.

    Returns:
        One :class:`BlockDraw` per block given, in drawing order (round by round, annotators in
        the given order): the annotator, the block (fresh or copied), ``fresh`` and the
        ``order_seed`` of its presentation order.

    Raises:
        ValueError: ``blocks_per_annotator < 1``, ``overlap_share`` outside [0, 1], or duplicate
            annotators.
        SamplingError: No unseen source is left for an annotator in some slot.
    """
    if blocks_per_annotator < 1:
        raise ValueError(f"blocks_per_annotator must be >= 1, got {blocks_per_annotator}")
    if not 0.0 <= overlap_share <= 1.0:
        raise ValueError(f"overlap_share must be in [0, 1], got {overlap_share}")
    if len(set(annotators)) != len(annotators):
        raise ValueError("draw_blocks: duplicate annotators")
    rng = np.random.default_rng(derive_seed("batch", int(seed)))
    seen: dict[str, set[str]] = defaultdict(set)
    for a, ss in (seen_sources or {}).items():
        seen[a].update(ss)
    used: Counter[str] = Counter(usage or {})
    src_used: Counter[str] = Counter()
    did_source: dict[str, str] = dict(zip(pool.conformant.values(), pool.conformant.keys()))
    for (s, _h, _k), d in pool.forks.items():
        did_source[d] = s
    for d, n in used.items():
        if d in did_source:
            src_used[did_source[d]] += n
    blocks: list[Block] = list(existing)
    out: list[BlockDraw] = []
    row, key = int(next_row), int(next_key)

    def pick(candidates: list[tuple[str, str]]) -> tuple[str, str]:
        # candidates: (source, dialogue id); least-used conversation, then least-used source.
        jitter = rng.random(len(candidates))
        best = min(
            range(len(candidates)),
            key=lambda i: (used[candidates[i][1]], src_used[candidates[i][0]], jitter[i]),
        )
        return candidates[best]

    for _round in range(blocks_per_annotator):
        for a in annotators:
            order_seed = derive_seed("order", int(seed), a, key, len(out))
            copy = None
            if blocks and float(rng.random()) < overlap_share:
                eligible = [
                    b
                    for b in blocks
                    if a not in b.judges
                    and len(b.judges) < max_judges
                    and b.task == pool.task
                    and not (set(b.sources) & seen[a])
                ]
                if eligible:
                    copy = eligible[int(rng.integers(len(eligible)))]
            if copy is not None:
                block, fresh = copy, False
            else:
                types = latin_types(row)
                dids: list[str] = []
                srcs: list[str] = []
                for slot in BLOCK_SLOTS:
                    if slot == "conformant":
                        cands = [
                            (s, d) for s, d in pool.conformant.items() if s not in seen[a] and s not in srcs
                        ]
                    else:
                        k = int(slot[1])
                        cands = [
                            (s, d)
                            for (s, h, kk), d in pool.forks.items()
                            if h == types[k] and kk == k and s not in seen[a] and s not in srcs
                        ]
                    if not cands:
                        what = (
                            "a conformant dialogue"
                            if slot == "conformant"
                            else f"a {types[int(slot[1])]} fork at k={slot[1]}"
                        )
                        raise SamplingError(
                            f"task {pool.task!r}: no source left for annotator {a!r} with {what} they have not "
                            f"seen ({len(pool.sources)} sources in the corpus, {len(seen[a])} seen); draw fewer "
                            f"blocks or add conversations to the corpus"
                        )
                    s, d = pick(sorted(cands))
                    srcs.append(s)
                    dids.append(d)
                block = Block(key, pool.task, row % len(taxonomy.names()), dids, srcs)
                key += 1
                row += 1
                blocks.append(block)
                fresh = True
            block.judges.append(a)
            seen[a].update(block.sources)
            for s, d in zip(block.sources, block.dialogue_ids):
                used[d] += 1
                src_used[s] += 1
            out.append(BlockDraw(a, block, fresh, order_seed))
    return out


def __getattr__(name: str):
    """``BREAKING_TYPES``: the registered types that break a workflow component, when read
    (:func:`dialfork_dataset.taxonomy.breaking_types`; the paper's WIC, SSPC and GR)."""
    if name == "BREAKING_TYPES":
        return breaking_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
