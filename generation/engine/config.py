"""What determines a corpus: :class:`GenerationConfig`, its checks and its identity (SPEC section 3)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from dialfork_dataset.forks import MIN_SYSTEM_TURNS
from dialfork_dataset.records import PREFIX_MODES
from dialfork_dataset.sources import source_record

from ..compound import parse_compound_plan, plan_text
from ..variants import VARIANT_DRAWS

#: Backend options that do not change the generated text (left out of the run's identity). The
#: dtype is NOT among them: bf16 and float32 sample different tokens, so mixing them is refused.
NON_IDENTITY_OPTIONS = frozenset(
    {
        "device",
        "device_map",
        "batch_size",
        "concurrency",
        "timeout",
        "max_retries",
        "api_key",
        "base_url",
        "cache_dir",
        "show_progress",
        "gguf_cache",
    }
)

#: Default share of prefix turns reworded in ``reword`` mode (SPEC section 3, ours). Calibrated on a
#: template corpus so that the Shared-prefix control's Task 2 tau lands near the paper's 0.682 (LLM
#: replay); see ``docs/generation.md`` for the measurement.
DEFAULT_REWORD_RATE = 0.05


@dataclass
class GenerationConfig:
    """Everything that determines a corpus (plus execution knobs that do not change it).

    Nothing is checked at construction: :meth:`check` lists the problems, and
    :func:`~generation.engine.run.generate_corpus` refuses a configuration that has any.

    Attributes:
        star: the workflow source: a STAR folder, ``star:PATH`` or ``workflow:PATH``.
        out: the output folder (record files + ``manifest.json``).
        backend: the backend's registry name (:data:`generation.backends.BACKENDS`; default
            ``"template"``, the CPU simulator).
        backend_options: keyword arguments for the backend's constructor
            (:func:`generation.backends.get_backend`); all but :data:`NON_IDENTITY_OPTIONS` belong
            to the run's identity.
        tasks: the tasks to generate; ``None`` (default) generates every task of the source.
        per_task: keep at most this many scenarios per task (the first by STAR dialogue id); ``None``
            keeps all.
        happy_only: keep only STAR's "happy" scenarios (default ``False``: all).
        seed: the base seed every dialogue and variant draw derives from (:mod:`generation.seeds`).
        prefix_mode: how forks get their prefix: ``"replay"`` (default), ``"reuse"`` or ``"reword"``
            (one of ``PREFIX_MODES``; SPEC section 3).
        reword_rate: ``reword`` mode only: probability in [0, 1] that a prefix turn is reworded;
            ``None`` uses :data:`DEFAULT_REWORD_RATE`.
        budget: the length budget in turns (both speakers) for every task; ``None`` uses each task's
            STAR maximum.
        cut_after: turns after the budget at which a dialogue is cut (default 5, SPEC section 3).
        variants_path: a variant file (every type) to use instead of the default pool, each
            registered type's variants (``generation/types/<code>.yaml`` for the built-in ones;
            ``None``, the default).
        variant_draw: ``"quartet"`` (default: one draw per source and type) or ``"fork"`` (one
            draw per fork).
        min_system_turns: drop a D+ with fewer system turns (``too_short``); at least, and by
            default, ``MIN_SYSTEM_TURNS`` (4).
        multitask: also role-play STAR's multi-task scenarios, once per task (default ``False``).
        compound: a compound-fork plan of ``(type, k)`` pairs, e.g. ``(("SSPC", 1), ("GR", 3))``;
            ``None`` (default) makes the 16 single forks per source.
        kb_tools: offer the LLM system agent its task's knowledge-base tool (tool-calling backends
            only; default ``False``).
        check_conformance: the name of the check run on each D+ (:mod:`generation.conformance`),
            e.g. ``"workflow-nodes"``; ``None`` (default): unchecked.
        workers: worker processes for the template backend (default 1: in process; > 1 needs the
            ``fork`` start method and is refused for LLM backends). Does not change the corpus.
        batch_size: scenarios advanced in lockstep per backend batch (default 64). Does not change
            the corpus.
        keep_shards: keep ``shards/`` after the merge (default ``False``). Does not change the
            corpus.
    """

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
    kb_tools: bool = False
    """Offer the LLM system agent its task's knowledge-base tool (:mod:`generation.kb_tools`), so that
    its query steps return rows of the source's KB instead of invented ones (LLM backends that call
    tools only: ``openai``). Recorded in the manifest's ``config`` when on."""
    check_conformance: str | None = None
    """The check run on each D+ (:mod:`generation.conformance`; ``"workflow-nodes"``), whose result every
    record of the scenario carries as ``conformance``; None (default): unchecked. Recorded in the
    manifest's ``config`` when on (``python -m generation`` turns it on for LLM backends)."""
    # execution knobs (do not change the corpus)
    workers: int = 1
    batch_size: int = 64
    """Scenarios advanced in lockstep per backend batch (an LLM batch holds up to 16x this)."""
    keep_shards: bool = False
    """Keep ``shards/`` after the merge (default: removed once ``manifest.json`` is written)."""

    def check(self) -> list[str]:
        """Every problem of the settings (nothing is raised, nothing touches the disk).

        Returns:
            One message per problem (an unknown prefix mode or variant draw, an out-of-range
                ``budget``/``cut_after``/``per_task``/``min_system_turns``/``workers``/``batch_size``,
                a non-integer seed, a ``reword_rate`` outside [0, 1] or without ``reword`` mode, an
                invalid compound plan, non-boolean ``multitask``/``kb_tools``, a string or empty
                ``tasks``); empty when the configuration is valid.

        Raises:
            ValueError: Never escapes: raised inside for a ``compound`` given as a string, and caught
                (with the ``ValueError`` / ``TypeError`` of a plan :func:`parse_compound_plan`
                refuses) to be returned as a message.
        """
        errs: list[str] = []
        if self.prefix_mode not in PREFIX_MODES:
            errs.append(f"prefix mode {self.prefix_mode!r} is unknown: use one of {', '.join(PREFIX_MODES)}")
        if self.budget is not None and (not is_int(self.budget) or self.budget < 1):
            errs.append(f"budget must be an integer >= 1 turn, got {self.budget!r}")
        if not is_int(self.cut_after) or self.cut_after < 0:
            errs.append(f"cut_after must be an integer >= 0, got {self.cut_after!r}")
        if self.per_task is not None and (not is_int(self.per_task) or self.per_task < 1):
            errs.append(f"per_task must be an integer >= 1, got {self.per_task!r}")
        if not is_int(self.seed):
            errs.append(f"seed must be an integer, got {self.seed!r}")
        if self.reword_rate is not None:
            r = self.reword_rate
            if self.prefix_mode != "reword":
                errs.append(
                    f"reword_rate={r!r} applies to prefix mode 'reword' only (prefix mode is "
                    f"{self.prefix_mode!r}); drop it or use prefix_mode='reword'"
                )
            elif isinstance(r, bool) or not isinstance(r, int | float) or not 0.0 <= r <= 1.0:
                errs.append(f"reword_rate must be a number in [0, 1], got {r!r}")
        if self.variant_draw not in VARIANT_DRAWS:
            errs.append(
                f"variant_draw {self.variant_draw!r} is unknown: use one of {', '.join(VARIANT_DRAWS)}"
            )
        if not is_int(self.min_system_turns) or self.min_system_turns < MIN_SYSTEM_TURNS:
            errs.append(
                f"min_system_turns must be an integer >= {MIN_SYSTEM_TURNS} (four distinct fork turns need "
                f"T >= {MIN_SYSTEM_TURNS}), got {self.min_system_turns!r}"
            )
        if self.compound is not None:
            try:
                if isinstance(self.compound, str):
                    raise ValueError(
                        f"compound must be a plan such as (('SSPC', 1), ('GR', 3)) (parse_compound_plan("
                        f"{self.compound!r})), not a string"
                    )
                parse_compound_plan(plan_text(self.compound))
            except (ValueError, TypeError) as e:
                errs.append(str(e))
        if not isinstance(self.multitask, bool):
            errs.append(f"multitask must be true or false, got {self.multitask!r}")
        if not is_int(self.workers) or self.workers < 1:
            errs.append(f"workers must be an integer >= 1, got {self.workers!r}")
        if not is_int(self.batch_size) or self.batch_size < 1:
            errs.append(f"batch_size must be an integer >= 1, got {self.batch_size!r}")
        if self.check_conformance is not None and not (
            isinstance(self.check_conformance, str) and self.check_conformance.strip()
        ):
            errs.append(
                f"check_conformance must be a check's name (e.g. 'workflow-nodes') or None, got "
                f"{self.check_conformance!r}"
            )
        if not isinstance(self.kb_tools, bool):
            errs.append(f"kb_tools must be true or false, got {self.kb_tools!r}")
        if isinstance(self.tasks, str):
            errs.append(
                f"tasks must be a sequence of task names, got the string {self.tasks!r} "
                f"(write tasks=({self.tasks!r},))"
            )
        elif self.tasks is not None and len(self.tasks) == 0:
            errs.append("tasks: an empty task list selects nothing (omit it to generate every task)")
        return errs

    def identity(self) -> dict[str, Any]:
        """The settings that determine the records (compared on resume / when refusing to mix).

        Returns:
            A JSON-serialisable dict (recorded as the manifest's ``config``): the source as given
                (``star``: :func:`~dialfork_dataset.sources.source_record`, no absolute path unless one
                was given; a resume compares it resolved),
                the backend, its options without :data:`NON_IDENTITY_OPTIONS` (sorted), the sorted tasks,
                the selection, seed, prefix, budget, variant-draw and filter settings (``reword_rate`` as
                :attr:`effective_reword_rate`, ``compound`` as plan text), ``kb_tools`` and
                ``check_conformance`` only when on. Execution knobs (``workers``, ``batch_size``, ``keep_shards``) and ``out``
                are left out, and so is ``variants_path`` (the run file and the manifest record the
                pool's ``variants_version``).
        """
        return {
            "star": source_record(self.star),
            "backend": self.backend,
            "backend_options": {
                k: v for k, v in sorted(self.backend_options.items()) if k not in NON_IDENTITY_OPTIONS
            },
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
            # only when on: the identity (and manifest) of every corpus made without tools is unchanged
            **({"kb_tools": True} if self.kb_tools else {}),
            **({"check_conformance": self.check_conformance} if self.check_conformance else {}),
        }

    @property
    def effective_reword_rate(self) -> float | None:
        """The rewording rate in force: ``None`` unless the prefix mode is ``reword``."""
        if self.prefix_mode != "reword":
            return None
        return float(DEFAULT_REWORD_RATE if self.reword_rate is None else self.reword_rate)


def is_int(v: Any) -> bool:
    """An ``int`` that is not a ``bool``.

    Args:
        v: any value.

    Returns:
        ``True`` when ``v`` is an ``int`` (or subclass) other than ``True``/``False``.
    """
    return isinstance(v, int) and not isinstance(v, bool)


def replace_config(config: GenerationConfig, **changes: Any) -> GenerationConfig:
    """A copy of ``config`` with ``changes`` applied (``dataclasses.replace``).

    Args:
        config: the configuration to copy (left unchanged).
        **changes: field names of :class:`GenerationConfig` and their new values.

    Returns:
        A new :class:`GenerationConfig` (not checked: call :meth:`GenerationConfig.check`).
    """
    return dataclasses.replace(config, **changes)


__all__ = ["DEFAULT_REWORD_RATE", "NON_IDENTITY_OPTIONS", "GenerationConfig", "is_int", "replace_config"]
