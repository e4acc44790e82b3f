"""``python -m dialfork_dataset``: STAR summary, record validation, hidden-split key, layout load check, push,
and the real-text tracks of Task 3: ``star-human`` (STAR's human dialogues, forked by editing them) and
``sgd-track`` (SGD's crowd-written dialogues, forked the same way).

The audited export of a release (``export``) is ``python -m leaderboard export``: it runs the
leaderboard's audit, which this package does not import.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys


def _cmd_star(a: argparse.Namespace) -> int:
    from .star import StarCorpus, resolve_star

    corpus = StarCorpus(resolve_star(a.star))
    s = corpus.summary()
    if a.json:
        print(json.dumps(s, indent=2, default=str))
        return 0
    print(f"STAR at {corpus.path}")
    for k, v in s.items():
        if isinstance(v, dict):
            print(f"{k}:")
            for kk, vv in v.items():
                print(f"  {kk}: {vv}")
        else:
            print(f"{k}: {v}")
    return 0


def _cmd_validate(a: argparse.Namespace) -> int:
    from .builder import load_records

    recs = load_records(a.src)
    n_conf = sum(r["hallucination_type"] is None for r in recs)
    print(f"{a.src}: {len(recs)} valid records ({n_conf} conformant, {len(recs) - n_conf} forks)")
    return 0


def _cmd_keygen(a: argparse.Namespace) -> int:
    from .hidden import HiddenKey, write_key_file

    path = write_key_file(a.out, HiddenKey.generate(a.hidden_fraction))
    print(
        f"wrote {path} (mode 0600): a {8 * 32}-bit HMAC key and a 128-bit hidden seed. Keep it with the gold; "
        "never publish or commit it."
    )
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    from .hub import LAYOUT_CONFIGS, load_layout, resolve_data

    src = resolve_data(a.dest, accept=("layout", "hub"))
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in LAYOUT_CONFIGS]
    if unknown or not configs:
        raise ValueError(
            f"--configs {a.configs!r}: unknown config(s) {', '.join(unknown) or '(none given)'}; "
            f"a layout has {', '.join(LAYOUT_CONFIGS)}"
        )
    for cfg in configs:
        dd = load_layout(src.path if src.path is not None else src.value, cfg)
        print(
            f"load_dataset({str(a.dest)!r}, {cfg!r}): "
            + ", ".join(f"{s}={len(ds):,}" for s, ds in dd.items())
        )
    return 0


def _cmd_push(a: argparse.Namespace) -> int:
    from .hub import push_to_hub, resolve_data

    resolve_data(a.dest, accept=("layout",))
    push_to_hub(a.dest, a.repo_id, private=a.private, endpoint=a.endpoint)
    print(f"pushed {a.dest} to datasets/{a.repo_id}")
    return 0


def _cmd_star_human(a: argparse.Namespace) -> int:
    from .tracks.star_human import build_star_human_track, write_star_human_track

    track = build_star_human_track(
        a.star, tasks=a.tasks, variant=a.variant, seed=a.seed, fit_fraction=a.fit_fraction
    )
    out = write_star_human_track(track, a.out, star=a.star, overwrite=a.overwrite)
    s = track.stats
    n_conf = sum(s["conformant"].values())
    print(
        f"wrote {out}: star-human track ({a.variant} text), {n_conf} conformant dialogues of {len(s['tasks'])} "
        f"task(s) and {sum(s['forks'].values())} forks ("
        + ", ".join(f"{h} {n}" for h, n in s["forks"].items())
        + f"); {s['typed_fallbacks']} typed fallback(s); stats in {out / 'manifest.json'}"
    )
    return 0


def _cmd_sgd_track(a: argparse.Namespace) -> int:
    from .tracks.sgd import build_sgd_track, resolve_sgd, write_sgd_track

    sgd = a.sgd if a.sgd is not None else str(resolve_sgd(None))
    track = build_sgd_track(
        sgd,
        tasks=a.tasks,
        seed=a.seed,
        fit_fraction=a.fit_fraction,
        max_dialogues_per_task=a.max_per_task,
        workflows=a.workflows,
    )
    out = write_sgd_track(track, a.out, sgd=sgd, workflows=a.workflows, overwrite=a.overwrite)
    s = track.stats
    n_conf = sum(s["conformant"].values())
    excluded = ", ".join(f"{r} {n}" for r, n in s["excluded"].items()) or "none"
    cap = f", capped at {a.max_per_task} per task" if a.max_per_task else ""
    print(
        f"wrote {out}: sgd track, {n_conf} conformant dialogues of {len(s['tasks'])} task(s){cap} (of "
        f"{s['dialogues_of_the_services']} SGD dialogues of their services; excluded: {excluded}) and "
        f"{sum(s['forks'].values())} forks ("
        + ", ".join(f"{h} {n}" for h, n in s["forks"].items())
        + f"); stats in {out / 'manifest.json'}"
    )
    empty = [t for t, n in s["conformant"].items() if not n]
    if empty:
        print(f"no conformant dialogue for {', '.join(empty)} (excluded_per_task in the manifest says why)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .console import add_verbosity_options, plain_text, prog_name, state_defaults

    p = argparse.ArgumentParser(prog=prog_name("dialfork_dataset"), description=plain_text(__doc__))
    add_verbosity_options(p, default="WARNING")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("star", help="read STAR and print what it holds (tasks, domains, scenarios, budgets)")
    s.add_argument("--star", default=None, help="STAR folder (default: $DIALFORK_STAR_DIR)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(func=_cmd_star)
    s = sub.add_parser("validate", help="validate a record file or folder; reports every bad line")
    s.add_argument("src")
    s.set_defaults(func=_cmd_validate)
    s = sub.add_parser(
        "keygen", help="draw the hidden split's secrets (HMAC key + 128-bit hidden seed) into a file"
    )
    s.add_argument("out", help="key file to write (refuses to replace one)")
    s.add_argument(
        "--hidden-fraction",
        type=float,
        default=0.2,
        help="share of each task's STAR scenarios reserved for the hidden split (default 0.2)",
    )
    s.set_defaults(func=_cmd_keygen)
    s = sub.add_parser("check", help="load every config of a layout with datasets.load_dataset (offline)")
    s.add_argument("dest")
    s.add_argument(
        "--configs",
        default="conformant,forked,task3,blind,blind_task2",
        help="comma-separated configs to load",
    )
    s.set_defaults(func=_cmd_check)
    s = sub.add_parser("push", help="upload a layout to a Hub dataset repo")
    s.add_argument("dest")
    s.add_argument("repo_id")
    s.add_argument("--private", action="store_true", help="create the Hub repo as private")
    s.add_argument(
        "--endpoint", default=None, help="Hub endpoint URL (default: $HF_ENDPOINT or huggingface.co)"
    )
    s.set_defaults(func=_cmd_push)
    s = sub.add_parser(
        "star-human",
        help="write the star-human track of Task 3: STAR's conformant human dialogues "
        "and forks made by editing them at a known turn (a folder load_examples and the benchmark read)",
    )
    s.add_argument(
        "--star",
        required=True,
        help="STAR folder with its human dialogues (dialogues.jsonl.gz or dialogues/)",
    )
    s.add_argument("--out", required=True, help="folder to write (refuses to replace one unless --overwrite)")
    s.add_argument(
        "--variant",
        choices=["picked", "typed"],
        default="picked",
        help="system turn text: the picked suggestion or the wizard's typed draft",
    )
    s.add_argument("--tasks", default=None, help="comma-separated STAR tasks (default: all)")
    s.add_argument("--seed", type=int, default=0, help="seed of the fit/test split and the donor draws")
    s.add_argument("--fit-fraction", type=float, default=0.5, help="share of each task's dialogues in train")
    s.add_argument("--overwrite", action="store_true", help="replace a star-human folder written before")
    s.set_defaults(func=_cmd_star_human)
    s = sub.add_parser(
        "sgd-track",
        help="write the sgd track of Task 3: SGD dialogues that follow their service's workflow "
        "(examples/workflows/sgd) and forks made by editing them at a known turn (a folder "
        "load_examples and the benchmark read)",
    )
    s.add_argument(
        "--sgd",
        default=None,
        help="SGD folder with dialogues.jsonl.gz and schema.json (default: $DIALFORK_SGD_DIR, else ../shared/sgd)",
    )
    s.add_argument("--out", required=True, help="folder to write (refuses to replace one unless --overwrite)")
    s.add_argument("--tasks", default=None, help="comma-separated sgd tasks (default: all ten)")
    s.add_argument(
        "--seed", type=int, default=0, help="seed of the cap, the fit/test split and the donor draws"
    )
    s.add_argument("--fit-fraction", type=float, default=0.5, help="share of each task's dialogues in train")
    s.add_argument(
        "--max-per-task",
        type=int,
        default=None,
        metavar="N",
        help="keep a seeded sample of at most N conformant dialogues per task (default: all)",
    )
    s.add_argument(
        "--workflows",
        default=None,
        help="folder of the track's workflow files (default: examples/workflows/sgd)",
    )
    s.add_argument("--overwrite", action="store_true", help="replace an sgd track folder written before")
    s.set_defaults(func=_cmd_sgd_track)
    from .workflow.export import add_cli as add_workflow_cli

    add_workflow_cli(sub)  # workflow {validate,steps,from-star}
    return state_defaults(p)


def main(argv: list[str] | None = None) -> int:
    from .console import console
    from .errors import CollectedErrors, cli_error_text

    a = build_parser().parse_args(argv)
    with console(a.verbose, a.quiet, default=logging.WARNING):
        try:
            return a.func(a)
        except CollectedErrors as e:  # the header, then every problem on a line of its own (the first 50)
            print(cli_error_text(e), file=sys.stderr)
            return 2
        except (ValueError, FileNotFoundError, FileExistsError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
