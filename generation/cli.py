"""``python -m generation``: generate (or resume) a DialFork corpus."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from dialfork_dataset.console import add_verbosity_options, console, prog_name, state_defaults

from .backends import BACKENDS, UnknownBackendError
from .engine import GenerationConfig, GenerationError, generate_corpus

EPILOG = """\
examples:
  python -m generation --backend template --star ../shared/star --out corpus
  DIALFORK_STAR_DIR=../shared/star python -m generation --out corpus
  python -m generation --backend template --star STAR --out demo --tasks weather,bank_balance --per-task 5
  python -m generation --backend template --star STAR --out full --workers 2

Rerunning the same command resumes an interrupted run (finished scenarios are skipped) and the
final record files are byte-identical to an uninterrupted run. An output folder that holds
records of another configuration is refused, naming the setting that differs.
"""


def _parse_option(text: str) -> tuple[str, object]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--backend-option expects KEY=VALUE, got {text!r}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog_name("generation"),
        description="Generate DialFork dialogues: conformant role-plays of STAR scenarios and their 16 "
                    "controlled forks (4 hallucination types x 4 fork turns).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="template", choices=sorted(BACKENDS),
                   help="generator backend (default: template, the CPU simulator built from STAR)")
    p.add_argument("--backend-option", action="append", default=[], type=_parse_option, metavar="KEY=VALUE",
                   help="backend constructor option (repeatable; VALUE parsed as JSON when possible), "
                        "e.g. model=google/gemma-3-1b-it (default: none)")
    p.add_argument("--model", default=None, metavar="ID_or_PATH",
                   help="chat model for the transformers/openai backends (same as --backend-option model=...; "
                        "default: the backend's own default)")
    p.add_argument("--star", default=None,
                   help="STAR folder (tasks/, apis/, scenarios.jsonl) (default: $DIALFORK_STAR_DIR)")
    p.add_argument("--out", required=True, help="output folder (record files + manifest.json)")
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: all 24)")
    p.add_argument("--per-task", type=int, default=None, metavar="N",
                   help="at most N scenarios per task, the first by STAR dialogue id (default: all)")
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument("--prefix", default="replay", choices=["replay", "reuse"],
                   help="fork prefix mode: replay regenerates the turns before t_k with the same seed "
                        "(default), reuse copies them from D+")
    p.add_argument("--happy-only", action="store_true", help="only STAR's happy scenarios")
    p.add_argument("--budget", type=int, default=None,
                   help="length budget in turns for every task (default: each task's STAR maximum)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (template backend; default 1)")
    p.add_argument("--batch-size", type=int, default=64,
                   help="scenarios advanced in lockstep per backend batch (default 64)")
    p.add_argument("--keep-shards", action="store_true", help="keep the shards/ work folder after merging")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_verbosity_options(p, default="INFO")
    return state_defaults(p)


def star_folder(args: argparse.Namespace) -> str:
    """``--star``, else ``$DIALFORK_STAR_DIR``; raises ``GenerationError`` when neither is set."""
    from dialfork_dataset.star import STAR_ENV

    star = args.star or os.environ.get(STAR_ENV)
    if not star:
        raise GenerationError(f"no STAR folder: pass --star PATH or set {STAR_ENV}=/path/to/star")
    return star


def backend_options(args: argparse.Namespace) -> dict:
    """``--backend-option`` pairs plus ``--model`` (which wins over ``model=`` when both are given)."""
    opts = dict(args.backend_option)
    if args.model is not None:
        opts["model"] = args.model
    return opts


def main(argv: list[str] | None = None) -> int:
    from .distributed import launched_distributed

    if launched_distributed():  # `accelerate launch -m generation ...`: shard across the processes
        from .distributed import main as distributed_main

        return distributed_main(argv)
    args = build_parser().parse_args(argv)
    tasks = tuple(t.strip() for t in args.tasks.split(",") if t.strip()) if args.tasks is not None else None
    with console(args.verbose, args.quiet, fmt="%(asctime)s %(levelname)s %(name)s: %(message)s"):
        try:
            config = GenerationConfig(
                star=star_folder(args), out=args.out, backend=args.backend, backend_options=backend_options(args),
                tasks=tasks, per_task=args.per_task, happy_only=args.happy_only, seed=args.seed,
                prefix_mode=args.prefix, budget=args.budget, workers=args.workers, batch_size=args.batch_size,
                keep_shards=args.keep_shards)
            manifest = generate_corpus(config, progress=not (args.no_progress or args.quiet))
        except (GenerationError, UnknownBackendError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    t = manifest.counts["total"]
    print(f"{t['records']} records ({t['conformant']} conformant, {t['forks']} forks; "
          f"{t['dropped']} scenario(s) dropped) -> {Path(args.out)} (manifest.json)")
    return 0
