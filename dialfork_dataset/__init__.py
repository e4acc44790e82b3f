"""dialfork_dataset: records, STAR reading, fork arithmetic, corpus builder, Hub layout, loading.

Heavy dependencies (``datasets``, ``huggingface_hub``) are imported where used.
"""

import os as _os

from . import taxonomy
from .builder import CONFIGS, SPLITS, build_dataset, load_records, split_sources
from .forks import (
    admits_forks,
    fork_turns,
    position_to_system_turn,
    prefix_before_system_turn,
    system_turn_positions,
    system_turn_to_position,
)
from .hub import export_hub_layout, load_blind, load_blind_pairs, load_gold, load_split, push_to_hub
from .jsonl import JsonlAppender, JsonlError, read_jsonl, repair_torn_tail, validate_jsonl_file, write_jsonl
from .lazy import lazy_exports
from .records import (
    RECORD_FIELDS,
    DialogueRecord,
    RecordError,
    Turn,
    normalize_record,
    record_errors,
    record_features,
    validate_record,
    validate_records,
)
from .taxonomy import HallucinationType, forks_per_source
from .turns import as_turns, transcript, turn_texts
from .views import task1_sets, task2_quartets, task3_examples

__version__ = "0.1.0"

# STAR is exported lazily: `python -m dialfork_dataset.star` must find the module not yet imported
# by its package (runpy warns otherwise)
_STAR_EXPORTS = {
    n: "star" for n in ("Scenario", "StarCorpus", "StarError", "StarTask", "download_star", "resolve_star")
}
_lazy_getattr, __dir__ = lazy_exports(__name__, _STAR_EXPORTS, globals())


def __getattr__(name: str):
    """STAR's names on first use; ``HALLUCINATION_TYPES``: the registered types when read."""
    if name == "HALLUCINATION_TYPES":
        return taxonomy.names()
    return _lazy_getattr(name)


__all__ = [
    "CONFIGS",
    "SPLITS",
    "Scenario",
    "StarCorpus",
    "StarError",
    "StarTask",
    "download_star",
    "resolve_star",
    "as_turns",
    "build_dataset",
    "export_hub_layout",
    "load_blind",
    "load_blind_pairs",
    "load_gold",
    "load_records",
    "load_split",
    "push_to_hub",
    "split_sources",
    "task1_sets",
    "task2_quartets",
    "task3_examples",
    "transcript",
    "turn_texts",
    "HALLUCINATION_TYPES",
    "HallucinationType",
    "forks_per_source",
    "taxonomy",
    "RECORD_FIELDS",
    "DialogueRecord",
    "JsonlAppender",
    "JsonlError",
    "RecordError",
    "Turn",
    "__version__",
    "admits_forks",
    "fork_turns",
    "normalize_record",
    "position_to_system_turn",
    "prefix_before_system_turn",
    "read_jsonl",
    "record_errors",
    "record_features",
    "repair_torn_tail",
    "system_turn_positions",
    "system_turn_to_position",
    "validate_jsonl_file",
    "validate_record",
    "validate_records",
    "write_jsonl",
]

# Extensions named in $DIALFORK_PLUGINS register themselves in every process, once (dialfork_dataset.plugins);
# last, so that a plugin importing this package finds it whole. Unset: nothing is imported.
if _os.environ.get("DIALFORK_PLUGINS"):
    from .plugins import load_plugins

    load_plugins()
