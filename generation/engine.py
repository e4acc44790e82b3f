"""The backend-agnostic generation engine (SPEC sections 1-4; issue 3).

From STAR scenarios it role-plays conformant dialogues D+ with any :class:`~generation.backends.base.Backend`,
then, for every kept D+ (T >= 4), the 16 forks D^h_k (4 types x 4 fork turns). Dialogues advance in
lockstep: each step sends one batch of :class:`TurnRequest` (one per active dialogue) to the backend.

Output folder layout::

    out/<task>.jsonl          the records of one task, in canonical order (written at the end)
    out/manifest.json         configuration, code version, counts kept/dropped per task, timings
    out/shards/run.json       while running: the configuration and the unit plan
    out/shards/shard-IIIII-of-NNNNN.jsonl.part
                              while running: each shard's records, appended one scenario at a time
                              (its records and then a ``{"_unit": ...}`` marker line, in one write)

A scenario (its D+ and its 16 forks) is the unit of work and of resume: a unit counts as done when
its marker line is on disk; records of an unfinished unit after the last marker are dropped on
resume (a torn last line too). :func:`merge_shards` then copies the units, in plan order, into the
per-task files, so the final corpus is byte-identical whether or not the run was interrupted, and
whatever the number of worker processes or shards. ``manifest.json`` is written last; its presence
means the corpus is complete.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dialfork_dataset.errors import CollectedErrors
from dialfork_dataset.forks import MIN_SYSTEM_TURNS, fork_turns
from dialfork_dataset.jsonl import dumps, make_public, repair_torn_tail, write_json_atomic
from dialfork_dataset.records import DECODING_FIELDS, HALLUCINATION_TYPES, PREFIX_MODES, validate_record
from dialfork_dataset.sources import SourceError, open_source, require, source_identity

from . import prompts
from .backends.base import Backend, TurnRequest
from .compound import compound_key, parse_compound_plan, plan_text
from .seeds import dialogue_seed
from .variants import VARIANT_DRAWS, Variant, VariantPool, draw_substitute_task, draw_variant, load_variants

logger = logging.getLogger("generation")

MANIFEST_FORMAT = "dialfork-generation-manifest/1"
SHARDS_DIR = "shards"
RUN_FILE = "run.json"
UNIT_MARKER = '{"_unit":'
FORKS_PER_SOURCE = len(HALLUCINATION_TYPES) * 4
#: Backend options that do not change the generated text (left out of the run's identity). The
#: dtype is NOT among them: bf16 and float32 sample different tokens, so mixing them is refused.
NON_IDENTITY_OPTIONS = frozenset({"device", "device_map", "batch_size", "concurrency", "timeout", "max_retries",
                                  "api_key", "base_url", "cache_dir", "show_progress"})

#: Default share of prefix turns reworded in ``reword`` mode (SPEC section 3, ours). Calibrated on a
#: template corpus so that the Shared-prefix control's Task 2 tau lands near the paper's 0.682 (LLM
#: replay); see ``docs/generation.md`` for the measurement.
DEFAULT_REWORD_RATE = 0.05

TYPE_NAMES = {
    "WIC": "workflow identity corruption",
    "SSPC": "step selection corruption",
    "GR": "goal replacement",
    "CSC": "competing sub-goal",
}


class GenerationError(CollectedErrors):
    """Bad input to the generator; ``errors`` lists every problem found."""


# --------------------------------------------------------------------------------------------
# configuration
# --------------------------------------------------------------------------------------------


@dataclass
class GenerationConfig:
    """Everything that determines a corpus (plus execution knobs that do not change it)."""

    star: str
    """The workflow source: a STAR folder (``tasks/``, ``apis/``, ``scenarios.jsonl``), ``star:PATH`` or
    ``workflow:PATH`` (a workflow file; :func:`dialfork_dataset.sources.open_source`)."""
    out: str
    """Output folder (record files + ``manifest.json``)."""
    backend: str = "template"
    backend_options: dict[str, Any] = field(default_factory=dict)
    tasks: tuple[str, ...] | None = None
    """Tasks to generate (default: every STAR task)."""
    per_task: int | None = None
    """Keep at most this many scenarios per task (the first ones by STAR dialogue id)."""
    happy_only: bool = False
    seed: int = 0
    prefix_mode: str = "replay"
    """``replay`` (default), ``reuse`` or ``reword`` (SPEC section 3)."""
    reword_rate: float | None = None
    """``reword`` mode only: the probability that a prefix turn (before t_k) is realised with another
    surface form of the same dialogue act; default :data:`DEFAULT_REWORD_RATE`."""
    budget: int | None = None
    """Length budget in turns (both speakers) for every task; default: the task's STAR maximum."""
    cut_after: int = 5
    """Turns after the budget at which a dialogue is cut (SPEC section 3: 5)."""
    variants_path: str | None = None
    variant_draw: str = "quartet"
    """``quartet`` (default): one variant (and one WIC substitute task) per (source, type), shared by
    k=1..4; ``fork``: one draw per fork (:data:`~generation.variants.VARIANT_DRAWS`)."""
    min_system_turns: int = MIN_SYSTEM_TURNS
    """Scenario filter after generation: a D+ with fewer system turns is dropped (``too_short``).
    At least 4, the fewest that admit four distinct fork turns (SPEC section 1)."""
    multitask: bool = False
    """Scenario filter before generation: also role-play STAR's multi-task scenarios, once for each of
    their tasks (default: single-task scenarios only, SPEC section 3)."""
    compound: tuple[tuple[str, int], ...] | None = None
    """Compound forks (SPEC section 3, :mod:`generation.compound`): a plan such as
    ``(("SSPC", 1), ("GR", 3))``; each kept source then gets this one compound fork instead of its
    16 single forks (a corpus of its own, e.g. the ``compound`` config)."""
    # execution knobs (do not change the corpus)
    workers: int = 1
    batch_size: int = 64
    """Scenarios advanced in lockstep per backend batch (an LLM batch holds up to 16x this)."""
    keep_shards: bool = False
    """Keep ``shards/`` after the merge (default: removed once ``manifest.json`` is written)."""

    def check(self) -> list[str]:
        errs: list[str] = []
        if self.prefix_mode not in PREFIX_MODES:
            errs.append(f"prefix mode {self.prefix_mode!r} is unknown: use one of {', '.join(PREFIX_MODES)}")
        if self.budget is not None and (not _is_int(self.budget) or self.budget < 1):
            errs.append(f"budget must be an integer >= 1 turn, got {self.budget!r}")
        if not _is_int(self.cut_after) or self.cut_after < 0:
            errs.append(f"cut_after must be an integer >= 0, got {self.cut_after!r}")
        if self.per_task is not None and (not _is_int(self.per_task) or self.per_task < 1):
            errs.append(f"per_task must be an integer >= 1, got {self.per_task!r}")
        if not _is_int(self.seed):
            errs.append(f"seed must be an integer, got {self.seed!r}")
        if self.reword_rate is not None:
            r = self.reword_rate
            if self.prefix_mode != "reword":
                errs.append(f"reword_rate={r!r} applies to prefix mode 'reword' only (prefix mode is "
                            f"{self.prefix_mode!r}); drop it or use prefix_mode='reword'")
            elif isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0:
                errs.append(f"reword_rate must be a number in [0, 1], got {r!r}")
        if self.variant_draw not in VARIANT_DRAWS:
            errs.append(f"variant_draw {self.variant_draw!r} is unknown: use one of {', '.join(VARIANT_DRAWS)}")
        if not _is_int(self.min_system_turns) or self.min_system_turns < MIN_SYSTEM_TURNS:
            errs.append(f"min_system_turns must be an integer >= {MIN_SYSTEM_TURNS} (four distinct fork turns need "
                        f"T >= {MIN_SYSTEM_TURNS}), got {self.min_system_turns!r}")
        if self.compound is not None:
            try:
                if isinstance(self.compound, str):
                    raise ValueError(f"compound must be a plan such as (('SSPC', 1), ('GR', 3)) (parse_compound_plan("
                                     f"{self.compound!r})), not a string")
                parse_compound_plan(plan_text(self.compound))
            except (ValueError, TypeError) as e:
                errs.append(str(e))
        if not isinstance(self.multitask, bool):
            errs.append(f"multitask must be true or false, got {self.multitask!r}")
        if not _is_int(self.workers) or self.workers < 1:
            errs.append(f"workers must be an integer >= 1, got {self.workers!r}")
        if not _is_int(self.batch_size) or self.batch_size < 1:
            errs.append(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if isinstance(self.tasks, str):
            errs.append(f"tasks must be a sequence of task names, got the string {self.tasks!r} "
                        f"(write tasks=({self.tasks!r},))")
        elif self.tasks is not None and len(self.tasks) == 0:
            errs.append("tasks: an empty task list selects nothing (omit it to generate every task)")
        return errs

    def identity(self) -> dict[str, Any]:
        """The settings that determine the records (compared on resume / when refusing to mix)."""
        return {
            "star": source_identity(self.star),
            "backend": self.backend,
            "backend_options": {k: v for k, v in sorted(self.backend_options.items()) if k not in NON_IDENTITY_OPTIONS},
            "tasks": sorted(self.tasks) if self.tasks else None,
            "per_task": self.per_task,
            "happy_only": self.happy_only,
            "seed": self.seed,
            "prefix_mode": self.prefix_mode,
            "reword_rate": self.effective_reword_rate,
            "budget": self.budget,
            "cut_after": self.cut_after,
            "variant_draw": self.variant_draw,
            "min_system_turns": self.min_system_turns,
            "multitask": self.multitask,
            "compound": plan_text(self.compound) if self.compound else None,
        }

    @property
    def effective_reword_rate(self) -> float | None:
        """The rewording rate in force: ``None`` unless the prefix mode is ``reword``."""
        if self.prefix_mode != "reword":
            return None
        return float(DEFAULT_REWORD_RATE if self.reword_rate is None else self.reword_rate)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


_CODE_FILES = ("engine.py", "seeds.py", "variants.py", "variants.yaml", "backends/base.py")


def code_version(backend: str = "template") -> str:
    """``<package version>+g<hash>``: the hash covers the engine, the variant pool, the prompts and
    the backend module, so a record names exactly the code that produced it."""
    from dialfork_dataset import __version__

    root = Path(__file__).resolve().parent
    files = [root / f for f in _CODE_FILES] + sorted((root / "prompts").glob("*.txt"))
    mod = {"template": "template.py", "transformers": "hf.py", "openai": "openai_backend.py"}.get(backend)
    if mod:
        files.append(root / "backends" / mod)
    h = hashlib.sha256()
    for f in files:
        if f.is_file():
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return f"{__version__}+g{h.hexdigest()[:10]}"


# --------------------------------------------------------------------------------------------
# dialogues
# --------------------------------------------------------------------------------------------


@dataclass
class ForkSpec:
    htype: str
    k: int
    turn: int
    """t_k: the system turn (1-based) before which the instruction is injected."""
    variant: Variant
    instruction: str
    substitute_task: str | None = None


@dataclass(eq=False)
class Dialogue:
    """One dialogue being generated; passed to the backend as ``TurnRequest.state``.

    Backends read ``task``/``scenario``/``turns``/``fork``/``injected``/``wrapped`` and may keep
    private per-dialogue data in ``scratch`` (the template backend keeps its simulator there).
    """

    key: str
    task: Any  # StarTask
    scenario: Any  # Scenario
    seed: int
    budget: int
    cut: int
    fork: ForkSpec | None = None
    substitute: Any = None  # StarTask of WIC's substitute workflow
    reference: Dialogue | None = None
    """For a fork: its conformant parent (turns and backend scratch)."""
    turns: list[dict[str, str]] = field(default_factory=list)
    n_system: int = 0
    injected: bool = False
    wrapped: bool = False
    done: bool = False
    end_reason: str = ""
    prefix_len: int = 0
    """Number of turns copied from D+ (``reuse`` mode)."""
    replay_fallback: bool = False
    reword_rate: float = 0.0
    """``reword`` mode: the share of prefix turns the backend realises with another surface form."""
    pending: list[ForkSpec] = field(default_factory=list)
    """Compound forks: the injections still to come (``fork`` is the one in force)."""
    applied: list[ForkSpec] = field(default_factory=list)
    """Compound forks: the injections already superseded by a later one."""
    substitutes: dict[str, Any] = field(default_factory=dict)
    """Compound forks: WIC substitute task name -> task, for injections after the first."""
    system_messages: list[dict[str, str]] | None = None
    user_messages: list[dict[str, str]] | None = None
    scratch: dict[str, Any] = field(default_factory=dict)

    @property
    def first_fork(self) -> ForkSpec | None:
        """The earliest injection (the only one of a single fork)."""
        return self.applied[0] if self.applied else self.fork

    @property
    def next_role(self) -> str:
        return "user" if len(self.turns) % 2 == 0 else "system"


def service_name(task: Any) -> str:
    return task.name.replace("_", " ")


def _init_messages(d: Dialogue) -> None:
    sc = d.scenario
    sys_prompt = prompts.render(
        "system_agent",
        service=service_name(d.task),
        wizard_task=sc.wizard_task,
        workflow=d.task.render_steps(with_templates=True),
    )
    user_prompt = prompts.render(
        "user_agent", user_task=sc.user_task, user_guide=prompts.user_guide_block(sc.user_guide)
    )
    d.system_messages = [{"role": "system", "content": sys_prompt}]
    d.user_messages = [{"role": "system", "content": user_prompt},
                       {"role": "user", "content": prompts.render("user_opening")}]


def injection_message(fork: ForkSpec) -> dict[str, str]:
    return {"role": "system", "content": prompts.render(
        "injection", type_name=TYPE_NAMES[fork.htype], type_code=fork.htype, instruction=fork.instruction)}


def _append_turn(d: Dialogue, speaker: str, text: str, uses_messages: bool) -> None:
    d.turns.append({"speaker": speaker, "text": text})
    if speaker == "system":
        d.n_system += 1
    if uses_messages:
        own, other = (d.system_messages, d.user_messages) if speaker == "system" else (d.user_messages, d.system_messages)
        own.append({"role": "assistant", "content": text})
        other.append({"role": "user", "content": text})


def _prefix_positions(turns: Sequence[Mapping[str, str]], t: int) -> int:
    """Number of turns before system turn ``t`` (1-based)."""
    n = 0
    for i, tu in enumerate(turns):
        if tu["speaker"] == "system":
            n += 1
            if n == t:
                return i
    raise ValueError(f"system turn {t} not in a dialogue of {n} system turns")


def run_dialogues(dialogues: list[Dialogue], backend: Backend, uses_messages: bool | None = None) -> None:
    """Advance ``dialogues`` in lockstep until each ends (closing token or hard cut)."""
    if uses_messages is None:
        uses_messages = getattr(backend, "uses_messages", True)
    end = prompts.END_TOKEN
    for d in dialogues:
        if uses_messages and d.system_messages is None:
            _init_messages(d)
            for tu in d.turns:  # reuse mode: a copied prefix
                own, other = ((d.system_messages, d.user_messages) if tu["speaker"] == "system"
                              else (d.user_messages, d.system_messages))
                own.append({"role": "assistant", "content": tu["text"]})
                other.append({"role": "user", "content": tu["text"]})
    active = [d for d in dialogues if not d.done]
    wrap = prompts.render("wrap_up") if uses_messages else ""
    while active:
        reqs: list[TurnRequest] = []
        for d in active:
            n = len(d.turns)
            if n >= d.budget and not d.wrapped:
                d.wrapped = True
                if uses_messages:
                    d.system_messages.append({"role": "system", "content": wrap})
                    d.user_messages.append({"role": "system", "content": wrap})
            role = "user" if n % 2 == 0 else "system"
            if role == "system" and d.fork is not None and not d.injected and d.n_system + 1 == d.fork.turn:
                d.injected = True
                if uses_messages:
                    d.system_messages.append(injection_message(d.fork))
            elif role == "system" and d.injected and d.pending and d.n_system + 1 == d.pending[0].turn:
                d.applied.append(d.fork)  # a compound fork's next injection
                d.fork = d.pending.pop(0)
                if d.fork.substitute_task:
                    d.substitute = d.substitutes[d.fork.substitute_task]
                if uses_messages:
                    d.system_messages.append(injection_message(d.fork))
            msgs = (list(d.system_messages) if role == "system" else list(d.user_messages)) if uses_messages else []
            reqs.append(TurnRequest(d.key, role, msgs, d.seed, n, d))
        texts = backend.generate(reqs)
        if len(texts) != len(reqs):
            raise RuntimeError(f"backend {backend.name!r} returned {len(texts)} utterances for {len(reqs)} requests")
        still: list[Dialogue] = []
        for d, req, text in zip(active, reqs, texts):
            if text.__class__ is not str:
                raise RuntimeError(f"backend {backend.name!r} returned a {type(text).__name__} for {d.key} "
                                   f"turn {req.turn_index}")
            closing = end in text
            if closing:
                text = text.replace(end, "")
            text = text.strip()
            if not text:
                text = "..." if not closing else ("Goodbye." if req.role == "system" else "Bye.")
            if uses_messages:
                _append_turn(d, req.role, text, True)
            else:
                d.turns.append({"speaker": req.role, "text": text})
                if req.role == "system":
                    d.n_system += 1
            if closing:
                d.done, d.end_reason = True, f"{req.role} closed"
            elif len(d.turns) >= d.cut:
                d.done, d.end_reason = True, "cut"
            if d.done and d.fork is not None and not d.injected:
                _fallback_to_reuse(d, uses_messages)
            if not d.done:
                still.append(d)
        active = still


def _fallback_to_reuse(d: Dialogue, uses_messages: bool) -> None:
    """A replayed fork ended before its fork turn (an LLM drifted): copy D+'s prefix instead."""
    logger.warning("%s: replayed prefix ended before system turn %d; falling back to D+'s prefix",
                   d.key, d.fork.turn)
    ref = d.reference
    cut = _prefix_positions(ref.turns, d.fork.turn)
    d.turns = [dict(t) for t in ref.turns[:cut]]
    d.n_system = sum(1 for t in d.turns if t["speaker"] == "system")
    d.done, d.wrapped, d.end_reason, d.replay_fallback, d.prefix_len = False, False, "", True, cut
    d.scratch = {}
    if uses_messages:
        d.system_messages = d.user_messages = None
        _init_messages(d)
        for tu in d.turns:
            own, other = ((d.system_messages, d.user_messages) if tu["speaker"] == "system"
                          else (d.user_messages, d.system_messages))
            own.append({"role": "assistant", "content": tu["text"]})
            other.append({"role": "user", "content": tu["text"]})


# --------------------------------------------------------------------------------------------
# units: one scenario, its D+ and its 16 forks
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Unit:
    ordinal: int
    task: str
    scenario: Any  # Scenario

    @property
    def unit_id(self) -> str:
        return f"{self.task}-{self.scenario.scenario_id}"


@dataclass
class RunContext:
    corpus: Any  # StarCorpus
    config: GenerationConfig
    pool: VariantPool
    generator: str
    decoding: dict[str, Any]
    code_version: str
    domain_of: dict[str, str]
    budgets: dict[str, int]


def make_context(corpus: Any, config: GenerationConfig, backend: Backend) -> RunContext:
    pool = load_variants(config.variants_path)
    bind = getattr(backend, "bind_corpus", None)
    if callable(bind):
        bind(corpus)
    dec = dict.fromkeys(DECODING_FIELDS)
    dec.update({k: v for k, v in (backend.decoding() or {}).items() if k in DECODING_FIELDS})
    domain_of = {name: t.domain for name, t in corpus.tasks.items()}
    budgets = {name: (config.budget if config.budget is not None else int(corpus.length_budget(name)))
               for name in corpus.tasks}
    return RunContext(corpus, config, pool, str(backend.name), dec, code_version(config.backend), domain_of, budgets)


def _record(ctx: RunContext, d: Dialogue, source_id: str, prefix_divergence: int | None = None) -> dict[str, Any]:
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
        "injections": [{"type": x.htype, "variant": x.variant.id, "turn": x.turn} for x in steps] if steps else None,
    }


