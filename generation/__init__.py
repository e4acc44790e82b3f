"""generation: the DialFork corpus generator (SPEC sections 1-4).

``generate_corpus(GenerationConfig(...))`` role-plays STAR scenarios with a backend (the CPU
``template`` simulator, or an LLM backend) and writes record files plus ``manifest.json``;
``python -m generation --help`` is its command line.
"""

# dialfork_dataset first: importing it loads $DIALFORK_PLUGINS, and a plugin that registers a backend
# imports generation.backends, which must not be half-initialised then (python -m generation)
import dialfork_dataset  # noqa: F401, I001

from .backends import BACKENDS, get_backend
from .engine import (
    Dialogue,
    ForkSpec,
    GenerationConfig,
    Manifest,
    code_version,
    generate_corpus,
    generate_units,
    merge_shards,
    plan_units,
    run_dialogues,
)
from .errors import GenerationError, UnknownBackendError
from .seeds import dialogue_seed, fork_seed, stable_seed
from .variants import Variant, VariantPool, draw_substitute_task, draw_variant, load_variants

__all__ = [
    "BACKENDS",
    "Dialogue",
    "ForkSpec",
    "GenerationConfig",
    "GenerationError",
    "Manifest",
    "UnknownBackendError",
    "Variant",
    "VariantPool",
    "code_version",
    "dialogue_seed",
    "draw_substitute_task",
    "draw_variant",
    "fork_seed",
    "generate_corpus",
    "generate_units",
    "get_backend",
    "load_variants",
    "merge_shards",
    "plan_units",
    "run_dialogues",
    "stable_seed",
]
