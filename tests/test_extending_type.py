"""docs/extending.md's "A new hallucination type", followed at run time (issue 36, item 3).

A toy fifth type, ``TOY`` (the system says its remaining steps in reverse order), is registered in
this process with :func:`dialfork_dataset.taxonomy.register` (its entry names its planner and
variant check) and given variants in a copy of the variant file: three pieces, no edit of DialFork.
Then, in the same process, the toolkit's consumers see it: generation, record validation, the Hub
export with its hidden split and blind draw, ``load_dataset``, the benchmark's Tables 1-4, the
annotation tool's demo and analyses, and the agent audit against a derailed fake that injects it.

The toys generate from ``examples/workflows/insurance.yaml`` (two tasks, no STAR needed). The
registration is undone at the end of the module, so no other test sees the type.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import FORK_POSITIONS, HallucinationType

ROOT = Path(__file__).resolve().parents[1]
#: The paper's four types (literal on purpose: tests that name them by name).
PAPER = ("WIC", "SSPC", "GR", "CSC")
EXAMPLE = ROOT / "examples" / "workflows" / "insurance.yaml"
PER_TASK = 6


def plan_reversed(hal, cx):
    """The toy planner: D+'s remaining content steps, said in reverse order."""
    return [("own", n) for n in reversed(cx.remaining)] or [("own", n) for n in cx.completed[-1:]]


def check_toy_templates(items):
    """The toy type's variant check: a ``template.order``, when given, must be ``reversed``."""
    return [
        f"{loc}: template.order must be 'reversed'"
        for loc, tpl in items
        if tpl.get("order", "reversed") != "reversed"
    ]


TOY = HallucinationType(
    "TOY",
    "toy reversal",
    breaks_task=True,
    planner=plan_reversed,
    variant_check=check_toy_templates,
    example_line="Let us do the last step first.",
)


def read_records(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.open(encoding="utf-8")]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """TOY registered (undone afterwards), its variant file, and a corpus generated with it."""
    from generation import GenerationConfig, generate_corpus
    from generation.variants import default_variants_data

    root = tmp_path_factory.mktemp("toy_type")
    before = taxonomy.names()  # the paper's four, and any type built in after them
    taxonomy.register(TOY)
    try:
        # a variant file of its own: the default pool (every type registered before TOY) and TOY's
        taxonomy.unregister("TOY")  # TOY names no variants: the default pool is the others'
        pool = default_variants_data()
        taxonomy.register(TOY)
        pool["types"]["TOY"] = [
            {
                "id": f"toy-{i}",
                "description": "say the steps backwards",
                "template": {"order": "reversed"},
                "cue": "The assistant goes through the steps backwards.",
                "instruction": "From now on, go through the remaining steps of your workflow in reverse order.",
            }
            for i in range(5)
        ]
        variants = root / "variants.yaml"
        variants.write_text(yaml.safe_dump(pool, sort_keys=False), encoding="utf-8")
        corpus = root / "corpus"
        generate_corpus(
            GenerationConfig(
                star=f"workflow:{EXAMPLE}", out=str(corpus), per_task=PER_TASK, variants_path=str(variants)
            ),
            progress=False,
        )
        yield {
            "root": root,
            "variants": variants,
            "corpus": corpus,
            "records": read_records(corpus),
            "before": before,
        }
    finally:
        taxonomy.unregister("TOY")


def test_the_registry_sees_the_type(toy):
    n = len(toy["before"]) + 1  # 5 with the paper's four
    assert taxonomy.names() == (*toy["before"], "TOY")  # appended: seed index n - 1
    assert taxonomy.type_index("TOY") == n - 1 and taxonomy.forks_per_source() == 4 * n
    # Table 4 sorts by table4_key (the code): TOY between SSPC and WIC among the paper's four
    assert [c for c in taxonomy.table4_order() if c in (*PAPER, "TOY")] == ["CSC", "GR", "SSPC", "TOY", "WIC"]
    assert taxonomy.breaking_types()[:3] == ("WIC", "SSPC", "GR") and taxonomy.breaking_types()[-1] == "TOY"
    assert taxonomy.HALLUCINATION_TYPES[-1] == "TOY" and taxonomy.display_name("TOY") == "toy reversal"
    # the old constant names, wherever they are re-exported, read the registry when accessed
    import dialfork_dataset
    import generation.engine
    from annotation import design
    from dialfork_dataset import records
    from dialfork_metrics import bench

    for module in (dialfork_dataset, records, generation.engine):
        assert module.HALLUCINATION_TYPES[-1] == "TOY", module.__name__
    assert bench.TYPES[-1] == "TOY"
    assert generation.engine.FORKS_PER_SOURCE == 4 * n and design.BREAKING_TYPES[-1] == "TOY"


