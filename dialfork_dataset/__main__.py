"""``python -m dialfork_dataset``: STAR summary, record validation, hidden-split key, Hub export, load check, push."""

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
    print(f"wrote {path} (mode 0600): a {8 * 32}-bit HMAC key and a 128-bit hidden seed. Keep it with the gold; "
          "never publish or commit it.")
    return 0


def _recorded_source(src: str) -> str | None:
    """The workflow source (STAR folder or ``workflow:PATH``) recorded in the generator manifest of
    ``src``, if it is still there: the audit regenerates from the corpus's own source, not from
    whatever ``$DIALFORK_STAR_DIR`` names (a workflow-file corpus is not a STAR one)."""
    from pathlib import Path

    try:
        config = json.loads((Path(src) / "manifest.json").read_text(encoding="utf-8")).get("config") or {}
    except (OSError, ValueError, AttributeError):
        return None
    recorded = config.get("star") if isinstance(config, dict) else None
    if not isinstance(recorded, str) or not recorded:
        return None
    path = recorded.split(":", 1)[1] if recorded.startswith("workflow:") else recorded
    return recorded if Path(path).exists() else None


def _cmd_export(a: argparse.Namespace) -> int:
    import os

    from .hub import AuditFailed, export_hub_layout

    audit_options = {"regen_seeds": tuple(range(a.regen_seeds))}
    star = a.star or _recorded_source(a.src) or os.environ.get("DIALFORK_STAR_DIR")
    if star:
        audit_options["star"] = star
    try:
        info = export_hub_layout(a.src, a.dest, a.gold_dir, hidden=a.hidden, compound=a.compound, key=a.key_file,
                                 split_seed=a.split_seed,
                                 blind_key=a.blind_key, hidden_fraction=a.hidden_fraction,
                                 public_fraction=a.public_fraction, overwrite=a.overwrite, audit=not a.no_audit,
                                 audit_options=audit_options)
    except AuditFailed as e:
        print(e.report.format_text(), file=sys.stderr)
        print(f"error: the audit failed ({e.report.worst()}); nothing was published", file=sys.stderr)
        return 1
    print(json.dumps(info, indent=2))
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    from .hub import LAYOUT_CONFIGS, load_layout, resolve_data

    src = resolve_data(a.dest, accept=("layout", "hub"))
    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in LAYOUT_CONFIGS]
    if unknown or not configs:
        raise ValueError(f"--configs {a.configs!r}: unknown config(s) {', '.join(unknown) or '(none given)'}; "
                         f"a layout has {', '.join(LAYOUT_CONFIGS)}")
    for cfg in configs:
        dd = load_layout(src.path if src.path is not None else src.value, cfg)
        print(f"load_dataset({str(a.dest)!r}, {cfg!r}): " + ", ".join(f"{s}={len(ds):,}" for s, ds in dd.items()))
    return 0


def _cmd_push(a: argparse.Namespace) -> int:
    from .hub import push_to_hub, resolve_data

    resolve_data(a.dest, accept=("layout",))
    push_to_hub(a.dest, a.repo_id, private=a.private, endpoint=a.endpoint)
    print(f"pushed {a.dest} to datasets/{a.repo_id}")
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
    s = sub.add_parser("keygen", help="draw the hidden split's secrets (HMAC key + 128-bit hidden seed) into a file")
    s.add_argument("out", help="key file to write (refuses to replace one)")
    s.add_argument("--hidden-fraction", type=float, default=0.2,
                   help="share of each task's STAR scenarios reserved for the hidden split (default 0.2)")
    s.set_defaults(func=_cmd_keygen)
    s = sub.add_parser("export", help="write the Hub layout (public configs, card, blind sets; gold apart), "
                                      "audited before it is swapped in")
    s.add_argument("src", help="public generator output folder (or one record file)")
    s.add_argument("dest", help="layout folder to write")
    s.add_argument("--hidden", default=None,
                   help="hidden corpus (python -m generation --hidden-key KEY --split hidden); default: reserve "
                        "hidden sources from SRC (public seed: tests only)")
    s.add_argument("--compound", default=None, metavar="DIR",
                   help="compound corpus (python -m generation --compound PLAN): written as the 'compound' config")
    s.add_argument("--key-file", default=None, help="key file (python -m dialfork_dataset keygen)")
    s.add_argument("--gold-dir", default=None, help="where labels, key and audit report go (default: <dest>-gold)")
    s.add_argument("--split-seed", type=int, default=0)
    s.add_argument("--blind-key", default=None, help="hex key (>= 32 random bytes) instead of --key-file")
    s.add_argument("--hidden-fraction", type=float, default=None,
                   help="share of sources reserved when no --hidden corpus is given (default: the key's, 0.2)")
    s.add_argument("--public-fraction", type=float, default=0.5, help="share of blind sources in the public part")
    s.add_argument("--star", default=None, help="STAR folder (or workflow:PATH) for the audit's regeneration "
                                               "attack (default: the source recorded in SRC/manifest.json, then "
                                               "$DIALFORK_STAR_DIR; without one that attack is skipped)")
    s.add_argument("--regen-seeds", type=int, default=10, metavar="N",
                   help="the regeneration attack tries the public seeds 0..N-1 (default 10)")
    s.add_argument("--no-audit", action="store_true", help="skip the audit (never for a release)")
    s.add_argument("--overwrite", action="store_true")
    s.set_defaults(func=_cmd_export)
    s = sub.add_parser("check", help="load every config of a layout with datasets.load_dataset (offline)")
    s.add_argument("dest")
    s.add_argument("--configs", default="conformant,forked,task3,blind,blind_task2",
                   help="comma-separated configs to load")
    s.set_defaults(func=_cmd_check)
    s = sub.add_parser("push", help="upload a layout to a Hub dataset repo")
    s.add_argument("dest")
    s.add_argument("repo_id")
    s.add_argument("--private", action="store_true", help="create the Hub repo as private")
    s.add_argument("--endpoint", default=None, help="Hub endpoint URL (default: $HF_ENDPOINT or huggingface.co)")
    s.set_defaults(func=_cmd_push)
    from .workflow_export import add_cli as add_workflow_cli

    add_workflow_cli(sub)  # workflow {validate,steps,from-star}
    return state_defaults(p)


def main(argv: list[str] | None = None) -> int:
    from .console import console
    from .errors import CollectedErrors

    a = build_parser().parse_args(argv)
    with console(a.verbose, a.quiet, default=logging.WARNING):
        try:
            return a.func(a)
        except CollectedErrors as e:  # the header, then every problem on a line of its own (the first 50)
            if e.errors == [str(e)]:  # one problem, the message itself
                print(f"error: {e}", file=sys.stderr)
                return 2
            shown = e.errors[:50]
            more = [f"... and {len(e.errors) - len(shown)} more"] if len(e.errors) > len(shown) else []
            print("\n".join([f"error: {str(e).splitlines()[0]}", *shown, *more]), file=sys.stderr)
            return 2
        except (ValueError, FileNotFoundError, FileExistsError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main())
