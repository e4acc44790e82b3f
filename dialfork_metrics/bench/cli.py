"""The benchmark's command line (``python -m dialfork_metrics.bench``, ``dialfork-bench``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .. import registry
from ..methods import (
    TASK1_COMPARED,
    TASK1_METHODS,
    TASK2_METHODS,
    TASK3_DETECTORS,
)
from ..task3 import registry as detector_registry
from .common import DEFAULT_PRD, BenchError, _csv_list
from .protocols import DEFAULT_N_REFERENCES
from .runner import run_benchmark


def parse_pair_encoder(spec: str | None) -> str | dict[str, str] | None:
    """``--pair-encoder``: ``NAME`` (FBD and PRD) or ``fbd=NAME[,prd=NAME]``.

    Args:
        spec: The option's value; None or blank: not given.

    Returns:
        None when not given; the stripped name when ``spec`` has no ``=`` (one encoder for both);
        else a dict with keys among ``"fbd"`` and ``"prd"`` (lower-cased) mapping to encoder names.

    Raises:
        BenchError: A part names a metric other than ``fbd``/``prd`` or has an empty name.
    """
    if spec is None or not spec.strip():
        return None
    if "=" not in spec:
        return spec.strip()
    out: dict[str, str] = {}
    for part in _csv_list(spec):
        metric, _, name = part.partition("=")
        metric, name = metric.strip().lower(), name.strip()
        if metric not in registry.names("set", needs="pair_encoder") or not name:
            raise BenchError(f"--pair-encoder {spec!r}: expected NAME or fbd=NAME,prd=NAME")
        out[metric] = name
    return out


def _workflow_arg(a: argparse.Namespace) -> str | None:
    """The workflow source of the wf detector: ``--star`` when given (None: the corpus's own)."""
    star = getattr(a, "star", None)
    return str(star) if star else None


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's argument parser (``--data`` required unless ``--track star-human`` or
    ``--track sgd``; ``--help`` lists every option).

    Returns:
        The :class:`argparse.ArgumentParser`, with the verbosity options and each option's
        default stated in its help.
    """
    from dialfork_dataset.console import add_verbosity_options, prog_name, state_defaults

    p = argparse.ArgumentParser(
        prog=prog_name("dialfork_metrics.bench"),
        description="Reproduce the DialFork paper's evaluation (Tables 2, 3, 4, 7, 9) on a corpus.",
    )
    p.add_argument(
        "--data",
        default=None,
        help="generator output folder, exported Hub layout folder, or Hub dataset "
        "id (required unless --track star-human or --track sgd)",
    )
    p.add_argument(
        "--track",
        choices=["template", "star-human", "sgd"],
        default="template",
        help="template: the corpus given by --data; star-human: STAR's human dialogues and their edited "
        "forks, built from --star into OUT/star-human-data with --seed as its seed (reused when built with "
        "the same settings); sgd: SGD's dialogues that follow their service's workflow and their edited "
        "forks, built from --sgd into OUT/sgd-data the same way (the wf detector reads the workflows of "
        "examples/workflows/sgd, named in the track's manifest)",
    )
    p.add_argument(
        "--sgd",
        default=None,
        help="SGD folder of --track sgd (dialogues.jsonl.gz, schema.json; default: $DIALFORK_SGD_DIR, "
        "else ../shared/sgd)",
    )
    p.add_argument(
        "--max-per-task",
        type=int,
        default=None,
        metavar="N",
        help="--track sgd: keep a seeded sample of at most N conformant dialogues per task (default: all)",
    )
    p.add_argument(
        "--star",
        default=None,
        help="STAR folder: its human dialogues (--track star-human) and the workflows of the wf "
        "detector (default: the corpus's manifest, else $DIALFORK_STAR_DIR)",
    )
    p.add_argument(
        "--variant",
        choices=["picked", "typed"],
        default="picked",
        help="star-human system turn text: the picked suggestion or the wizard's typed draft",
    )
    p.add_argument("--tasks", default="1,2,3", help="comma-separated tasks among 1,2,3 (default: all)")
    p.add_argument(
        "--encoders",
        default="minilm",
        help="comma-separated encoder aliases/paths of Tasks 2 and 3 "
        "(the first one is also Task 1's unless --task1-encoder is given)",
    )
    p.add_argument(
        "--task1-encoder",
        default=None,
        metavar="NAME",
        help="encoder of FlowKL's graph in Task 1 (default: the first of --encoders; the paper: d2f)",
    )
    p.add_argument(
        "--pair-encoder",
        default=None,
        metavar="NAME|fbd=NAME,prd=NAME",
        help="encoder of the (system, user) pairs of FBD and PRD, one for both or one each "
        "(default: the Task 1 encoder's model)",
    )
    p.add_argument(
        "--task1-compare",
        default=",".join(TASK1_COMPARED),
        help="methods FlowKL is tested against in Task 1 (one Holm family; default: fbd,prd as the paper)",
    )
    p.add_argument(
        "--out", default="reports", help="output folder (Markdown, CSV, JSON, PNG; default: reports)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of PRD, bootstrap and the random baselines")
    p.add_argument("--task1-methods", default=",".join(TASK1_METHODS), help="comma-separated Task 1 methods")
    p.add_argument("--task2-methods", default=",".join(TASK2_METHODS), help="comma-separated Task 2 methods")
    p.add_argument(
        "--task3-detectors",
        default=",".join(TASK3_DETECTORS),
        help="comma-separated Task 3 detectors (default: the benchmark's, %(default)s; registered: "
        + ", ".join(detector_registry.names())
        + ")",
    )
    p.add_argument(
        "--task2-protocol",
        choices=["same-source", "cross", "both"],
        default="same-source",
        help="reference protocol of Tasks 2 and 1: the paper's same-source (each fork against its own "
        "source), cross (each fork against --n-references conformant dialogues of other scenarios of "
        "its task, no turn shared; Task 1: reference set from sources disjoint from the forks') or "
        "both, side by side in the report",
    )
    p.add_argument(
        "--n-references",
        type=int,
        default=DEFAULT_N_REFERENCES,
        help="conformant references per fork under the cross protocol (distances averaged; seeded)",
    )
    p.add_argument(
        "--metric",
        action="append",
        default=[],
        metavar="NAME=module:function|EVALUATE_PATH",
        help="add a user Task 2 distance as a row (repeatable)",
    )
    p.add_argument("--graph-task", default=None, help="task whose flow graph is drawn (default: the first)")
    p.add_argument("--device", default=None, help="torch device of the encoders (default: auto)")
    p.add_argument("--batch-size", type=int, default=64, help="encoder batch size")
    p.add_argument(
        "--runtime",
        choices=["torch", "onnx", "onnx-int8"],
        default="torch",
        help="encoder runtime (onnx: the transformer exported to ONNX, equal values; faster only on a loaded CPU)",
    )
    p.add_argument("--bootstrap-resamples", type=int, default=10_000, help="paired bootstrap resamples")
    p.add_argument(
        "--cache-dir", default=None, help="persistent embedding cache folder (default: memory only)"
    )
    p.add_argument(
        "--prd-runs", type=int, default=DEFAULT_PRD["num_runs"], help="PRD: clusterings averaged (default 10)"
    )
    p.add_argument(
        "--prd-n-init",
        type=int,
        default=DEFAULT_PRD["n_init"],
        help="PRD: k-means initialisations per clustering (default 1; Sajjadi et al.: 10)",
    )
    p.add_argument(
        "--prd-kmeans",
        choices=["minibatch", "full"],
        default=DEFAULT_PRD["kmeans"],
        help="PRD: scikit-learn KMeans (default) or MiniBatchKMeans (Sajjadi et al.'s reference code)",
    )
    g3 = p.add_argument_group("Task 3 streaming detectors")
    g3.add_argument(
        "--task3-preset",
        choices=["selected", "paper"],
        default="selected",
        help="settings of the streaming detectors: the packaged per-encoder selection (default) or the "
        "paper's literal protocol (in-sample calibration, no back-off, threshold 0.55, N=6, per task)",
    )
    g3.add_argument(
        "--order",
        type=int,
        default=None,
        help="N of the N-gram LM for the main Task 3 rows (overrides "
        "the preset; the paper: 6 in Table 4; Table 9 always runs at 3)",
    )
    g3.add_argument(
        "--task3-scope",
        choices=["task", "pooled"],
        default=None,
        help="fit one streaming model per task or one over all tasks (overrides the preset)",
    )
    g3.add_argument(
        "--task3-select",
        action="store_true",
        help="choose the streaming settings by cross-validation over the train sources of --data",
    )
    g3.add_argument(
        "--false-alarm-rate",
        type=float,
        default=0.05,
        help="operating point of the streaming detectors: target conformant false-alarm rate (default 0.05)",
    )
    g3.add_argument(
        "--no-task3-ablations", action="store_true", help="skip the N-order and scope ablation tables"
    )
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    add_verbosity_options(p, default="INFO")
    return state_defaults(p)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark from the command line and print where the report went and the report.

    Args:
        argv: The arguments without the program name; None: ``sys.argv[1:]``.

    Returns:
        The exit status: 0 on success (also on a non-main process under ``accelerate launch``),
        2 on bad input (a one-line ``error: ...`` on stderr: a bad ``--order``,
        ``--false-alarm-rate``, ``--tasks`` or ``--max-per-task``, options that do not go with
        ``--track``, or a :class:`BenchError`, ``ValueError``, ``FileNotFoundError`` or
        ``FileExistsError`` (a track folder in the way) from the run).

    Raises:
        SystemExit: From argparse on unknown or malformed options (status 2) and ``--help`` (0).
    """
    from dialfork_dataset.console import console

    a = build_parser().parse_args(argv)
    with console(a.verbose, a.quiet):
        return _main(a)


