"""Workflow sources (dialfork_dataset.sources) and workflow files (dialfork_dataset.workflow.files):
the STAR reader and the workflow reader agree on every STAR task; validation reports every problem
as file:line with the field; the CLIs take --source; a backend names the task and field a source
lacks."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dialfork_dataset.sources import (
    SourceError,
    is_source,
    open_source,
    parse_source_spec,
    require,
    source_identity,
)
from dialfork_dataset.star import StarCorpus
from dialfork_dataset.taxonomy import forks_per_source
from dialfork_dataset.workflow.export import dump_workflow, workflow_from_star
from dialfork_dataset.workflow.files import (
    MAX_NODES,
    WorkflowCorpus,
    WorkflowError,
    load_yaml_lines,
    validate_workflow,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workflows" / "insurance.yaml"


@pytest.fixture(scope="module")
def star(star_dir):
    return StarCorpus(star_dir)


def _graph_view(task):
    g = task.digraph()
    return (
        dict(g.graph),
        {n: dict(d) for n, d in g.nodes(data=True)},
        {(a, b, d["edge"]) for a, b, d in g.edges(data=True)},
    )


# -- the two readers agree -------------------------------------------------------------------------------


def test_every_star_task_reads_back_from_a_workflow_file_into_the_same_graph_and_steps(star, tmp_path):
    path = tmp_path / "star.yaml"
    dump_workflow(workflow_from_star(star, sorted(star.tasks), max_scenarios=2), path)
    assert validate_workflow(path) == []
    wf = WorkflowCorpus(path)
    assert sorted(wf.tasks) == sorted(star.tasks)
    assert wf.domains == star.domains
    for name, t in star.tasks.items():
        w = wf.task(name)
        assert dict(w.kinds) == dict(t.kinds), name
        assert {b: sorted(p) for b, p in w.branch_parents.items()} == {
            b: sorted(p) for b, p in t.branch_parents.items()
        }
        assert _graph_view(w) == _graph_view(t), name
        assert w.steps() == t.steps(), name
        assert w.render_steps() == t.render_steps(), name
        assert w.other_nodes() == t.other_nodes(), name
        assert w.end_nodes == t.end_nodes, name
        assert wf.scenarios_for(name)[0].user_task == " ".join(star.scenarios_for(name)[0].user_task.split())


def test_workflow_steps_hand_checked():
    """A two-step loop and a merge, numbered as the STAR reader numbers them."""
    t = WorkflowCorpus(EXAMPLE).task("insurance_claim_status")
    steps = t.steps()
    assert [s.node for s in steps] == [
        "hello",
        "insurance_ask_name",
        "insurance_ask_claim_number",
        "query_check",
    ]
    found, missing = steps[3].branches
    assert (found.label, missing.label) == ("available", "unavailable")
    assert [s.number for s in found.steps] == [5, 6]
    yes, no = found.steps[1].branches
    assert [s.node for s in yes.steps] == ["insurance_inform_payout", "anything_else"]
    assert no.steps[0].goto == 8  # "Continue with step 8" (anything_else, numbered under "yes")
    assert [(s.number, s.goto) for s in missing.steps] == [(9, None), (8, 8)]
    text = t.render_steps()
    assert "4. Query the knowledge base (claim_status) to check availability [query_check]" in text
    assert (
        "6. Offer to tell the user the expected payout [insurance_ask_payout]" in text
    )  # the step's own description


# -- the source contract -----------------------------------------------------------------------------------


def test_both_readers_are_sources_and_specs_resolve(star_dir, tmp_path):
    wf = open_source(f"workflow:{EXAMPLE}")
    assert isinstance(wf, WorkflowCorpus) and is_source(wf)
    st = open_source(f"star:{star_dir}")
    assert isinstance(st, StarCorpus) and is_source(st)
    assert open_source(wf) is wf
    assert isinstance(open_source(str(EXAMPLE)), WorkflowCorpus)  # a .yaml path is a workflow file
    assert parse_source_spec(str(star_dir)) == ("star", star_dir.resolve())
    # a STAR copy keeps the identity it had before sources existed (old runs resume)
    assert source_identity(str(star_dir)) == source_identity(f"star:{star_dir}") == str(star_dir.resolve())
    assert source_identity(f"workflow:{EXAMPLE}") == f"workflow:{EXAMPLE.resolve()}"
    with pytest.raises(SourceError, match="not a workflow source"):
        open_source(42)
    with pytest.raises(SourceError, match="no path"):
        open_source("workflow:")
    assert wf.length_budget("insurance_file_claim") == 30
    sc = wf.scenario("fc05")
    assert (
        sc.task == "insurance_file_claim" and not sc.happy and sc.slot_values["IncidentType"] == "fire damage"
    )
    assert "Your policy number is HM-51782." in sc.user_guide and sc.persona in sc.user_task
    assert wf.dbs["insurance_claims"][2]["Categories"] == [
        "Nadia Rossi",
        "Tom Becker",
        "Priya Shah",
        "Luis Ortega",
    ]


def test_missing_surface_templates_name_the_task_and_the_field(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    del data["tasks"][1]["steps"][2]["say"]  # insurance_claim_status: insurance_ask_claim_number
    del data["tasks"][1]["steps"][2]["alternatives"]
    path = tmp_path / "nosay.yaml"
    dump_workflow(data, path)
    src = WorkflowCorpus(path)  # valid: surface templates are optional
    assert src.task("insurance_file_claim").missing("surface_templates") == []
    with pytest.raises(SourceError) as e:
        require(src, "surface_templates", needed_by="the template backend")
    (err,) = e.value.errors
    assert err.startswith("task insurance_claim_status: missing ") and "tasks[1].steps[2].say" in err
    assert "insurance_ask_claim_number" in err

    from generation.engine import GenerationConfig, GenerationError, generate_corpus

    with pytest.raises(
        GenerationError,
        match=r"(?s)template backend needs surface templates.*task insurance_claim_status: missing .*steps\[2\]\.say",
    ):
        generate_corpus(GenerationConfig(star=f"workflow:{path}", out=str(tmp_path / "out")), progress=False)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_star_tasks_have_what_the_template_backend_needs(star):
    require(star, "surface_templates")
    assert star.task("weather").missing("api") == []
    assert star.task("spaceship_access_codes").missing("kb", star.dbs)  # its API names the 'null' table


# -- validation ---------------------------------------------------------------------------------------------

BROKEN = """\
format: dialfork-workflow/1
kb:
  claims:
    fields:
      - {name: Status, type: Categorical, categories: [open, closed]}
    rows:
      - {Status: open, Colour: red}