def test_the_variant_check_of_the_entry_runs(toy, tmp_path):
    from generation.variants import VariantError, load_variants

    pool = yaml.safe_load(toy["variants"].read_text(encoding="utf-8"))
    pool["types"]["TOY"][2]["template"] = {"order": "shuffled"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(pool), encoding="utf-8")
    with pytest.raises(VariantError, match=r"types.TOY\[2\]: template.order must be 'reversed'"):
        load_variants(bad)


def test_generation_forks_every_source_with_the_type(toy):
    from dialfork_dataset.records import validate_records

    recs = toy["records"]
    validate_records(recs)
    sources = [r for r in recs if r["hallucination_type"] is None]
    assert len(sources) == 2 * PER_TASK
    per_source = Counter(r["source_id"] for r in recs if r["hallucination_type"] is not None)
    assert set(per_source.values()) == {taxonomy.forks_per_source()}  # 5 types x 4 positions: 20
    toys = [r for r in recs if r["hallucination_type"] == "TOY"]
    assert sorted(Counter(r["fork_position"] for r in toys).values()) == [2 * PER_TASK] * 4
    assert all(r["variant"].startswith("toy-") and r["substitute_task"] is None for r in toys)
    by_id = {r["dialogue_id"]: r for r in recs}
    for r in toys:  # the fork keeps D+'s turns before t_k and differs from it at t_k
        src = [t["text"] for t in by_id[r["source_id"]]["turns"] if t["speaker"] == "system"]
        own = [t["text"] for t in r["turns"] if t["speaker"] == "system"]
        tk = r["fork_turn"]
        assert own[: tk - 1] == src[: tk - 1]
        assert own[tk - 1 :] != src[tk - 1 :], r["dialogue_id"]


def test_export_hidden_split_and_load_dataset(toy, tmp_path):
    from datasets import load_dataset

    from dialfork_dataset import export_hub_layout, load_gold

    hub, gold = tmp_path / "hub", tmp_path / "gold"
    info = export_hub_layout(toy["corpus"], hub, gold, blind_key="7b" * 32, hidden_fraction=0.5)
    card = (hub / "README.md").read_text(encoding="utf-8")
    n_types, n_forks = len(taxonomy.names()), taxonomy.forks_per_source()  # 5 and 20
    assert "TOY toy reversal" in card and f"one of {n_types}" in card and f"all {n_forks}" in card
    n_test_src = info["counts"]["conformant"]["test"]
    assert info["counts"]["forked"]["test"] == n_test_src * n_forks
    forked = load_dataset(str(hub), "forked", split="test", cache_dir=str(tmp_path / "cache"))
    assert Counter(forked["hallucination_type"])["TOY"] == n_test_src * 4
    # the metric track's blind pairs hold every fork of each of its sources, the new type's included
    labels = load_gold(gold)
    assert labels["task2"] and len(labels["task2"]) % n_forks == 0
    assert Counter(r["hallucination_type"] for r in labels["task2"])["TOY"] == len(labels["task2"]) // n_types
    blind_task2 = load_dataset(str(hub), "blind_task2", split="test", cache_dir=str(tmp_path / "cache"))
    assert len(blind_task2) == len(labels["task2"])
    # the detector track's blind forks: drawn by latin_cells over the corpus's 5 types x 4 positions
    assert {r["hallucination_type"] for r in labels["task3"]} <= {None, *taxonomy.names()}


