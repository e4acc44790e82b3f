"""The backend-agnostic generation engine (SPEC sections 1-4; issue 3).

From a workflow source's scenarios it role-plays conformant dialogues D+ with any
:class:`~generation.backends.base.Backend`, then, for every kept D+ (T >= 4), its
:data:`~dialfork_dataset.taxonomy.FORKS_PER_SOURCE` forks D^h_k (one per hallucination type and fork
position). Dialogues advance in lockstep: each step sends one batch of :class:`TurnRequest` (one per
active dialogue) to the backend.

Output folder layout::

    out/<task>.jsonl          the records of one task, in canonical order (written at the end)
    out/manifest.json         configuration, code version, counts kept/dropped per task, timings
    out/shards/run.json       while running: the configuration and the unit plan
    out/shards/shard-IIIII-of-NNNNN.jsonl.part
                              while running: each shard's records, appended one scenario at a time
                              (its records and then a ``{"_unit": ...}`` marker line, in one write)

A scenario (its D+ and its forks) is the unit of work and of resume: a unit counts as done when
its marker line is on disk; records of an unfinished unit after the last marker are dropped on
resume (a torn last line too). :func:`merge_shards` then copies the units, in plan order, into the
per-task files, so the final corpus is byte-identical whether or not the run was interrupted, and
whatever the number of worker processes or shards. ``manifest.json`` is written last; its presence
means the corpus is complete.

Modules: :mod:`.config` (what determines a corpus), :mod:`.version` (``code_version``),
:mod:`.dialogue` (one dialogue and the lockstep loop), :mod:`.units` (a scenario's D+ and forks,
planning), :mod:`.shards` (shard files), :mod:`.output` (output folder checks, run file),
:mod:`.merge` (merge and manifest), :mod:`.run` (:func:`generate_corpus`). Everything is re-exported
here, so ``from generation.engine import X`` keeps working.
"""

from __future__ import annotations

from dialfork_dataset import taxonomy as _taxonomy
from dialfork_dataset.records import PREFIX_MODES

from ..backends.base import Backend, TurnRequest
from ..errors import GenerationError
from .config import DEFAULT_REWORD_RATE, NON_IDENTITY_OPTIONS, GenerationConfig, is_int, replace_config
from .dialogue import (
    Dialogue,
    ForkSpec,
    init_messages,
    injection_message,
    prefix_positions,
    run_dialogues,
    service_name,
)
from .merge import MANIFEST_FORMAT, Manifest, merge_shards
from .output import check_output_dir, write_run_file
from .run import generate_corpus, load_corpus, prepare
from .shards import (
    RUN_FILE,
    SHARDS_DIR,
    UNIT_MARKER,
    ShardWriter,
    line_hash,
    read_shard,
    shard_path,
    verify_shard_block,
)
from .units import (
    RunContext,
    Unit,
    UnitResult,
    compound_forks,
    conformant_dialogue,
    generate_units,
    make_context,
    plan_units,
    prefix_rewording,
    single_forks,
)
from .version import code_version

__all__ = [
    "DEFAULT_REWORD_RATE",
    "MANIFEST_FORMAT",
    "NON_IDENTITY_OPTIONS",
    "PREFIX_MODES",
    "RUN_FILE",
    "SHARDS_DIR",
    "UNIT_MARKER",
    "Backend",
    "Dialogue",
    "ForkSpec",
    "GenerationConfig",
    "GenerationError",
    "Manifest",
    "RunContext",
    "ShardWriter",
    "TurnRequest",
    "Unit",
    "UnitResult",
    "check_output_dir",
    "code_version",
    "compound_forks",
    "conformant_dialogue",
    "generate_corpus",
    "generate_units",
    "init_messages",
    "injection_message",
    "is_int",
    "line_hash",
    "load_corpus",
    "make_context",
    "merge_shards",
    "plan_units",
    "prefix_positions",
    "prefix_rewording",
    "prepare",
    "read_shard",
    "replace_config",
    "run_dialogues",
    "service_name",
    "shard_path",
    "single_forks",
    "verify_shard_block",
    "write_run_file",
]


def __getattr__(name: str):
    """The taxonomy's constant names (``FORKS_PER_SOURCE``, ``HALLUCINATION_TYPES``, ``TYPE_NAMES``),
    read from the type registry when accessed (:mod:`dialfork_dataset.taxonomy`)."""
    if name in ("FORKS_PER_SOURCE", "HALLUCINATION_TYPES", "TYPE_NAMES"):
        return getattr(_taxonomy, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