tasks:
  - name: claim_check
    length_budget: 20
    api:
      function: check
      kb: claimz
      inputs:
        - {name: ClaimId, type: Integer}
      required: [ClaimId, Name]
    steps:
      - id: hello
        say: Hi!
        next: claim_ask_id
      - id: claim_ask_id
        ask: ClaimNumber
        say: Your claim number?
        next: query
      - id: query
        kind: query
        say: Looking it up
        branches:
          - {outcome: found, next: claim_tell}
          - {outcome: hello, next: nowhere}
      - id: claim_tell
        say: It is {status}.
        next: query
      - id: hello
        say: Hello again.
    scenarios:
      - {id: s1, goal: Check claim 5., slots: {ClaimId: 5, Colour: blue}}
      - {id: s1, goal: Check claim 6.}
  - name: claim_check
    length_budget: 20
    steps:
      - {id: hello, say: Hi, branches: [{outcome: found, next: hello}]}
    scenarios:
      - {id: s2, goal: x}
"""


def _problems(path):
    return [line.split(": ", 2) for line in validate_workflow(path)]


def test_validate_reports_every_reference_problem_with_its_line_and_field(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(BROKEN)
    got = {(loc.rsplit(":", 1)[1], fld) for loc, fld, _ in _problems(path)}
    assert all(loc.startswith(str(path) + ":") for loc, _, _ in _problems(path))
    assert got == {
        ("7", "kb.claims.rows[0].Colour"),  # no such column
        ("16", "tasks[0].api.required[1]"),  # Name is not an input
        ("13", "tasks[0].api.kb"),  # no table claimz
        ("22", "tasks[0].steps[1].ask"),  # ClaimNumber is not a slot
        ("27", "tasks[0].steps[2].say"),  # a query is not said
        ("30", "tasks[0].steps[2].branches[1].outcome"),  # outcome named like a step
        ("30", "tasks[0].steps[2].branches[1].next"),  # nowhere
        ("34", "tasks[0].steps[4].id"),  # duplicate step id
        ("37", "tasks[0].scenarios[0].slots.Colour"),  # not a slot
        ("38", "tasks[0].scenarios[1].id"),  # duplicate scenario id
        ("39", "tasks[1].name"),  # duplicate task name
    }


def test_validate_reports_schema_problems_with_lines(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    bad = copy.deepcopy(data)
    bad["tasks"][0]["steps"][1]["nxt"] = "typo"
    bad["tasks"][0]["length_budget"] = "thirty"
    bad["tasks"][1]["scenarios"][0]["happy"] = "yes please"
    del bad["tasks"][1]["scenarios"][1]["goal"]
    path = tmp_path / "schema.yaml"
    dump_workflow(bad, path)
    text = path.read_text().splitlines()
    probs = _problems(path)
    fields = sorted(f for _, f, _ in probs)
    assert fields == [
        "tasks[0].length_budget",
        "tasks[0].steps[1].nxt",
        "tasks[1].scenarios[0].happy",
        "tasks[1].scenarios[1]",
    ]
    msgs = {f: (int(loc.rsplit(":", 1)[1]), m) for loc, f, m in probs}
    line, msg = msgs["tasks[0].length_budget"]
    assert text[line - 1].strip() == "length_budget: thirty" and "not of type 'integer'" in msg
    line, msg = msgs["tasks[0].steps[1].nxt"]
    assert text[line - 1].strip() == "nxt: typo" and msg == "unknown field 'nxt' (did you mean 'next'?)"
    line, msg = msgs["tasks[1].scenarios[0].happy"]
    assert text[line - 1].strip() == "happy: yes please"
    line, msg = msgs["tasks[1].scenarios[1]"]
    assert text[line - 1].strip().startswith("- id: cs02") and msg == "'goal' is a required property"


def test_yaml_attacks_and_malformed_files(tmp_path):
    bomb = ["format: dialfork-workflow/1", "a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        bomb.append(f"{chr(97 + i)}: &{chr(97 + i)} [" + ", ".join([f"*{chr(96 + i)}"] * 10) + "]")
    p = tmp_path / "bomb.yaml"
    p.write_text("\n".join(bomb) + "\n")
    with pytest.raises(WorkflowError, match=f"more than {MAX_NODES} YAML nodes"):
        load_yaml_lines(p)
    p.write_text("format: dialfork-workflow/1\ntasks: [\n  {name: a,\n")
    (err,) = validate_workflow(p)
    assert err.startswith(f"{p}:4: malformed YAML")
    p.write_text("format: x\nformat: y\n1: z\n")
    errs = validate_workflow(p)
    assert f"{p}:2: format: duplicate key" in errs and any(
        e.startswith(f"{p}:3: ") and "keys must be strings" in e for e in errs
    )
    marker = tmp_path / "pwned"
    p.write_text(
        f"format: dialfork-workflow/1\ntasks:\n  - !!python/object/apply:os.system ['touch {marker}']\n"
    )
    (err,) = validate_workflow(p)
    assert err.startswith(
        f"{p}:3: tasks[0]: unsupported YAML tag 'tag:yaml.org,2002:python/object/apply:os.system'"
    )
    assert not marker.exists()
    p.write_text("")
    assert "empty file" in validate_workflow(p)[0]
    assert "no such workflow file" in validate_workflow(tmp_path / "nope.yaml")[0]
    with pytest.raises(WorkflowError) as e:
        WorkflowCorpus(tmp_path / "nope.yaml")
    assert e.value.errors


def test_cli_validate_exit_codes_and_messages(tmp_path):
    env_cmd = [sys.executable, "-m", "dialfork_dataset", "workflow", "validate"]
    ok = subprocess.run([*env_cmd, str(EXAMPLE)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "valid (2 task(s), 1 domain(s), 28 scenario(s))" in ok.stdout
    bad = tmp_path / "broken.yaml"
    bad.write_text(BROKEN)
    r = subprocess.run([*env_cmd, str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[-1] == f"error: 11 problem(s) in {bad}" and len(lines) == 12


def test_example_gives_task1_enough_units():
    """Every task: >= 12 scenarios, all four fork turns admitted by its shortest conformant path."""
    wf = WorkflowCorpus(EXAMPLE)
    assert len(wf.domains) == 1 and len(wf.tasks) == 2
    for name in wf.tasks:
        scs = wf.scenarios_for(name)
        assert len(scs) >= 12 and any(not s.happy for s in scs)
    assert (
        json.loads(json.dumps(wf.summary()))["per_task"]["insurance_claim_status"]["single_task_scenarios"]
        == 14
    )


def test_generation_cli_takes_a_source(tmp_path, star_dir, capsys, monkeypatch):
    from generation.cli import main

    out = tmp_path / "claims"
    rc = main(
        [
            "--source",
            f"workflow:{EXAMPLE}",
            "--out",
            str(out),
            "--tasks",
            "insurance_claim_status",
            "--per-task",
            "2",
            "--no-progress",
        ]
    )
    n = forks_per_source()
    assert rc == 0 and f"{2 * (1 + n)} records (2 conformant, {2 * n} forks" in capsys.readouterr().out
    first = json.loads((out / "insurance_claim_status.jsonl").open().readline())
    assert first["dialogue_id"] == "insurance_claim_status-cs01" and first["domain"] == "insurance"
    with pytest.raises(SystemExit) as e:  # --source and --star exclude each other
        main(["--source", f"workflow:{EXAMPLE}", "--star", str(star_dir), "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    # neither: STAR at $DIALFORK_STAR_DIR; without it, a one-line error naming the three ways
    monkeypatch.delenv("DIALFORK_STAR_DIR", raising=False)
    assert main(["--out", str(tmp_path / "x")]) == 2
    assert "--source KIND:PATH or --star PATH, or set DIALFORK_STAR_DIR" in capsys.readouterr().err
    rc = main(
        ["--source", f"workflow:{tmp_path / 'missing.yaml'}", "--out", str(tmp_path / "y"), "--no-progress"]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "no such workflow file" in err and "Traceback" not in err
    rc = main(["--source", f"workflow:{EXAMPLE}", "--out", str(tmp_path / "z"), "--tasks", "weather"])
    assert (
        rc == 2
        and "unknown task(s) ['weather']; the source's tasks are: insurance_claim_status"
        in capsys.readouterr().err
    )


def test_llm_detector_renders_the_workflow_of_a_workflow_file():
    from dialfork_metrics.task3 import LLMDetector

    class Client:
        def __init__(self):
            self.batches = []

        def chat(self, batch, **_):
            self.batches.append(batch)
            return ["[[ANSWER:none]]"] * len(batch)

    client = Client()
    det = LLMDetector(with_workflow=True, star_dir=f"workflow:{EXAMPLE}", client=client)
    turns = [{"speaker": s, "text": f"{s} says something"} for s in ("user", "system") * 4]
    assert det.predict_many([{"dialogue_id": "d", "turns": turns, "task": "insurance_file_claim"}]) == [None]
    prompt = json.dumps(client.batches[-1])
    assert (
        "Read the claim's details back and ask the user to confirm them [insurance_ask_confirm_claim]"
        in prompt
    )
    assert (
        det.workflow_for("insurance_file_claim")
        == WorkflowCorpus(EXAMPLE).task("insurance_file_claim").render_steps()
    )


def test_export_audits_against_the_source_recorded_in_the_manifest(tmp_path, monkeypatch):
    """``python -m leaderboard export`` without ``--star`` regenerates from the corpus's own
    source (a workflow file here), not from ``$DIALFORK_STAR_DIR``, when the manifest names one
    that still exists."""
    import json

    from leaderboard.__main__ import _recorded_source

    wf = tmp_path / "flows.yaml"
    wf.write_text("x", encoding="utf-8")
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    assert _recorded_source(str(corpus)) is None  # no manifest
    (corpus / "manifest.json").write_text(
        json.dumps({"config": {"star": f"workflow:{wf}"}}), encoding="utf-8"
    )
    assert _recorded_source(str(corpus)) == f"workflow:{wf}"
    wf.unlink()
    assert _recorded_source(str(corpus)) is None  # moved away: the caller falls back to $DIALFORK_STAR_DIR
    (corpus / "manifest.json").write_text("{not json", encoding="utf-8")
    assert _recorded_source(str(corpus)) is None


def _renamed(data, suffix):
    """The example's tasks and scenarios under other names (a second file of a folder)."""
    d = copy.deepcopy(data)
    for t in d["tasks"]:
        t["name"] += suffix
        for sc in t["scenarios"]:
            sc["id"] = f"{sc['id']}{suffix}"
    return d