def test_the_benchmark_tables_have_a_column_for_the_type(toy, tmp_path):
    from dialfork_metrics.bench import run_benchmark

    rep = run_benchmark(
        str(toy["corpus"]),
        tasks=(1, 2, 3),
        encoders=("minilm",),
        out=str(tmp_path / "bench"),
        task1_methods=("turn_count_diff", "random"),
        task2_methods=("flowscore", "random"),
        task3_detectors=("last", "it"),
        n_resamples=50,
        plots=False,
        progress=False,
        task3_kwargs={"ablations": False},
    )
    md = (tmp_path / "bench" / "report.md").read_text(encoding="utf-8")
    header_t3 = "| Method | " + " | ".join(taxonomy.names()) + " | Avg |"
    assert header_t3 in md and header_t3.endswith("| TOY | Avg |")  # Tables 2 and 3: registration order
    assert "MAE_h TOY" in md  # Table 4 (Task 3)
    t2 = rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]["flowscore"]
    assert t2["TOY"] is not None and -1 <= t2["TOY"] <= 1
    t3 = rep["task3"]["minilm"]["results"]["last"]
    assert "TOY" in t3["mae_h_by_type"]


def test_the_annotation_demo_and_analyses_use_the_type(toy, tmp_path):
    from annotation.__main__ import main as annotation_main
    from annotation.analysis import analyse
    from annotation.design import CUE_FOIL, CUE_TRUE, TaskPool, assign_cue, draw_blocks, latin_types
    from annotation.simulate import simulate_judgments, synthetic_records
    from generation.variants import load_variants

    pool = load_variants(toy["variants"])
    # the demo (no --corpus: a synthetic corpus whose forks include the new type; cues from its variants)
    assert (
        annotation_main(
            ["demo", "--db", str(tmp_path / "study.db"), "--variants", str(toy["variants"]), "--no-serve"]
        )
        == 0
    )
    recs = synthetic_records("weather", 10, seed=0, pool=pool)
    toy_forks = [r for r in recs if r["hallucination_type"] == "TOY"]
    assert len(toy_forks) == 10 * 4
    assert all(TOY.example_line in [t["text"] for t in r["turns"]] for r in toy_forks)
    # cues: a TOY fork shown its own instruction sees its variant's cue; foils may be of the new type
    cues = [assign_cue(r, 3, pool) for r in recs]
    assert "TOY" in {c.htype for c in cues if c.kind == CUE_FOIL}
    own = [c for c, r in zip(cues, recs) if c.kind == CUE_TRUE and r["hallucination_type"] == "TOY"]
    assert own and all(c.text == pool.by_id(c.variant).cue for c in own)
    # the Latin square has one row per type: over 5 rows (one per type) each (type, k) cell occurs once
    cells = [(h, k) for r in range(len(taxonomy.names())) for k, h in latin_types(r).items()]
    assert sorted(cells) == sorted((h, k) for h in taxonomy.names() for k in FORK_POSITIONS)
    last_row = len(taxonomy.names()) - 4  # row n - 4 puts TOY, the last type, at k=4
    draws = draw_blocks(TaskPool.from_rows("weather", recs), ["a"], 1, seed=0, next_row=last_row)
    assert any("-TOY-" in d for draw in draws for d in draw.block.dialogue_ids)
    # the analyses: the type is pooled with the workflow-breaking ones and reported on its own
    rows = simulate_judgments(n_annotators=5, tasks=("weather",), seed=1)
    assert Counter(r["hallucination_type"] for r in rows if r["hallucination_type"])["TOY"] == 5 * 4
    res = analyse(rows, n_boot=50, seed=0)
    assert "TOY" in res["rq1"]["breaking"]["types"] and "TOY" in res["rq1"]["mean_slider_per_type"]
    assert res["rq2"]["true_per_type"]["TOY"]["n"] > 0


def test_the_audit_flags_a_fake_agent_that_injects_the_type(toy, tmp_path):
    from dialfork_metrics.audit import audit_agent, serve_fake_agent

    tasks = sorted({r["task"] for r in toy["records"]})
    reports = {}
    for kind in ("faithful", "derailed"):
        with serve_fake_agent(
            kind,
            source=f"workflow:{EXAMPLE}",
            htypes=("TOY",),
            variants=toy["variants"],
            derail_at=2,
            in_process=True,
        ) as fa:
            reports[kind] = audit_agent(
                fa.url,
                fa.model,
                tasks,
                toy["corpus"],
                source=f"workflow:{EXAMPLE}",
                per_task=3,
                out=tmp_path / kind,
                concurrency=2,
                happy_only=True,
                show_progress=False,
            )
    for task in tasks:
        good, bad = reports["faithful"].task(task), reports["derailed"].task(task)
        assert good["failed"] == bad["failed"] == 0
        assert bad["coverage"] <= good["coverage"] and bad["flowscore"] > good["flowscore"], task