def _conformant(ctx: RunContext, unit: Unit) -> Dialogue:
    task = ctx.corpus.tasks[unit.task]
    budget = ctx.budgets[unit.task]
    sid = str(unit.scenario.scenario_id)
    return Dialogue(key=unit.unit_id, task=task, scenario=unit.scenario, seed=dialogue_seed(ctx.config.seed, sid),
                    budget=budget, cut=budget + ctx.config.cut_after)


def _forks(ctx: RunContext, src: Dialogue) -> list[Dialogue]:
    sid = str(src.scenario.scenario_id)
    ts = fork_turns(src.n_system)
    out = []
    # one draw per quartet (k=None) unless per-fork draws are asked for
    per_fork = ctx.config.variant_draw == "fork"
    reword = ctx.config.effective_reword_rate or 0.0
    for h in HALLUCINATION_TYPES:
        for k, t in enumerate(ts, 1):
            dk = k if per_fork else None
            variant = draw_variant(ctx.pool, ctx.config.seed, sid, h, dk)
            sub = draw_substitute_task(src.task.name, ctx.domain_of, ctx.config.seed, sid, dk) if h == "WIC" else None
            instr = variant.render_instruction(sub, service_name(src.task))
            d = Dialogue(key=f"{src.key}-{h}-k{k}", task=src.task, scenario=src.scenario, seed=src.seed,
                         budget=src.budget, cut=src.cut, reference=src,
                         fork=ForkSpec(h, k, t, variant, instr, sub),
                         substitute=ctx.corpus.tasks[sub] if sub else None, reword_rate=reword)
            if ctx.config.prefix_mode == "reuse":
                cut = _prefix_positions(src.turns, t)
                d.turns = [dict(x) for x in src.turns[:cut]]
                d.n_system = t - 1
                d.prefix_len = cut
            out.append(d)
    return out