def test_a_folder_of_workflow_files_is_one_source(tmp_path, capsys):
    """Issue 37: `workflow validate FOLDER` and `--source workflow:FOLDER` answered 'Is a directory'."""
    from dialfork_dataset.__main__ import main as dataset_main
    from dialfork_dataset.sources import open_source

    data = yaml.safe_load(EXAMPLE.read_text())
    folder = tmp_path / "flows"
    folder.mkdir()
    dump_workflow(data, folder / "a.yaml")
    dump_workflow(_renamed(data, "_b"), folder / "b.yml")
    (folder / "notes.txt").write_text("not a workflow file")
    wf = WorkflowCorpus(folder)
    assert [f.name for f in wf.files] == ["a.yaml", "b.yml"] and wf.name == "flows"
    assert len(wf.tasks) == 4 and len(wf.scenarios) == 56 and wf.domains == {"insurance": list(wf.tasks)}
    assert wf.scenario("cs01_b").task == "insurance_claim_status_b"
    assert set(wf.dbs) == set(data["kb"])
    for spec in (f"workflow:{folder}", str(folder)):  # a bare folder without tasks/ holding .yaml files
        assert isinstance(open_source(spec), WorkflowCorpus)
    assert validate_workflow(folder) == []
    assert dataset_main(["workflow", "validate", str(folder)]) == 0
    assert "valid (2 file(s), 4 task(s), 1 domain(s), 56 scenario(s))" in capsys.readouterr().out
    # every file's problems are collected before anything is raised, each with its file and line
    (tmp_path / "broken").mkdir()
    for name in ("x.yaml", "y.yaml"):
        (tmp_path / "broken" / name).write_text(BROKEN)
    errs = validate_workflow(tmp_path / "broken")
    assert (
        len(errs) == 22 and sum(e.startswith(str(tmp_path / "broken" / "y.yaml") + ":") for e in errs) == 11
    )
    with pytest.raises(WorkflowError, match="workflow folder") as e:
        WorkflowCorpus(tmp_path / "broken")
    assert len(e.value.errors) == 22
    # the files together: task names and scenario ids unique across them, shared tables alike
    (tmp_path / "clash").mkdir()
    dump_workflow(data, tmp_path / "clash" / "a.yaml")
    other = _renamed(data, "_c")
    other["tasks"][0]["name"] = data["tasks"][0]["name"]
    other["tasks"][1]["scenarios"][0]["id"] = data["tasks"][0]["scenarios"][0]["id"]
    table = next(iter(other["kb"]))
    other["kb"][table]["rows"] = other["kb"][table]["rows"][:1]
    dump_workflow(other, tmp_path / "clash" / "b.yaml")
    errs = validate_workflow(tmp_path / "clash")
    b = str(tmp_path / "clash" / "b.yaml")
    assert len(errs) == 3 and all(
        e.startswith(b + ":") and f"{tmp_path / 'clash' / 'a.yaml'}" in e for e in errs
    )
    assert {e.split(": ")[1] for e in errs} == {"tasks[0].name", "tasks[1].scenarios[0].id", f"kb.{table}"}
    (tmp_path / "empty").mkdir()
    (err,) = validate_workflow(tmp_path / "empty")
    assert err.startswith(f"{tmp_path / 'empty'}: no workflow files (*.yaml, *.yml) in this folder")


