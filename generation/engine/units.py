"""Units of work: one scenario, its conformant dialogue D+ and its forks (SPEC sections 1-3).

:func:`plan_units` puts a run's scenarios in canonical order; :func:`generate_units` role-plays a
batch of units (their D+ in lockstep, then all their forks in lockstep) and returns each unit's
validated record lines, which the shard writer appends to disk one unit at a time.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dialfork_dataset import taxonomy
from dialfork_dataset.forks import fork_turns, system_turn_to_position
from dialfork_dataset.jsonl import dumps
from dialfork_dataset.records import DECODING_FIELDS, validate_record
from dialfork_dataset.taxonomy import FORK_POSITIONS

from ..backends.base import Backend
from ..compound import compound_key
from ..errors import GenerationError
from ..seeds import dialogue_seed
from ..variants import VariantPool, draw_substitute_task, draw_variant, load_variants
from .config import GenerationConfig
from .dialogue import Dialogue, ForkSpec, run_dialogues, service_name
from .shards import line_hash
from .version import code_version

logger = logging.getLogger("generation")


@dataclass(frozen=True)
class Unit:
    """A unit of work and of resume: one scenario of one task (its D+ and all its forks).

    Attributes:
        ordinal: the unit's 0-based position in the run's canonical plan (:func:`plan_units`).
        task: the task name the scenario is role-played for.
        scenario: the source scenario (a ``Scenario`` of the workflow source).
    """

    ordinal: int
    task: str
    scenario: Any  # Scenario

    @property
    def unit_id(self) -> str:
        """``<task>-<scenario id>``: the unit's id in shard markers and the run file (D+'s dialogue id)."""
        return f"{self.task}-{self.scenario.scenario_id}"


@dataclass
class RunContext:
    """What every unit of a run shares (built by :func:`make_context`).

    Attributes:
        corpus: the workflow source (e.g. ``StarCorpus``).
        config: the run's configuration.
        pool: the variant pool.
        generator: the backend's name, recorded in every record's ``generator``.
        decoding: the backend's decoding settings, one key per ``DECODING_FIELDS`` (``None`` where
            the backend gives none).
        code_version: the records' ``code_version`` (:func:`~generation.engine.version.code_version`).
        domain_of: every task name of the source mapped to its domain (for WIC's substitute draws).
        budgets: every task name mapped to its length budget in turns.
    """

    corpus: Any  # StarCorpus
    config: GenerationConfig
    pool: VariantPool
    generator: str
    decoding: dict[str, Any]
    code_version: str
    domain_of: dict[str, str]
    budgets: dict[str, int]


def make_context(corpus: Any, config: GenerationConfig, backend: Backend) -> RunContext:
    """What every unit of a run shares: the variant pool, the generator's identity, budgets.

    Calls ``backend.bind_corpus(corpus)`` when the backend has it.

    Args:
        corpus: the workflow source (its ``tasks`` and ``length_budget``).
        config: the run's configuration (``variants_path``, ``budget``, ``backend``).
        backend: the backend (its ``name`` and ``decoding()``).

    Returns:
        The run's :class:`RunContext`.

    Raises:
        FileNotFoundError: ``config.variants_path`` is not a file.
        VariantError: the variant file is invalid (:func:`~generation.variants.load_variants`).
    """
    pool = load_variants(config.variants_path)
    bind = getattr(backend, "bind_corpus", None)
    if callable(bind):
        bind(corpus)
    dec = dict.fromkeys(DECODING_FIELDS)
    dec.update({k: v for k, v in (backend.decoding() or {}).items() if k in DECODING_FIELDS})
    domain_of = {name: t.domain for name, t in corpus.tasks.items()}
    budgets = {
        name: (config.budget if config.budget is not None else int(corpus.length_budget(name)))
        for name in corpus.tasks
    }
    return RunContext(
        corpus, config, pool, str(backend.name), dec, code_version(config.backend), domain_of, budgets
    )


def _record(
    ctx: RunContext, d: Dialogue, source_id: str, prefix_divergence: int | None = None
) -> dict[str, Any]:
    f = d.first_fork
    steps = [*d.applied, d.fork] if d.applied else None
    return {
        "dialogue_id": d.key,
        "source_id": source_id,
        "scenario_id": str(d.scenario.scenario_id),
        "task": d.task.name,
        "domain": d.task.domain,
        "hallucination_type": f.htype if f else None,
        "variant": f.variant.id if f else None,
        "instruction": f.instruction if f else None,
        "substitute_task": f.substitute_task if f else None,
        "fork_position": f.k if f else None,
        "fork_turn": f.turn if f else None,
        "num_system_turns": d.n_system,
        "turns": d.turns,
        "seed": d.seed,
        "generator": ctx.generator,
        "decoding": ctx.decoding,
        "prefix_mode": ctx.config.prefix_mode if f else None,
        "prefix_divergence": prefix_divergence if f else None,
        "code_version": ctx.code_version,
        "injections": [{"type": x.htype, "variant": x.variant.id, "turn": x.turn} for x in steps]
        if steps
        else None,
        "conformance": None,  # the D+ check's result, set by generation.conformance.apply_check when on
    }


def conformant_dialogue(ctx: RunContext, unit: Unit) -> Dialogue:
    """The (not yet generated) conformant dialogue D+ of ``unit``.

    Args:
        ctx: the run's context (tasks, budgets, base seed, ``cut_after``).
        unit: the scenario to role-play.

    Returns:
        A new dialogue (:class:`~generation.engine.dialogue.Dialogue`) keyed ``unit.unit_id``, with no turns, the
            scenario's :func:`~generation.seeds.dialogue_seed`, the task's budget and
            ``cut = budget + cut_after``.
    """
    task = ctx.corpus.tasks[unit.task]
    budget = ctx.budgets[unit.task]
    sid = str(unit.scenario.scenario_id)
    return Dialogue(
        key=unit.unit_id,
        task=task,
        scenario=unit.scenario,
        seed=dialogue_seed(ctx.config.seed, sid),
        budget=budget,
        cut=budget + ctx.config.cut_after,
    )


def single_forks(ctx: RunContext, src: Dialogue) -> list[Dialogue]:
    """The forks of ``src``: one per (hallucination type, fork position), in taxonomy order.

    Each fork gets its variant (and, for WIC, its substitute task) from the seeded draws
    (per quartet or per fork, as ``config.variant_draw`` says); in ``reuse`` mode its prefix is
    copied from D+ already.

    Args:
        ctx: the run's context.
        src: the generated conformant dialogue D+ (at least 4 system turns, for four distinct fork
            turns).

    Returns:
        ``forks_per_source()`` (16 for the paper's four types) not yet generated fork dialogues, keyed
            ``<src.key>-<type>-k<k>``, types in registration order (:func:`~dialfork_dataset.taxonomy.names`) and k = 1..4.
    """
    sid = str(src.scenario.scenario_id)
    ts = fork_turns(src.n_system)
    out = []
    # one draw per quartet (k=None) unless per-fork draws are asked for
    per_fork = ctx.config.variant_draw == "fork"
    reword = ctx.config.effective_reword_rate or 0.0
    for h in fork_types(ctx):
        for k, t in enumerate(ts, 1):
            dk = k if per_fork else None
            variant = draw_variant(ctx.pool, ctx.config.seed, sid, h, dk)
            sub = (
                draw_substitute_task(src.task.name, ctx.domain_of, ctx.config.seed, sid, dk, htype=h)
                if taxonomy.get(h).substitute
                else None
            )
            instr = variant.render_instruction(sub, service_name(src.task))
            d = Dialogue(
                key=f"{src.key}-{h}-k{k}",
                task=src.task,
                scenario=src.scenario,
                seed=src.seed,
                budget=src.budget,
                cut=src.cut,
                reference=src,
                fork=ForkSpec(h, k, t, variant, instr, sub),
                substitute=ctx.corpus.tasks[sub] if sub else None,
                reword_rate=reword,
            )
            if ctx.config.prefix_mode == "reuse":
                cut = system_turn_to_position(src.turns, t)
                d.turns = [dict(x) for x in src.turns[:cut]]
                d.n_system = t - 1
                d.prefix_len = cut
            out.append(d)
    return out


def fork_types(ctx: RunContext) -> list[str]:
    """The hallucination types a run can fork: every registered type, less those that follow another
    task's workflow (``substitute``, e.g. WIC) when the source has a single task (a one-task workflow
    file: there is no other workflow to switch to; :func:`single_fork_skips` says so once).

    Args:
        ctx: the run's context (its source's tasks).

    Returns:
        The type codes, in registration order.
    """
    lone = len(ctx.domain_of) < 2
    return [h for h in taxonomy.names() if not (lone and taxonomy.get(h).substitute)]


def single_fork_skips(ctx: RunContext) -> tuple[list[str], int]:
    """The types :func:`fork_types` leaves out, and how many forks each source has fewer.

    Args:
        ctx: the run's context.

    Returns:
        ``(types, forks_per_source_skipped)``: empty and 0 when every type can be forked.
    """
    skipped = [h for h in taxonomy.names() if h not in fork_types(ctx)]
    return skipped, len(skipped) * len(FORK_POSITIONS)


def compound_forks(ctx: RunContext, src: Dialogue) -> list[Dialogue]:
    """The compound fork of ``src`` for ``config.compound``: its injections in plan order, each with the
    variant (and WIC substitute) its type would get as a single fork at that position.

    Args:
        ctx: the run's context; ``ctx.config.compound`` must be a plan of ``(type, k)`` pairs.
        src: the generated conformant dialogue D+.

    Returns:
        A one-element list: the not yet generated compound fork, keyed by
            :func:`generation.compound.compound_key`, with the first injection in force and the others
            pending.
    """
    sid = str(src.scenario.scenario_id)
    ts = fork_turns(src.n_system)
    per_fork = ctx.config.variant_draw == "fork"
    specs = []
    for h, k in ctx.config.compound:
        dk = k if per_fork else None
        variant = draw_variant(ctx.pool, ctx.config.seed, sid, h, dk)
        sub = (
            draw_substitute_task(src.task.name, ctx.domain_of, ctx.config.seed, sid, dk, htype=h)
            if taxonomy.get(h).substitute
            else None
        )
        specs.append(
            ForkSpec(h, k, ts[k - 1], variant, variant.render_instruction(sub, service_name(src.task)), sub)
        )
    first = specs[0]
    d = Dialogue(
        key=compound_key(src.key, ctx.config.compound),
        task=src.task,
        scenario=src.scenario,
        seed=src.seed,
        budget=src.budget,
        cut=src.cut,
        reference=src,
        fork=first,
        pending=specs[1:],
        substitute=ctx.corpus.tasks[first.substitute_task] if first.substitute_task else None,
        reword_rate=ctx.config.effective_reword_rate or 0.0,
    )
    d.substitutes = {
        s.substitute_task: ctx.corpus.tasks[s.substitute_task] for s in specs if s.substitute_task
    }
    if ctx.config.prefix_mode == "reuse":
        cut = system_turn_to_position(src.turns, first.turn)
        d.turns = [dict(x) for x in src.turns[:cut]]
        d.n_system = first.turn - 1
        d.prefix_len = cut
    return [d]


def _divergence(fork: Dialogue) -> tuple[int, bool]:
    """(prefix turns differing from D+, whether system turn t_k equals D+'s)."""
    ref = fork.reference.turns
    t = fork.first_fork.turn
    cut = system_turn_to_position(fork.turns, t)
    ref_cut = system_turn_to_position(ref, t)
    diff = abs(cut - ref_cut)
    for a, b in zip(fork.turns[:cut], ref[:ref_cut]):
        if a["text"] != b["text"] or a["speaker"] != b["speaker"]:
            diff += 1
    same = fork.turns[cut]["text"] == ref[ref_cut]["text"]
    return diff, same


def prefix_rewording(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How the forks' prefixes were made, read from records alone (for reports): the prefix mode(s),
    the number of forks and of prefix turns (turns before system turn t_k), the prefix turns that
    differ from D+ (``prefix_divergence``) and their ``share``, and the realised rewording ``rate``
    in ``reword`` mode. A rewording cascades (every prefix turn after the first reworded one differs
    too), so ``rate`` is the per-turn hazard of the first rewording: forks that diverge divided by
    the prefix turns at risk (up to and including the first reworded one), the maximum-likelihood
    estimate of ``reword_rate``. Conformant records are skipped; a fork without ``prefix_mode``
    counts as ``unknown``.

    Args:
        records: record mappings (SPEC section 4) with ``hallucination_type``, ``turns``,
            ``fork_turn`` and, for forks, ``prefix_mode`` and ``prefix_divergence``.

    Returns:
        A dict with ``prefix_modes`` (mode -> number of forks, sorted by mode), ``forks``,
            ``prefix_turns``, ``diverging_turns``, ``share`` (diverging / prefix turns, 0.0 when there
            are none) and ``rate`` (the hazard estimate above, 0.0 when nothing is at risk).
    """
    modes: dict[str, int] = {}
    forks = turns = diverging = diverged = at_risk = 0
    for r in records:
        if r.get("hallucination_type") is None:
            continue
        mode = r.get("prefix_mode") or "unknown"
        modes[mode] = modes.get(mode, 0) + 1
        forks += 1
        n = system_turn_to_position(r["turns"], r["fork_turn"])
        d = min(r.get("prefix_divergence") or 0, n)
        turns += n
        diverging += d
        diverged += d > 0
        at_risk += n - d + 1 if d else n
    return {
        "prefix_modes": dict(sorted(modes.items())),
        "forks": forks,
        "prefix_turns": turns,
        "diverging_turns": diverging,
        "share": (diverging / turns) if turns else 0.0,
        "rate": (diverged / at_risk) if at_risk else 0.0,
    }


@dataclass
class UnitResult:
    """A generated unit, as the shard writer appends it: its record lines and the marker's counts.

    Attributes:
        unit_id: the unit's id (:attr:`Unit.unit_id`).
        ordinal: the unit's position in the plan.
        task: its task name.
        kept: whether D+ was kept (``False``: dropped, no records).
        reason: ``"kept"``, or why it was dropped (``"too_short: T=... < ... system turns"``).
        num_system_turns: T, D+'s number of system turns.
        lines: the validated record lines (D+ first, then its forks), JSON without newlines.
        seconds: the unit's share of its batch's generation time.
        prefix_divergence: the sum over its forks of prefix turns that differ from D+.
        same_at_fork: how many forks have a system turn t_k identical to D+'s.
        replay_fallbacks: how many forks fell back to D+'s prefix.
        conformant: the conformance check's verdict on D+ (:mod:`generation.conformance`); None
            when unchecked.
    """

    unit_id: str
    ordinal: int
    task: str
    kept: bool
    reason: str
    num_system_turns: int
    lines: list[str]
    seconds: float
    prefix_divergence: int = 0
    same_at_fork: int = 0
    replay_fallbacks: int = 0
    conformant: bool | None = None

    def marker(self, nbytes: int) -> str:
        """The unit's marker line (without newline), written right after its records.

        Args:
            nbytes: the byte length of the unit's record lines as written (newlines included).

        Returns:
            A JSON object line starting ``{"_unit":`` with the unit's id, ordinal, task, kept,
                reason, ``T``, ``records`` (line count), ``bytes``, ``seconds``, the fork counts,
                ``conformant`` (only when checked) and ``line_sha256`` (each line's :func:`~generation.engine.shards.line_hash`).
        """
        # line_sha256: a short hash of each record line, checked at merge (a corrupt shard is refused)
        return dumps(
            {
                "_unit": self.unit_id,
                "ordinal": self.ordinal,
                "task": self.task,
                "kept": self.kept,
                "reason": self.reason,
                "T": self.num_system_turns,
                "records": len(self.lines),
                "bytes": nbytes,
                "seconds": round(self.seconds, 4),
                "prefix_divergence": self.prefix_divergence,
                "same_at_fork": self.same_at_fork,
                "replay_fallbacks": self.replay_fallbacks,
                **({} if self.conformant is None else {"conformant": self.conformant}),
                "line_sha256": [line_hash(line.encode("utf-8")) for line in self.lines],
            }
        )


def _phase(on_step: Callable[[str, int], None] | None, phase: str) -> Callable[[int], None] | None:
    return None if on_step is None else functools.partial(on_step, phase)


def generate_units(
    ctx: RunContext,
    units: Sequence[Unit],
    backend: Backend,
    on_step: Callable[[str, int], None] | None = None,
) -> list[UnitResult]:
    """Generate a batch of units: their D+ in lockstep, then all their forks in lockstep.

    A D+ with fewer than ``config.min_system_turns`` system turns is dropped (``too_short``); a
    compound fork that ended before its later injections is dropped with a warning.

    Args:
        ctx: the run's context (:func:`make_context`).
        units: the units to generate, in plan order.
        backend: the backend that writes every turn.
        on_step: called after each lockstep step with the phase (``"D+"``, then ``"forks"``) and
            the number of utterances the step wrote; ``None`` (default): nothing is called.

    Returns:
        One result (:class:`UnitResult`) per unit, in the order of ``units``.

    Raises:
        RuntimeError: the backend claims exact forks (``backend.exact``) but a fork's system turn
            t_k equals D+'s, or the backend returned a wrong number or type of utterances
            (:func:`~generation.engine.dialogue.run_dialogues`).
        RecordError: a generated record fails validation
            (:func:`dialfork_dataset.records.validate_record`).
    """
    t0 = time.perf_counter()
    uses_messages = getattr(backend, "uses_messages", True)
    exact = bool(getattr(backend, "exact", False))
    sources = [conformant_dialogue(ctx, u) for u in units]
    run_dialogues(sources, backend, uses_messages, _phase(on_step, "D+"))
    min_t = ctx.config.min_system_turns
    kept = [s for s in sources if s.n_system >= min_t]
    make_forks = compound_forks if ctx.config.compound else single_forks
    forks_of: dict[str, list[Dialogue]] = {s.key: make_forks(ctx, s) for s in kept}
    all_forks = [f for fs in forks_of.values() for f in fs]
    run_dialogues(all_forks, backend, uses_messages, _phase(on_step, "forks"))
    per_unit = (time.perf_counter() - t0) / max(len(units), 1)
    results = []
    for u, s in zip(units, sources):
        if s.n_system < min_t:
            results.append(
                UnitResult(
                    u.unit_id,
                    u.ordinal,
                    u.task,
                    False,
                    f"too_short: T={s.n_system} < {min_t} system turns",
                    s.n_system,
                    [],
                    per_unit,
                )
            )
            continue
        rec = _record(ctx, s, s.key)
        validate_record(rec)
        lines = [dumps(rec)]
        pdiv = same = fallbacks = 0
        for f in forks_of[s.key]:
            if f.pending:  # a compound fork that ended before its later injections: not what was planned
                logger.warning(
                    "%s: ended after %d system turns, before the injection at turn %d; dropped",
                    f.key,
                    f.n_system,
                    f.pending[0].turn,
                )
                continue
            div, is_same = _divergence(f)
            if ctx.config.prefix_mode == "reuse" and not f.replay_fallback:
                div = 0
            if is_same:
                if exact:
                    raise RuntimeError(
                        f"{f.key}: backend {backend.name!r} claims exact forks but system turn "
                        f"{f.first_fork.turn} equals D+'s"
                    )
                logger.warning(
                    "%s: system turn t_k=%d is identical to D+'s (the backend ignored the instruction)",
                    f.key,
                    f.first_fork.turn,
                )
            pdiv += div
            same += is_same
            fallbacks += f.replay_fallback
            r = _record(ctx, f, s.key, div)
            validate_record(r)
            lines.append(dumps(r))
        results.append(
            UnitResult(
                u.unit_id, u.ordinal, u.task, True, "kept", s.n_system, lines, per_unit, pdiv, same, fallbacks
            )
        )
    return results


def _sid_key(sid: str) -> tuple:
    return (0, int(sid), "") if sid.isdigit() else (1, 0, sid)


def plan_units(corpus: Any, config: GenerationConfig, scenarios: Iterable[Any] | None = None) -> list[Unit]:
    """The units of a run, in canonical order: tasks sorted by name, scenarios by STAR id.

    Numeric scenario ids sort by value, before any non-numeric ones; ``config.per_task`` then keeps
    the first of each task.

    Args:
        corpus: the workflow source (``tasks``, ``scenarios_for``); not read when ``scenarios`` is
            given.
        config: the run's configuration (``tasks``, ``happy_only``, ``multitask``, ``per_task``).
        scenarios: an explicit list of scenarios to plan instead of the source's (still filtered by
            ``tasks`` and ``happy_only``); ``None`` (default) takes the source's.

    Returns:
        The units (:class:`Unit`), ordinals 0, 1, ... in canonical order.

    Raises:
        GenerationError: the same (task, scenario) appears twice in the plan.
    """
    if scenarios is not None:
        if config.multitask:  # a multi-task scenario is role-played once for each of its tasks
            items = [(t, sc) for sc in scenarios for t in sc.tasks]
        else:
            items = [(sc.task, sc) for sc in scenarios]
        tasks = set(config.tasks) if config.tasks else None
        items = [(t, sc) for t, sc in items if tasks is None or t in tasks]
        if config.happy_only:
            items = [(t, sc) for t, sc in items if sc.happy]
        by_task: dict[str, list[Any]] = {}
        for t, sc in items:
            by_task.setdefault(t, []).append(sc)
    else:
        names = sorted(config.tasks) if config.tasks else sorted(corpus.tasks)
        by_task = {
            t: list(
                corpus.scenarios_for(
                    task=t, single_task=not config.multitask, happy=True if config.happy_only else None
                )
            )
            for t in names
        }
    units: list[Unit] = []
    for t in sorted(by_task):
        scs = sorted(by_task[t], key=lambda s: _sid_key(str(s.scenario_id)))
        if config.per_task is not None:
            scs = scs[: config.per_task]
        for sc in scs:
            units.append(Unit(len(units), t, sc))
    ids = [u.unit_id for u in units]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise GenerationError(f"duplicate scenarios in the plan: {dup}")
    return units


__all__ = [
    "RunContext",
    "Unit",
    "UnitResult",
    "compound_forks",
    "conformant_dialogue",
    "generate_units",
    "make_context",
    "plan_units",
    "prefix_rewording",
    "single_forks",
]
