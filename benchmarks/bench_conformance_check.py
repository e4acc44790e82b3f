"""The check of generated D+ (``python -m generation --check-conformance``, issue 39 item 5) on text
whose answer is known.

* STAR's gold-conformant human dialogues (``dialfork_dataset.tracks.star_human``, ``picked`` and ``typed``
  text, every task): how many the check passes (a flag here is a false flag), and why the others fail
  (an off-workflow turn, or a coverage under the floor), for several coverage floors;
* a template corpus generated here (``--tasks``, ``--per-task``, seed 0): its D+ (conformant by
  construction: every flag is false) and its forks, per type, as stand-ins for a D+ that wandered off
  its workflow (a flag is a catch).

Run (from the repository root, offline)::

    HF_HUB_OFFLINE=1 python benchmarks/bench_conformance_check.py

Writes ``benchmarks/results/conformance_check.{md,json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLOORS = (0.0, 0.1, 0.2, 0.3, 0.5)


def _sys(turns):
    return [t["text"] for t in turns if t["speaker"] == "system"]


def _rates(results, floor):
    n = len(results) or 1
    off = sum(bool(x["off_workflow"]) for x in results)
    low = sum(not x["off_workflow"] and x["coverage"] < floor for x in results)
    return {
        "n": len(results),
        "pass": round(1 - (off + low) / n, 4),
        "off_workflow": round(off / n, 4),
        "low_coverage": round(low / n, 4),
        "mean_coverage": round(sum(x["coverage"] for x in results) / n, 4),
    }


def main() -> None:
    from dialfork_dataset.jsonl import read_jsonl
    from dialfork_dataset.star import StarCorpus
    from dialfork_dataset.tracks.star_human import conformant_human_dialogues
    from dialfork_metrics.task3.workflow.conformance import DEFAULT_MIN_COVERAGE, WorkflowConformance
    from generation.engine import GenerationConfig, generate_corpus

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--star", default=os.environ.get("DIALFORK_STAR_DIR", str(ROOT.parent / "shared" / "star"))
    )
    ap.add_argument("--tasks", default="weather,doctor_schedule,apartment_schedule")
    ap.add_argument("--per-task", type=int, default=16)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "conformance_check"))
    a = ap.parse_args()
    star = StarCorpus(a.star)
    t0 = time.perf_counter()
    check = WorkflowConformance().fit(star)
    fit_s = time.perf_counter() - t0
    rows: dict[str, dict] = {}
    for variant in ("picked", "typed"):
        hd = conformant_human_dialogues(star, variant=variant)
        res = check.check_many([(h.task, _sys(h.turns)) for h in hd])
        rows[f"human-{variant} (conformant)"] = {f"{f:g}": _rates(res, f) for f in FLOORS}
    tasks = tuple(t for t in a.tasks.split(",") if t)
    with tempfile.TemporaryDirectory() as tmp:
        generate_corpus(
            GenerationConfig(star=a.star, out=tmp, tasks=tasks, per_task=a.per_task, seed=0), progress=False
        )
        recs = [r for f in sorted(Path(tmp).glob("*.jsonl")) for r in read_jsonl(f)]
    t0 = time.perf_counter()
    res = check.check_many([(r["task"], _sys(r["turns"])) for r in recs])
    per_dlg_ms = 1000 * (time.perf_counter() - t0) / max(len(recs), 1)
    by = defaultdict(list)
    for r, x in zip(recs, res):
        by[f"template {r['hallucination_type'] or 'D+'}"].append(x)
    for k in sorted(by, key=lambda k: (k != "template D+", k)):
        rows[k] = {f"{f:g}": _rates(by[k], f) for f in FLOORS}
    default = f"{DEFAULT_MIN_COVERAGE:g}"
    md = [
        "# The check of generated D+ (workflow-nodes)",
        "",
        "Command: `HF_HUB_OFFLINE=1 python benchmarks/bench_conformance_check.py`",
        "",
        f"Fit on every STAR task: {fit_s:.1f} s; check: {per_dlg_ms:.1f} ms per dialogue (batched), "
        f"on {os.cpu_count()} CPU(s), load average {os.getloadavg()[0]:.2f}.",
        "",
        f"Share passed (conformant) at the default coverage floor {default} and at others; on human and "
        "template D+ every flag is false, on forks every flag is a catch.",
        "",
        "| dialogues | n | off-workflow turn | " + " | ".join(f"pass @ floor {f:g}" for f in FLOORS) + " |",
        "| --- | ---: | ---: | " + " | ".join("---:" for _ in FLOORS) + " |",
    ]
    for k, v in rows.items():
        md.append(
            f"| {k} | {v[default]['n']} | {100 * v[default]['off_workflow']:.1f}% | "
            + " | ".join(f"{100 * v[f'{f:g}']['pass']:.1f}%" for f in FLOORS)
            + " |"
        )
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(
        json.dumps(
            {
                "fit_seconds": round(fit_s, 2),
                "check_ms_per_dialogue": round(per_dlg_ms, 2),
                "default_floor": DEFAULT_MIN_COVERAGE,
                "load_average": os.getloadavg()[0],
                "rows": rows,
            },
            indent=2,
        )
    )
    out.with_suffix(".md").write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