def _compound_forks(ctx: RunContext, src: Dialogue) -> list[Dialogue]:
    """The compound fork of ``src`` for ``config.compound``: its injections in plan order, each with the
    variant (and WIC substitute) its type would get as a single fork at that position."""
    sid = str(src.scenario.scenario_id)
    ts = fork_turns(src.n_system)
    per_fork = ctx.config.variant_draw == "fork"
    specs = []
    for h, k in ctx.config.compound:
        dk = k if per_fork else None
        variant = draw_variant(ctx.pool, ctx.config.seed, sid, h, dk)
        sub = draw_substitute_task(src.task.name, ctx.domain_of, ctx.config.seed, sid, dk) if h == "WIC" else None
        specs.append(ForkSpec(h, k, ts[k - 1], variant, variant.render_instruction(sub, service_name(src.task)), sub))
    first = specs[0]
    d = Dialogue(key=compound_key(src.key, ctx.config.compound), task=src.task, scenario=src.scenario, seed=src.seed,
                 budget=src.budget, cut=src.cut, reference=src, fork=first, pending=specs[1:],
                 substitute=ctx.corpus.tasks[first.substitute_task] if first.substitute_task else None,
                 reword_rate=ctx.config.effective_reword_rate or 0.0)
    d.substitutes = {s.substitute_task: ctx.corpus.tasks[s.substitute_task] for s in specs if s.substitute_task}
    if ctx.config.prefix_mode == "reuse":
        cut = _prefix_positions(src.turns, first.turn)
        d.turns = [dict(x) for x in src.turns[:cut]]
        d.n_system = first.turn - 1
        d.prefix_len = cut
    return [d]