def test_cli_takes_the_example_folder(tmp_path, capsys):
    from generation.cli import main

    folder = EXAMPLE.parent
    r = subprocess.run(
        [sys.executable, "-m", "dialfork_dataset", "workflow", "validate", "examples/workflows"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0 and "valid (1 file(s), 2 task(s)" in r.stdout, r.stderr
    rc = main(
        [
            "--source",
            f"workflow:{folder}",
            "--out",
            str(tmp_path / "c"),
            "--tasks",
            "insurance_claim_status",
            "--per-task",
            "1",
            "--no-progress",
        ]
    )
    n = forks_per_source()
    assert rc == 0 and f"{1 + n} records (1 conformant, {n} forks" in capsys.readouterr().out


def test_annotation_rereads_a_folder_source_when_one_of_its_files_changes(tmp_path):
    import os

    from annotation.corpus import workflow_source

    folder = tmp_path / "flows"
    folder.mkdir()
    data = yaml.safe_load(EXAMPLE.read_text())
    dump_workflow(data, folder / "a.yaml")
    first = workflow_source(f"workflow:{folder}")
    assert workflow_source(f"workflow:{folder}") is first  # unchanged: read once
    dump_workflow(_renamed(data, "_b"), folder / "a.yaml")  # edited in place: the folder's mtime may not move
    st = (folder / "a.yaml").stat()
    os.utime(folder / "a.yaml", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = workflow_source(f"workflow:{folder}")
    assert again is not first and "insurance_claim_status_b" in again.tasks
