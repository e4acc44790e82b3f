"""``python -m generation``: generate (or resume) a DialFork corpus.

The options live in :mod:`generation.options` (shared with :mod:`generation.distributed`); under
``accelerate launch`` with several processes the run is handed to :func:`generation.distributed.main`.
"""

from __future__ import annotations

import sys
from pathlib import Path

from dialfork_dataset.console import console
from dialfork_dataset.errors import SourceError

from . import distributed
from .engine import generate_corpus
from .errors import GenerationError, UnknownBackendError
from .options import (
    EPILOG,
    backend_options,
    build_config,
    build_parser,
    config_options,
    hidden_split_selection,
    source_spec,
    star_folder,
    task_names,
)


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 with a one-line message for bad input).

    Under ``accelerate launch`` with several processes the run is handed to
    :func:`generation.distributed.main`.

    Args:
        argv: the arguments without the program name; ``None`` (default) reads ``sys.argv``.

    Returns:
        0 on success (the record counts are printed), 2 for bad input or a failed generation (the
            error is printed to stderr in one line).
    """
    if (
        distributed.launched_distributed()
    ):  # `accelerate launch -m generation ...`: shard across the processes
        return distributed.main(argv)
    args = build_parser().parse_args(argv)
    tasks = task_names(args)
    with console(args.verbose, args.quiet, fmt="%(asctime)s %(levelname)s %(name)s: %(message)s"):
        try:
            args.star = source_spec(
                args
            )  # --source star:PATH | workflow:PATH, --star PATH, $DIALFORK_STAR_DIR
            seed, scenarios, corpus = hidden_split_selection(args, tasks)
        except (GenerationError, ValueError, FileNotFoundError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        config = build_config(args, tasks, seed, workers=args.workers)
        try:
            manifest = generate_corpus(
                config, progress=not (args.no_progress or args.quiet), scenarios=scenarios, corpus=corpus
            )
        except (GenerationError, UnknownBackendError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except SourceError as e:  # a workflow source's problem found while generating: one line each
            print(f"error: {e}", file=sys.stderr)
            return 2
    t = manifest.counts["total"]
    print(
        f"{t['records']} records ({t['conformant']} conformant, {t['forks']} forks; "
        f"{t['dropped']} scenario(s) dropped) -> {Path(args.out)} (manifest.json)"
    )
    return 0


__all__ = [
    "EPILOG",
    "backend_options",
    "build_config",
    "build_parser",
    "config_options",
    "hidden_split_selection",
    "main",
    "source_spec",
    "star_folder",
    "task_names",
]
