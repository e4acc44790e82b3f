"""Issue 31: what a new user trips over, walked step by step on small corpora built here.

One test per step of the issue, each running the real command lines (their ``main(argv)`` in
process, or ``python ...`` in a subprocess where the process itself is the point) and checking
the message a user now gets. Deeper checks of each piece live next to it (test_flowkl_audit.py,
test_citation.py, test_report_figures.py, test_leaderboard_render.py, ...).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from corpus_factory import make_records
from dialfork_dataset import export_hub_layout, write_jsonl

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_EVALUATE_OFFLINE": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
}


def _hidden(per_task=4):
    out = []
    for task in ("weather", "trivia"):
        for r in make_records(tasks=(task,), per_task=per_task, T=6):
            r = {
                **r,
                "dialogue_id": "h" + r["dialogue_id"],
                "source_id": "h" + r["source_id"],
                "scenario_id": "9" + r["scenario_id"],
            }
            r["turns"] = [{**t, "text": "hidden " + t["text"]} for t in r["turns"]]
            out.append(r)
    return out


@pytest.fixture(scope="module")
def demo_out(tmp_path_factory):
    """A ``demo_out`` as ``make demo`` leaves it, small: corpus/, hub/ (the Hub layout) and hub-gold/."""
    root = tmp_path_factory.mktemp("newcomer")
    out = root / "demo_out"
    write_jsonl(out / "corpus" / "records.jsonl", make_records(tasks=("weather", "trivia"), per_task=5, T=6))
    write_jsonl(root / "hidden" / "h.jsonl", _hidden())
    export_hub_layout(out / "corpus", out / "hub", hidden=root / "hidden", blind_key="5a" * 32)
    assert (out / "hub" / "data").is_dir() and (out / "hub-gold" / "task3_gold.jsonl").is_file()
    return out


@pytest.fixture
def in_root(demo_out, monkeypatch):
    """The working folder holding ``demo_out``, so that paths are typed as in the issue."""
    monkeypatch.chdir(demo_out.parent)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return demo_out.parent


def _run(main, argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


# ---------------------------------------------------------------- 1. a mistyped folder
def _mains():
    from annotation.__main__ import main as annotation
    from dialfork_dataset.__main__ import main as dataset
    from dialfork_metrics.audit.__main__ import main as audit
    from dialfork_metrics.audit.demo import main as audit_demo
    from dialfork_metrics.bench.cli import main as bench
    from dialfork_metrics.guard.__main__ import main as guard
    from dialfork_metrics.task3.__main__ import main as task3
    from leaderboard.__main__ import main as leaderboard

    return {
        "dataset": dataset,
        "task3": task3,
        "bench": bench,
        "guard": guard,
        "leaderboard": leaderboard,
        "audit": audit,
        "audit_demo": audit_demo,
        "annotation": annotation,
    }


# every command line that takes a corpus, a layout or a gold folder, given a mistyped one
MISTYPED = [
    ("dataset", ["check", "demo_out/hubb"], "demo_out/hubb"),
    ("dataset", ["push", "demo_out/hubb", "me/x"], "demo_out/hubb"),
    ("task3", ["predict", "--data", "demo_out/hubb", "--out", "p.jsonl"], "--data demo_out/hubb"),
    (
        "task3",
        ["predict", "--data", "demo_out/hubb", "--split", "blind", "--out", "p.jsonl"],
        "--data demo_out/hubb",
    ),
    ("task3", ["score", "p.jsonl", "--data", "demo_out/hubb"], "--data demo_out/hubb"),
    ("task3", ["score", "p.jsonl", "--gold", "demo_out/hub-gld"], "--gold demo_out/hub-gld"),
    ("bench", ["--data", "demo_out/hubb", "--out", "r"], "--data demo_out/hubb"),
    ("guard", ["fit", "--data", "demo_out/hubb", "--task", "weather", "--out", "m"], "--data demo_out/hubb"),
    (
        "guard",
        ["replay", "--data", "demo_out/hubb", "--task", "weather", "--monitor", "m"],
        "--data demo_out/hubb",
    ),
    ("guard", ["fake-upstream", "--data", "demo_out/hubb"], "--data demo_out/hubb"),
    ("leaderboard", ["validate", "p.jsonl", "--blind", "demo_out/hubb"], "--blind demo_out/hubb"),
    ("leaderboard", ["score", "p.jsonl", "--gold", "demo_out/hub-gld"], "--gold demo_out/hub-gld"),
    ("leaderboard", ["audit", "demo_out/hubb", "--gold", "demo_out/hub-gold"], "HUB demo_out/hubb"),
    (
        "audit",
        [
            "--agent",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tasks",
            "weather",
            "--reference",
            "demo_out/corpsu",
            "--out",
            "a",
        ],
        "--reference demo_out/corpsu",
    ),
    (
        "audit_demo",
        ["--reference", "demo_out/corpsu", "--tasks", "weather", "--out", "a"],
        "--reference demo_out/corpsu",
    ),
    (
        "annotation",
        [
            "draw-batch",
            "--db",
            "s.db",
            "--corpus",
            "demo_out/corpsu",
            "--task",
            "weather",
            "--annotators",
            "a",
        ],
        "--corpus demo_out/corpsu",
    ),
]


def test_1_mistyped_folder_is_no_such_folder_not_a_hub_failure(in_root, capsys):
    mains = _mains()
    # the two commands, word for word
    rc, _, err = _run(mains["dataset"], ["check", "demo_out/nothere"], capsys)
    assert rc == 2 and err.startswith("error: demo_out/nothere: no such folder")
    assert (
        "the Hub is offline (HF_HUB_OFFLINE=1)" in err
        and "ConnectionError" not in err
        and "Traceback" not in err
    )
    rc, _, err = _run(mains["task3"], ["predict", "--data", "demo_out/hubb", "--out", "p.jsonl"], capsys)
    assert rc == 2
    assert err.strip().splitlines() == [
        "error: --data demo_out/hubb: no such folder (did you mean demo_out/hub?); read as a Hub dataset id it "
        "cannot be loaded either: the Hub is offline (HF_HUB_OFFLINE=1) and no copy of it is cached"
    ]
    # a name that cannot be a Hub id is only a missing folder
    rc, _, err = _run(mains["dataset"], ["check", "./demo_out/hubb"], capsys)
    assert (
        rc == 2
        and "no such folder or file (did you mean demo_out/hub?)" in err
        and "Hub is offline" not in err
    )


@pytest.mark.parametrize(
    "cli, argv, named", MISTYPED, ids=[f"{c}-{a[0]}-{i}" for i, (c, a, _) in enumerate(MISTYPED)]
)
def test_1_every_cli_routes_through_the_resolver(in_root, capsys, cli, argv, named):
    (in_root / "p.jsonl").write_text('{"dialogue_id": "x", "prediction": null}\n')
    rc, _, err = _run(_mains()[cli], argv, capsys)
    assert rc == 2, err
    assert f"error: {named}: no such folder" in err and "Traceback" not in err, err


# ---------------------------------------------------------------- 2. a gold folder given as the layout
def test_2_gold_folder_is_recognised(in_root, capsys):
    mains = _mains()
    rc, _, err = _run(mains["dataset"], ["check", "demo_out/hub-gold"], capsys)
    assert rc == 2 and "BuilderConfig" not in err
    assert err.startswith("error: demo_out/hub-gold is a gold folder (labels and keys: ")
    assert "give the public Hub layout (demo_out/hub here); the gold goes to --gold" in err
    # and the other way round: the public layout where the gold is expected
    rc, _, err = _run(mains["leaderboard"], ["score", "x.jsonl", "--gold", "demo_out/hub"], capsys)
    assert rc == 2 and "demo_out/hub is a public Hub layout, not a gold folder: give the gold folder" in err
    # the layout itself still loads
    rc, out, err = _run(mains["dataset"], ["check", "demo_out/hub", "--configs", "task3,blind"], capsys)
    assert rc == 0, err
    assert "load_dataset('demo_out/hub', 'task3')" in out


# ---------------------------------------------------------------- 3. blind predictions scored with --data
def test_3_blind_predictions_name_the_fix(in_root, capsys):
    from dialfork_dataset.hub import load_blind

    rows = [
        {"dialogue_id": r["dialogue_id"], "prediction": None}
        for r in load_blind(in_root / "demo_out" / "hub")
    ]
    write_jsonl(in_root / "my.jsonl", rows)
    main = _mains()["task3"]
    rc, _, err = _run(main, ["score", "my.jsonl", "--data", "demo_out/hub"], capsys)
    assert rc == 2 and "see the exception's .errors" not in err and len(err.strip().splitlines()) == 1
    assert f"these {len(rows)} predictions are for the blind set of demo_out/hub" in err
    assert "score them against the gold with --gold demo_out/hub-gold instead of --data" in err
    # the fix named works
    rc, out, err = _run(main, ["score", "my.jsonl", "--gold", "demo_out/hub-gold"], capsys)
    assert rc == 0, err
    assert json.loads(out[out.index("{") :])["counts"]["dialogues"] == len(rows)
    # many bad rows on a CLI: every one (30 values, 30 unknown ids, the gold's missing lines) in one pass,
    # never the library's ".errors"; --max-errors caps the list and says how to see all
    write_jsonl(in_root / "bad.jsonl", [{"dialogue_id": f"x{i}", "prediction": "3"} for i in range(30)])
    rc, _, err = _run(main, ["score", "bad.jsonl", "--gold", "demo_out/hub-gold"], capsys)
    assert rc == 2 and "see the exception's .errors" not in err
    assert err.startswith("error: 61 problem(s) in the predictions:") and "more" not in err
    assert "bad.jsonl:30: unknown dialogue_id 'x29'" in err
    rc, _, err = _run(
        main, ["score", "bad.jsonl", "--gold", "demo_out/hub-gold", "--max-errors", "20"], capsys
    )
    assert "... and 41 more: run again with --max-errors 0 to list every one" in err


# ---------------------------------------------------------------- 4. a study database in a missing folder
def test_4_annotation_db_in_a_missing_folder(tmp_path):
    db = tmp_path / "nonexistent" / "dir" / "x.db"
    r = subprocess.run(
        [sys.executable, "-m", "annotation", "serve", "--db", str(db)],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
        cwd=tmp_path,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "sqlalchemy" not in r.stderr.lower()
    assert r.stderr.strip() == (
        f"error: study database {db}: the folder {db.parent} does not exist; create it "
        f"(mkdir -p {db.parent}) or give a path in an existing folder"
    )
    assert not db.parent.exists()


# ---------------------------------------------------------------- 5. compute() on nothing
@pytest.mark.parametrize("name", ["flowscore", "flowdtw", "flowkl", "task3"])
def test_5_evaluate_modules_refuse_empty_input_in_their_own_words(name):
    import dialfork_metrics as dm

    module = dm.load(name)
    with pytest.raises(
        ValueError,
        match=rf"^{name}: nothing to score \(0 predictions, 0 references\): give at "
        r"least one ",
    ):
        module.compute(predictions=[], references=[])
    with pytest.raises(ValueError, match=rf"^{name}: nothing to score"):
        module.add_batch(predictions=[], references=[])


# ---------------------------------------------------------------- 6. the Space's app.py run locally
def test_6_space_app_passes_its_command_line_on(tmp_path):
    import importlib.util

    if importlib.util.find_spec("gradio") is None:
        pytest.skip("gradio is not installed (pip install 'dialfork[leaderboard]')")
    from live_server import start_app, stop

    from leaderboard.synthetic import make_fixture

    app = ROOT / "hf_spaces" / "leaderboard" / "app.py"
    fx = make_fixture(tmp_path / "lb", n_sources=2, seed=3, with_text=False)
    # the options reach leaderboard.app: a mistyped gold folder is reported as such (main([]) said
    # "set DIALFORK_BLIND_DIR ..." and ignored every option)
    r = subprocess.run(
        [
            sys.executable,
            str(app),
            "--no-login",
            "--blind",
            str(fx["blind_dir"]),
            "--gold",
            str(tmp_path / "nope-gold"),
        ],
        capture_output=True,
        text=True,
        env=ENV,
        timeout=300,
    )
    assert r.returncode == 2 and f"--gold {tmp_path / 'nope-gold'}: no such folder" in r.stderr, r.stderr[
        -2000:
    ]
    # and with --no-login it serves locally, no Hugging Face login needed
    cmd = [
        sys.executable,
        str(app),
        "--no-login",
        "--blind",
        str(fx["blind_dir"]),
        "--gold",
        str(fx["gold_dir"]),
        "--results",
        str(tmp_path / "store"),
        "--host",
        "127.0.0.1",
    ]
    env = {k: v for k, v in ENV.items() if k not in ("SPACE_ID", "SYSTEM")}
    proc, base, log = start_app(lambda port: ([*cmd, "--port", str(port)], env), tmp_path, tmp_path)
    try:
        assert "must be logged in" not in log.read_text()
    finally:
        stop(proc)


# ---------------------------------------------------------------- 7. the audit's FlowKL
def test_7_audit_flowkl_ranks_faithful_first_and_never_shows_noise():
    from flowkl_synthetic import agent_sets

    from dialfork_metrics.audit.report import AuditReport, cell, flowkl_notes
    from dialfork_metrics.flowgraph import flowkl_crossfit

    ref, faithful, derailed = agent_sets(n_ref=30, n_tgt=8, seed=1)
    got = {}
    for name, (dialogues, embs) in {"faithful": faithful, "derailed": derailed}.items():
        got[name] = flowkl_crossfit(ref[0], dialogues, ref_embeddings=ref[1], tgt_embeddings=embs, n_boot=200)
    assert 0.0 <= got["faithful"]["flowkl"] < got["derailed"]["flowkl"]
    assert got["faithful"]["ci_high"] < got["derailed"]["ci_low"]  # apart beyond both intervals
    # too few dialogues: no value, and the table says why
    few = flowkl_crossfit(ref[0], faithful[0][:3], ref_embeddings=ref[1], tgt_embeddings=faithful[1][:3])
    assert few["flowkl"] is None and few["note"] == "not estimated: 3 target dialogues, fewer than 5"
    t = {"task": "weather", "flowkl": None, "flowkl_ci": None, "flowkl_note": few["note"]}
    assert cell(t, "flowkl") == "n/a"
    assert flowkl_notes([t])[1] == "FlowKL of weather: not estimated: 3 target dialogues, fewer than 5."
    shown = {
        **t,
        "flowkl": got["faithful"]["flowkl"],
        "flowkl_ci": [got["faithful"]["ci_low"], got["faithful"]["ci_high"]],
    }
    assert re.fullmatch(r"\d+\.\d{3} \[\d+\.\d{3}, \d+\.\d{3}\]", cell(shown, "flowkl"))
    task = {
        "task": "weather",
        "dialogues": 3,
        "failed": 0,
        "failures": [],
        "completion": 1.0,
        "coverage": 1.0,
        "skipped": 0.0,
        "repeated": 0.0,
        "out_of_order": 0.0,
        "alarm_rate": 0.0,
        "first_alarms": {},
        "flowkl": None,
        "flowkl_ci": None,
        "flowkl_note": few["note"],
        "flowscore": 0.1,
        "tool_calls": None,
        "tool_errors": None,
        "deviant": [],
        "dialogue_rows": [],
    }
    md = AuditReport(agent="a", model="m", detector="it", tasks=[task]).to_markdown()
    assert (
        "| n/a | 0.100 |" in md
        and "FlowKL of weather: not estimated: 3 target dialogues, fewer than 5." in md
    )


# ---------------------------------------------------------------- 8. docs: the spec and one citation
def test_8_docs_spec_and_one_citation():
    from dialfork_dataset.citation import CITATION

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert not re.findall(r"\]\((\.\./[^)]*)\)", readme)  # no link outside the repository
    assert "[`docs/spec.md`](docs/spec.md)" in readme and "[spec](spec.md)" in index
    assert "Definitions follow `SPEC.md` of the\n" not in index
    for para in re.split(r"\n\s*\n", index.split("## Set-up")[0].strip()):  # the opening paragraphs end
        assert para.rstrip().endswith((".", ":")) or para.startswith("#"), para[-80:]  # their sentences
    spec = (ROOT / "docs" / "spec.md").read_text(encoding="utf-8")
    assert spec.startswith("# DialFork: the normative spec") and "## 7. Metric definitions" in spec
    assert "spec.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (readme, index):
        assert re.findall(r"```bibtex\n(.*?)\n```", page, flags=re.S) == [CITATION]


# ---------------------------------------------------------------- 9. report, figures, Space
def test_9_figures_are_embedded_readable_and_shown_once(tmp_path):
    from dialfork_metrics.audit.report import AuditReport
    from dialfork_metrics.flowgraph import FlowGraph
    from leaderboard.render import render_html

    # the flow graph of a long dialogue fits page width
    rng = np.random.default_rng(0)
    V = 20
    vec = np.eye(2 * V)
    dialogues, embs = [], []
    for _ in range(6):
        path = [i for i in range(V) if rng.random() > 0.15]
        dialogues.append(
            [
                {"speaker": "user" if j % 2 == 0 else "system", "text": f"step {i} of a long workflow"}
                for j, i in enumerate(path)
            ]
        )
        embs.append(np.array([vec[2 * i + (j % 2)] for j, i in enumerate(path)], dtype=float))
    g = FlowGraph().fit(dialogues, embeddings=embs)
    g.draw(tmp_path / "g.png")
    from PIL import Image

    width, height = Image.open(tmp_path / "g.png").size
    assert width <= 1600 < height, (width, height)  # was one column per turn position: > 2,500 px wide
    # the audit chart: a y label, and a legend that covers no bar
    t = {
        "task": "weather",
        "completion": 0.5,
        "alarm_rate": 0.5,
        "dialogue_rows": [
            {
                "scenario_id": str(i),
                "coverage": {"coverage": c},
                "first_alarm": 2 if i % 2 else None,
                "flowscore": 0.3,
            }
            for i, c in enumerate([1.0, 1.0, 0.95, 1.0, 0.2])
        ],
    }
    fig = AuditReport(agent="a", model="m", detector="it", tasks=[t]).plot_figure(t)
    ax = fig.axes[0]
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert ax.get_ylabel() and not any(legend.overlaps(b.get_window_extent()) for b in ax.patches)
    # the Space's frame shows neither the page title nor the About tab a second time
    page = render_html([], embedded=True)
    assert "<h1>" not in page and 'id="about"' not in page and 'id="detector"' in page
    full = render_html([])
    assert "<h1>DialFork leaderboard</h1>" in full and 'id="about"' in full


# ---------------------------------------------------------------- 10. the smaller things
def test_10_smaller_things(in_root, capsys, tmp_path):
    import dialfork_metrics as dm
    from dialfork_dataset.hub.card import card_fields, example_row, size_category
    from dialfork_dataset.records import RECORD_FIELDS

    # evaluate's install hint names the distribution, dialfork
    code = (
        "import sys; sys.modules['dialfork_metrics'] = None  # as on a machine without dialfork\n"
        "import evaluate\n"
        "try:\n"
        f"    evaluate.load({str(ROOT / 'dialfork_metrics' / 'modules' / 'flowscore')!r})\n"
        "except ImportError as e:\n    print(e)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=300)
    assert "using 'pip install dialfork' for instance" in r.stdout, r.stdout + r.stderr
    # a portable encoder id, not this machine's site-packages path
    out = dm.load("flowscore").compute(predictions=[["Hi.", "Hello."]], references=[["Hi.", "Hello."]])
    assert out["encoder"] == "sentence-transformers/all-MiniLM-L6-v2"
    # the card: size of the largest config; every record field in the example row and the Fields table
    assert (
        size_category({"forked": {"train": 600, "test": 600}, "task3": {"train": 50, "test": 650}})
        == "1K<n<10K"
    )
    assert size_category({"forked": {"test": 700}, "task3": {"test": 700}, "blind": {"test": 200}}) == "n<1K"
    card = (in_root / "demo_out" / "hub" / "README.md").read_text(encoding="utf-8")
    fields = re.findall(r"^\| `(\w+)` \|", card.split("## Fields")[1].split("## ")[0], flags=re.M)
    assert fields == list(RECORD_FIELDS) == list(card_fields())
    example = json.loads(
        card.split("## Example (a public fork, turns cut)")[1].split("```json\n")[1].split("```")[0]
    )
    assert list(example) == list(RECORD_FIELDS) and example["instruction"] and example["decoding"] is not None
    assert list(json.loads(example_row([{"turns": [], "hallucination_type": "GR"}]))) == list(RECORD_FIELDS)
    assert re.search(r"size_categories:\n- n<1K\n", card)
    # help texts print no reStructuredText markup
    from cli_parsers import all_help_texts

    for prog, text in all_help_texts():
        assert "``" not in text, prog
    # an API key never goes on the command line
    main = _mains()["task3"]
    argv = [
        "predict",
        "--data",
        "demo_out/hub",
        "--detector",
        "llm",
        "--backend",
        "openai",
        "--model",
        "m",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--out",
        "p.jsonl",
    ]
    rc, _, err = _run(main, [*argv, "--api-key", "sk-secret"], capsys)
    assert (
        rc == 2
        and "--api-key: a key on the command line stays in your shell history" in err
        and "sk-secret" not in err
    )
    rc, _, err = _run(main, [*argv, "--api-key-env", "DIALFORK_TEST_UNSET_KEY"], capsys)
    assert rc == 2 and "--api-key-env DIALFORK_TEST_UNSET_KEY: that environment variable is not set" in err