def _divergence(fork: Dialogue) -> tuple[int, bool]:
    """(prefix turns differing from D+, whether system turn t_k equals D+'s)."""
    ref = fork.reference.turns
    t = fork.first_fork.turn
    cut = _prefix_positions(fork.turns, t)
    ref_cut = _prefix_positions(ref, t)
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
    counts as ``unknown``."""
    modes: dict[str, int] = {}
    forks = turns = diverging = diverged = at_risk = 0
    for r in records:
        if r.get("hallucination_type") is None:
            continue
        mode = r.get("prefix_mode") or "unknown"
        modes[mode] = modes.get(mode, 0) + 1
        forks += 1
        n = _prefix_positions(r["turns"], r["fork_turn"])
        d = min(r.get("prefix_divergence") or 0, n)
        turns += n
        diverging += d
        diverged += d > 0
        at_risk += n - d + 1 if d else n
    return {"prefix_modes": dict(sorted(modes.items())), "forks": forks, "prefix_turns": turns,
            "diverging_turns": diverging, "share": (diverging / turns) if turns else 0.0,
            "rate": (diverged / at_risk) if at_risk else 0.0}


@dataclass
class UnitResult:
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

    def marker(self, nbytes: int) -> str:
        # line_sha256: a short hash of each record line, checked at merge (a corrupt shard is refused)
        return dumps({"_unit": self.unit_id, "ordinal": self.ordinal, "task": self.task, "kept": self.kept,
                      "reason": self.reason, "T": self.num_system_turns, "records": len(self.lines),
                      "bytes": nbytes, "seconds": round(self.seconds, 4),
                      "prefix_divergence": self.prefix_divergence, "same_at_fork": self.same_at_fork,
                      "replay_fallbacks": self.replay_fallbacks,
                      "line_sha256": [line_hash(line.encode("utf-8")) for line in self.lines]})


def generate_units(ctx: RunContext, units: Sequence[Unit], backend: Backend) -> list[UnitResult]:
    """Generate a batch of units: their D+ in lockstep, then all their forks in lockstep."""
    t0 = time.perf_counter()
    uses_messages = getattr(backend, "uses_messages", True)
    exact = bool(getattr(backend, "exact", False))
    sources = [_conformant(ctx, u) for u in units]
    run_dialogues(sources, backend, uses_messages)
    min_t = ctx.config.min_system_turns
    kept = [s for s in sources if s.n_system >= min_t]
    make_forks = _compound_forks if ctx.config.compound else _forks
    forks_of: dict[str, list[Dialogue]] = {s.key: make_forks(ctx, s) for s in kept}
    all_forks = [f for fs in forks_of.values() for f in fs]
    run_dialogues(all_forks, backend, uses_messages)
    per_unit = (time.perf_counter() - t0) / max(len(units), 1)
    results = []
    for u, s in zip(units, sources):
        if s.n_system < min_t:
            results.append(UnitResult(u.unit_id, u.ordinal, u.task, False,
                                      f"too_short: T={s.n_system} < {min_t} system turns",
                                      s.n_system, [], per_unit))
            continue
        rec = _record(ctx, s, s.key)
        validate_record(rec)
        lines = [dumps(rec)]
        pdiv = same = fallbacks = 0
        for f in forks_of[s.key]:
            if f.pending:  # a compound fork that ended before its later injections: not what was planned
                logger.warning("%s: ended after %d system turns, before the injection at turn %d; dropped",
                               f.key, f.n_system, f.pending[0].turn)
                continue
            div, is_same = _divergence(f)
            if ctx.config.prefix_mode == "reuse" and not f.replay_fallback:
                div = 0
            if is_same:
                if exact:
                    raise RuntimeError(f"{f.key}: backend {backend.name!r} claims exact forks but system turn "
                                       f"{f.first_fork.turn} equals D+'s")
                logger.warning("%s: system turn t_k=%d is identical to D+'s (the backend ignored the instruction)",
                               f.key, f.first_fork.turn)
            pdiv += div
            same += is_same
            fallbacks += f.replay_fallback
            r = _record(ctx, f, s.key, div)
            validate_record(r)
            lines.append(dumps(r))
        results.append(UnitResult(u.unit_id, u.ordinal, u.task, True, "kept", s.n_system, lines, per_unit,
                                  pdiv, same, fallbacks))
    return results


# --------------------------------------------------------------------------------------------
# planning, output folder checks
# --------------------------------------------------------------------------------------------


def _sid_key(sid: str) -> tuple:
    return (0, int(sid), "") if sid.isdigit() else (1, 0, sid)


def plan_units(corpus: Any, config: GenerationConfig, scenarios: Iterable[Any] | None = None) -> list[Unit]:
    """The units of a run, in canonical order: tasks sorted by name, scenarios by STAR id."""
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
        by_task = {t: list(corpus.scenarios_for(task=t, single_task=not config.multitask,
                                                happy=True if config.happy_only else None))
                   for t in names}
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


def _diff_settings(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[str]:
    return [f"{k}: existing {a.get(k)!r} vs requested {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def _writable(folder: Path) -> bool:
    """Really try (root ignores permission bits, read-only mounts do not)."""
    if not os.access(folder, os.W_OK | os.X_OK):
        return False
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError:
        return False
    return True


def check_output_dir(out: Path, identity: Mapping[str, Any]) -> str:
    """Return ``"new"``, ``"resume"`` or ``"complete"``; raise if ``out`` is unusable or holds
    another configuration's records."""
    if out.exists() and not out.is_dir():
        raise GenerationError(f"output folder {out} exists and is not a folder")
    probe = out if out.exists() else next((p for p in out.parents if p.exists()), None)
    if probe is None or not probe.is_dir():
        raise GenerationError(f"output folder {out} cannot be created: {probe} is not a folder; choose another --out")
    if not _writable(probe):
        raise GenerationError(f"output folder {out} is not writable (checked {probe}); choose another --out")
    if not out.exists():
        return "new"
    mpath = out / "manifest.json"
    rpath = out / SHARDS_DIR / RUN_FILE
    for p in (mpath, rpath):
        if p.is_file():
            try:
                existing = json.loads(p.read_text(encoding="utf-8"))["config"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise GenerationError(f"{p} is unreadable ({e}); remove it or choose another --out") from None
            diffs = _diff_settings(existing, identity)
            if diffs:
                raise GenerationError(
                    f"output folder {out} holds records of a different configuration (refusing to mix them); "
                    f"differing setting(s): " + "; ".join(diffs) + ". Use another --out or the same settings.",
                    diffs)
            if p is mpath and not rpath.is_file():
                return "complete"
            return "resume"
    stray = sorted(p.name for p in out.glob("*.jsonl*"))
    if stray:
        raise GenerationError(f"output folder {out} holds record files {stray[:5]} not written by a run of this "
                              f"generator (no manifest.json); use an empty --out")
    return "new"


# --------------------------------------------------------------------------------------------
# shard files
# --------------------------------------------------------------------------------------------


def shard_path(out: Path, shard_index: int, num_shards: int) -> Path:
    return out / SHARDS_DIR / f"shard-{shard_index:05d}-of-{num_shards:05d}.jsonl.part"


def line_hash(line: bytes) -> str:
    """The hash of one record line (without its newline) kept in its unit's marker: the first 16
    hex digits of its SHA-256."""
    return hashlib.sha256(line).hexdigest()[:16]


def verify_shard_block(path: Path, marker: Mapping[str, Any], block: bytes) -> list[str]:
    """Problems of one unit's records in a shard, each ``path:line: dialogue_id=...: reason``:
    a line whose hash differs from the one its marker recorded at generation time (any change,
    even one that keeps the length), a line that is not JSON, a record that fails validation.
    A line whose hash matches is the record the generator validated before writing it; shards
    written before markers carried hashes are validated record by record."""
    from dialfork_dataset.records import dialogue_id_of, record_errors

    first = int(marker.get("line", 0))
    lines = block.split(b"\n")
    if lines[-1] != b"" or len(lines) - 1 != marker["records"]:
        return [f"{path}:{first}: unit {marker['_unit']!r}: {len(lines) - 1} record line(s) where the marker "
                f"says {marker['records']}"]
    hashes = marker.get("line_sha256")
    hashed = isinstance(hashes, list) and len(hashes) == len(lines) - 1
    errs: list[str] = []
    for j, raw in enumerate(lines[:-1]):
        if hashed and line_hash(raw) == hashes[j]:
            continue  # the very line the generator validated and wrote
        where = f"{path}:{first + j}"
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            errs.append(f"{where}: not a JSON record ({type(e).__name__})")
            continue
        did = dialogue_id_of(obj)
        if hashed:  # and the hash differs
            errs.append(f"{where}: dialogue_id={did}: the record differs from the one written at generation "
                        "time (hash mismatch)")
        errs.extend(f"{where}: dialogue_id={did}: {e}" for e in record_errors(obj))
    return errs


def read_shard(path: Path, truncate: bool = False) -> dict[str, dict[str, Any]]:
    """The finished units of a shard file: ``unit_id -> marker`` (with ``offset`` of its records
    and ``line``, the 1-based line number of its first record).

    With ``truncate=True`` everything after the last marker (an unfinished unit, a torn line) is
    cut off the file."""
    done: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return done
    if truncate:
        repair_torn_tail(path)
    offset = 0
    block_start = 0
    good_end = 0
    lineno = block_line = 0
    with open(path, "rb") as fh:
        for raw in fh:
            lineno += 1
            offset_next = offset + len(raw)
            if raw.startswith(UNIT_MARKER.encode()) and raw.endswith(b"\n"):
                try:
                    m = json.loads(raw)
                except json.JSONDecodeError:
                    break
                if m.get("bytes") != offset - block_start:
                    raise GenerationError(f"{path}: unit {m.get('_unit')!r} marker says {m.get('bytes')} bytes of "
                                          f"records but {offset - block_start} precede it; the shard is corrupt, "
                                          f"remove {path} to regenerate it")
                m["offset"] = block_start
                m["line"] = block_line + 1
                done[m["_unit"]] = m
                block_start = good_end = offset_next
                block_line = lineno
            offset = offset_next
    if truncate and good_end < offset:
        with open(path, "rb+") as fh:
            fh.truncate(good_end)
        logger.info("%s: dropped %d bytes of an unfinished scenario", path, offset - good_end)
    return done


class _ShardWriter:
    def __init__(self, path: Path, fsync_interval: float = 2.0):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(path, "ab")
        self._interval = fsync_interval
        self._last = time.monotonic()

    def write_unit(self, res: UnitResult) -> None:
        body = "".join(line + "\n" for line in res.lines).encode("utf-8")
        self._fh.write(body + (res.marker(len(body)) + "\n").encode("utf-8"))
        self._fh.flush()  # in the kernel now: survives a killed process
        now = time.monotonic()
        if now - self._last >= self._interval:  # bounded loss on power failure
            os.fsync(self._fh.fileno())
            self._last = now

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()


# --------------------------------------------------------------------------------------------
# manifest and merge
# --------------------------------------------------------------------------------------------


@dataclass
class Manifest:
    data: dict[str, Any]
    path: Path

    @property
    def counts(self) -> dict[str, Any]:
        return self.data["counts"]

    @property
    def files(self) -> list[Path]:
        return [self.path.parent / f for f in self.data["files"]]

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    @classmethod
    def load(cls, path: str | os.PathLike) -> Manifest:
        p = Path(path)
        if p.is_dir():
            p = p / "manifest.json"
        return cls(json.loads(p.read_text(encoding="utf-8")), p)


def _write_run_file(out: Path, config: GenerationConfig, units: Sequence[Unit], num_shards: int,
                    ctx: RunContext) -> None:
    rpath = out / SHARDS_DIR / RUN_FILE
    data = {"config": config.identity(), "num_shards": num_shards, "generator": ctx.generator,
            "decoding": ctx.decoding, "code_version": ctx.code_version, "variants_version": ctx.pool.version,
            "variants_path": ctx.pool.path,
            "units": [[u.unit_id, u.task] for u in units], "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if rpath.is_file():
        old = json.loads(rpath.read_text(encoding="utf-8"))
        for k in ("num_shards", "units", "code_version", "generator", "decoding", "variants_version"):
            if old.get(k) != data[k]:
                what = "the scenario plan" if k == "units" else k
                raise GenerationError(
                    f"{out}: an unfinished run with a different {what} is in {rpath} (existing "
                    f"{_short(old.get(k))} vs requested {_short(data[k])}); finish it with the same settings or "
                    f"use another --out", [k])
        return
    write_json_atomic(rpath, data, indent=None)


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 80 else s[:77] + "..."


def merge_shards(out_dir: str | os.PathLike, keep_shards: bool = False, wall_seconds: float | None = None) -> Manifest:
    """Merge finished shards into ``<task>.jsonl`` files (canonical order) and write ``manifest.json``.

    Raises :class:`GenerationError` naming the shards that still miss units."""
    t0 = time.perf_counter()
    out = Path(out_dir)
    rpath = out / SHARDS_DIR / RUN_FILE
    if not rpath.is_file():
        if (out / "manifest.json").is_file():
            return Manifest.load(out)
        raise GenerationError(f"{out}: no run to merge ({rpath} missing)")
    run = json.loads(rpath.read_text(encoding="utf-8"))
    n = run["num_shards"]
    done: dict[str, tuple[Path, dict[str, Any]]] = {}
    for i in range(n):
        p = shard_path(out, i, n)
        for uid, m in read_shard(p).items():
            done[uid] = (p, m)
    missing = [uid for uid, _ in run["units"] if uid not in done]
    if missing:
        miss = set(missing)
        shards = sorted({j % n for j, (uid, _) in enumerate(run["units"]) if uid in miss})
        raise GenerationError(f"{out}: {len(missing)} scenario(s) not generated yet (e.g. {missing[:3]}) in shard(s) "
                              f"{shards}; rerun the generation (it resumes) before merging")
    per_task: dict[str, dict[str, Any]] = {}
    by_task: dict[str, list[str]] = {}
    for uid, task in run["units"]:
        by_task.setdefault(task, []).append(uid)
    files = {}
    handles: dict[Path, Any] = {}
    corrupt: list[str] = []  # every bad record line of every shard, reported together
    staged: list[tuple[str, Path]] = []  # (tmp, dest): renamed only once every shard checked out
    totals = {"scenarios": 0, "kept": 0, "dropped": 0, "conformant": 0, "forks": 0, "records": 0}
    pdiv_sum = same = fallbacks = 0
    gen_seconds = 0.0
    try:
        for task in sorted(by_task):
            c = {"scenarios": 0, "kept": 0, "dropped": {}, "conformant": 0, "forks": 0, "records": 0,
                 "system_turns": {"min": None, "max": None, "mean": None}}
            ts = []
            fname = f"{task}.jsonl"
            dest = out / fname
            fd, tmp = tempfile.mkstemp(prefix=f".{fname}.", suffix=".tmp", dir=out)
            make_public(fd)  # mkstemp's 0600 -> the mode a plain open() would give
            h = hashlib.sha256()
            try:
                with os.fdopen(fd, "wb") as fo:
                    for uid in by_task[task]:
                        p, m = done[uid]
                        c["scenarios"] += 1
                        gen_seconds += m.get("seconds", 0.0)
                        if not m["kept"]:
                            reason = m["reason"].split(":")[0]
                            c["dropped"][reason] = c["dropped"].get(reason, 0) + 1
                            continue
                        fh = handles.get(p)
                        if fh is None:
                            fh = handles[p] = open(p, "rb")
                        fh.seek(m["offset"])
                        block = fh.read(m["bytes"])
                        corrupt.extend(verify_shard_block(p, m, block))
                        fo.write(block)
                        h.update(block)
                        c["kept"] += 1
                        c["conformant"] += 1
                        c["forks"] += m["records"] - 1
                        c["records"] += m["records"]
                        ts.append(m["T"])
                        pdiv_sum += m.get("prefix_divergence", 0)
                        same += m.get("same_at_fork", 0)
                        fallbacks += m.get("replay_fallbacks", 0)
                    fo.flush()
                    os.fsync(fo.fileno())
                if c["records"]:
                    staged.append((tmp, dest))
                    files[fname] = {"records": c["records"], "sha256": h.hexdigest()}
                else:
                    os.unlink(tmp)
            except BaseException:
                if os.path.exists(tmp):
                    os.unlink(tmp)
                raise
            if ts:
                c["system_turns"] = {"min": min(ts), "max": max(ts), "mean": round(sum(ts) / len(ts), 3)}
            per_task[task] = c
            for k in ("scenarios", "kept", "conformant", "forks", "records"):
                totals[k] += c[k]
            totals["dropped"] += sum(c["dropped"].values())
        if corrupt:
            bad = sorted({e.split(":", 1)[0] for e in corrupt})
            shown = corrupt[:50] + ([f"... and {len(corrupt) - 50} more"] if len(corrupt) > 50 else [])
            raise GenerationError(
                f"{out}: {len(corrupt)} corrupt record line(s) in {len(bad)} shard(s); nothing was merged. "
                f"Regenerate the corrupt shard(s): remove {', '.join(bad)} and rerun the same generation "
                "command (it regenerates only the removed shards).\n" + "\n".join(shown), corrupt)
        for tmp, dest in staged:
            os.replace(tmp, dest)
        staged.clear()
    finally:
        for fh in handles.values():
            fh.close()
        for tmp, _ in staged:  # not renamed: a corrupt shard or an error
            if os.path.exists(tmp):
                os.unlink(tmp)
    n_forks = totals["forks"]
    data = {
        "format": MANIFEST_FORMAT,
        "config": run["config"],
        "generator": run["generator"],
        "decoding": run["decoding"],
        "code_version": run["code_version"],
        "variants_version": run["variants_version"],
        "num_shards": n,
        "files": files,
        "counts": {"total": totals, "per_task": per_task,
                   "prefix_divergence": {"total_turns": pdiv_sum,
                                         "mean_per_fork": round(pdiv_sum / n_forks, 4) if n_forks else 0.0},
                   "forks_same_at_fork_turn": same, "replay_fallbacks": fallbacks},
        "timings": {"started": run.get("started"),
                    "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "generation_seconds": round(gen_seconds, 3),
                    "merge_seconds": round(time.perf_counter() - t0, 3),
                    "wall_seconds": round(wall_seconds, 3) if wall_seconds is not None else None},
    }
    mpath = out / "manifest.json"
    write_json_atomic(mpath, data)
    if not keep_shards:
        shutil.rmtree(out / SHARDS_DIR, ignore_errors=True)
    logger.info("%s: %d records (%d kept of %d scenarios, %d dropped) in %d file(s)", out, totals["records"],
                totals["kept"], totals["scenarios"], totals["dropped"], len(files))
    return Manifest(data, mpath)


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _worker_run(batch: list[Unit]) -> list[UnitResult]:
    return generate_units(_WORKER["ctx"], batch, _WORKER["backend"])


def _load_corpus(star: str):
    from dialfork_dataset.star import StarError

    try:
        return open_source(star)
    except (StarError, SourceError) as e:
        raise GenerationError(f"workflow source {star} is unusable: {e}", getattr(e, "errors", None)) from e
    except FileNotFoundError as e:
        raise GenerationError(f"workflow source {star} is unusable: {e}") from e


def prepare(config: GenerationConfig, backend: Backend | None = None, scenarios: Iterable[Any] | None = None,
            corpus: Any = None) -> tuple[Any, list[Unit], Backend, RunContext, str]:
    """Validate everything (nothing is written): returns (corpus, units, backend, context, state)."""
    errs = config.check()
    if errs:
        raise GenerationError("invalid generation settings:\n" + "\n".join(f"- {e}" for e in errs), errs)
    out = Path(config.out)
    state = check_output_dir(out, config.identity())
    if corpus is None:
        corpus = _load_corpus(config.star)
    if config.tasks:
        unknown = [t for t in config.tasks if t not in corpus.tasks]
        if unknown:
            raise GenerationError(f"unknown task(s) {unknown}; the source's tasks are: {', '.join(sorted(corpus.tasks))}",
                                  [f"unknown task {t!r}" for t in unknown])
    if backend is None:
        from .backends import get_backend

        backend = get_backend(config.backend, **config.backend_options)
    if config.workers > 1 and getattr(backend, "uses_messages", True):
        raise GenerationError(f"--workers {config.workers}: worker processes are for the template backend; an LLM "
                              f"backend ({getattr(backend, 'name', config.backend)}) batches requests itself (raise "
                              "--batch-size) and scales over devices with accelerate shards (generation.distributed)")
    if config.prefix_mode == "reword" and not getattr(backend, "rewords", False):
        raise GenerationError(f"prefix mode 'reword' needs a backend that rewords its prefixes on request (the "
                              f"template backend); {getattr(backend, 'name', config.backend)} keeps 'replay', whose "
                              "sampling rewords prefixes by itself: use --prefix-mode replay")
    try:  # the source must have what the backend needs (every task: WIC borrows other tasks' workflows)
        for feature in getattr(backend, "requires", ()):
            require(corpus, feature, needed_by=f"the {getattr(backend, 'name', config.backend)} backend")
    except SourceError as e:
        raise GenerationError(str(e), e.errors) from e
    ctx = make_context(corpus, config, backend)
    units = plan_units(corpus, config, scenarios)
    if not units:
        raise GenerationError("the selection holds no scenario (check --tasks / --happy-only)")
    return corpus, units, backend, ctx, state


def generate_corpus(config: GenerationConfig, backend: Backend | None = None, scenarios: Iterable[Any] | None = None,
                    shard_index: int = 0, num_shards: int = 1, progress: bool = True, corpus: Any = None,
                    on_unit: Callable[[UnitResult], None] | None = None) -> Manifest | None:
    """Generate (or resume) shard ``shard_index`` of ``num_shards``; with one shard, also merge and
    return the :class:`Manifest`. With several shards it returns ``None``: call :func:`merge_shards`
    once every shard is done (e.g. on the main process after a barrier)."""
    wall0 = time.perf_counter()
    owns_backend = backend is None
    if not (_is_int(num_shards) and num_shards >= 1 and _is_int(shard_index) and 0 <= shard_index < num_shards):
        raise GenerationError(f"shard {shard_index!r} of {num_shards!r}: need 0 <= shard_index < num_shards")
    corpus, units, backend, ctx, state = prepare(config, backend, scenarios, corpus)
    out = Path(config.out)
    if state == "complete":
        logger.info("%s: already complete (manifest.json matches this configuration); nothing to do", out)
        shutil.rmtree(out / SHARDS_DIR, ignore_errors=True)
        return Manifest.load(out)
    out.mkdir(parents=True, exist_ok=True)
    _write_run_file(out, config, units, num_shards, ctx)
    spath = shard_path(out, shard_index, num_shards)
    done = read_shard(spath, truncate=True)
    mine = [u for u in units[shard_index::num_shards] if u.unit_id not in done]
    logger.info("%s: %d scenario(s) in the plan, shard %d/%d holds %d; backend %s, %d worker(s)", out,
                len(units), shard_index, num_shards, len(units[shard_index::num_shards]), ctx.generator,
                config.workers)
    if done:
        logger.info("%s: resuming, %d scenario(s) done, %d to go", spath.name, len(done), len(mine))
    writer = _ShardWriter(spath)
    from tqdm.auto import tqdm

    per_source = 1 + (1 if config.compound else FORKS_PER_SOURCE)
    bar = tqdm(total=len(mine) * per_source, unit="dlg", desc=f"generate[{shard_index}]",
               disable=not progress, smoothing=0.05)

    def consume(results: Iterable[UnitResult]) -> None:
        for r in results:
            writer.write_unit(r)
            bar.update(per_source)
            if on_unit is not None:
                on_unit(r)

    try:
        bs = config.batch_size
        batches = [mine[i:i + bs] for i in range(0, len(mine), bs)]
        if config.workers > 1 and len(batches) > 1:
            import multiprocessing as mp

            _WORKER.update(ctx=ctx, backend=backend)
            mpctx = mp.get_context("fork") if "fork" in mp.get_all_start_methods() else mp.get_context()
            if mpctx.get_start_method() != "fork":
                raise GenerationError("--workers > 1 needs the 'fork' start method (Linux/macOS)")
            with mpctx.Pool(config.workers) as pool:
                for res in pool.imap(_worker_run, batches):
                    consume(res)
        else:
            for b in batches:
                consume(generate_units(ctx, b, backend))
    finally:
        writer.close()
        bar.close()
        close = getattr(backend, "close", None)
        if owns_backend and callable(close):  # a backend passed in belongs to the caller
            close()
    if num_shards > 1:
        return None
    return merge_shards(out, keep_shards=config.keep_shards, wall_seconds=time.perf_counter() - wall0)


def replace_config(config: GenerationConfig, **changes: Any) -> GenerationConfig:
    return dataclasses.replace(config, **changes)