def _main(a: argparse.Namespace) -> int:
    if a.order is not None and a.order < 1:
        print(f"error: --order N must be an integer >= 1, got {a.order}", file=sys.stderr)
        return 2
    if a.n_references < 1:
        print(f"error: --n-references must be an integer >= 1, got {a.n_references}", file=sys.stderr)
        return 2
    if not 0 < a.false_alarm_rate < 1:
        print(f"error: --false-alarm-rate must be in (0, 1), got {a.false_alarm_rate}", file=sys.stderr)
        return 2
    try:
        tasks = [int(t) for t in _csv_list(a.tasks)]
    except ValueError:
        print(
            f"error: --tasks must be comma-separated integers among 1,2,3, got {a.tasks!r}", file=sys.stderr
        )
        return 2
    if a.track == "template" and a.data is None:
        print(
            "error: --data is required (a corpus folder or Hub id), unless --track star-human --star PATH "
            "or --track sgd is given",
            file=sys.stderr,
        )
        return 2
    if a.track == "sgd" and (a.data is not None or a.star is not None):
        print(
            "error: --track sgd builds its data from --sgd PATH (default: $DIALFORK_SGD_DIR, else "
            "../shared/sgd) and reads the workflows of examples/workflows/sgd; give neither --data nor --star",
            file=sys.stderr,
        )
        return 2
    if a.max_per_task is not None and (a.track != "sgd" or a.max_per_task < 1):
        print(f"error: --max-per-task N needs --track sgd and N >= 1, got {a.max_per_task}", file=sys.stderr)
        return 2
    if a.track == "star-human" and (a.star is None or a.data is not None):
        print(
            "error: --track star-human builds its data from --star PATH (give --star, not --data)",
            file=sys.stderr,
        )
        return 2
    try:
        from dialfork_dataset.hub import resolve_data

        if a.track == "star-human":  # the track's folder, built once per settings (reused when present)
            from dialfork_dataset.tracks.star_human import ensure_star_human_track

            a.data = str(
                ensure_star_human_track(
                    a.star, Path(a.out) / "star-human-data", variant=a.variant, seed=a.seed
                )
            )
        elif a.track == "sgd":  # the same for SGD; its manifest names the workflows (workflow_for_data)
            from dialfork_dataset.tracks.sgd import ensure_sgd_track

            a.data = str(
                ensure_sgd_track(
                    a.sgd, Path(a.out) / "sgd-data", seed=a.seed, max_dialogues_per_task=a.max_per_task
                )
            )
        resolve_data(a.data, option="--data")  # a mistyped folder: one line now, not a Hub error later
        pair = parse_pair_encoder(a.pair_encoder)
        from .sharded import sharded_bench_encoding

        if not sharded_bench_encoding(a, pair):  # under `accelerate launch`: the corpus is encoded across
            return 0  # the processes first; the main one then runs the benchmark
        rep = run_benchmark(
            a.data,
            tasks,
            _csv_list(a.encoders),
            a.out,
            seed=a.seed,
            task1_methods=_csv_list(a.task1_methods),
            task2_methods=_csv_list(a.task2_methods),
            task3_detectors=_csv_list(a.task3_detectors),
            custom_metrics=a.metric,
            graph_task=a.graph_task,
            device=a.device,
            batch_size=a.batch_size,
            n_resamples=a.bootstrap_resamples,
            plots=not a.no_plots,
            progress=not a.quiet,
            cache_dir=a.cache_dir,
            runtime=a.runtime,
            prd_kwargs={"num_runs": a.prd_runs, "n_init": a.prd_n_init, "kmeans": a.prd_kmeans},
            task1_encoder=a.task1_encoder,
            pair_encoder=pair,
            task1_compare=_csv_list(a.task1_compare),
            task2_protocol=a.task2_protocol,
            n_references=a.n_references,
            task3_kwargs={
                "preset": a.task3_preset,
                "order": a.order,
                "scope": a.task3_scope,
                "select": a.task3_select,
                "false_alarm_rate": a.false_alarm_rate,
                "ablations": not a.no_task3_ablations,
                "workflow": _workflow_arg(a),
            },
        )
    except (BenchError, ValueError, FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    t = rep["timings"]
    print(
        f"wrote {a.out}/ (total {t['total']:.1f} s, encoding {100 * t['encoding_share']:.1f}%, "
        f"{rep['meta']['n_skipped_units']} skipped unit(s))"
    )
    print((Path(a.out) / "report.md").read_text(encoding="utf-8"))
    return 0
