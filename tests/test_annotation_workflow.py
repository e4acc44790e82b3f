"""The annotation tool on a workflow file (examples/workflows/insurance.yaml), not only on STAR: it
reads its tasks through the WorkflowSource protocol (dialfork_dataset.sources), so a corpus
generated from the example is annotated with the example's workflow panel and task descriptions."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workflows" / "insurance.yaml"
TASKS = ("insurance_claim_status", "insurance_file_claim")


@pytest.mark.parametrize("spec", [str(EXAMPLE), f"workflow:{EXAMPLE}"])
def test_workflow_view_and_descriptions_from_a_workflow_file(spec):
    from annotation.corpus import task_descriptions, task_workflow, workflow_source
    from dialfork_dataset.sources import WorkflowSource

    assert isinstance(workflow_source(spec), WorkflowSource)
    desc = task_descriptions(spec)
    assert sorted(desc) == list(TASKS)
    assert desc["insurance_file_claim"].startswith(
        "You are an insurance service agent. Help the customer file"
    )
    wf = task_workflow(spec, "insurance_file_claim")
    assert wf.goal == desc["insurance_file_claim"] and wf.flowchart is None
    assert wf.steps[0].number == "1" and wf.steps[0].template  # the step's surface template, on demand
    text = wf.plain_text()
    assert "Ask the user for the policy number" in text and 'If the outcome is "Yes":' in text
    # the same numbered steps as the source's own rendering
    steps = workflow_source(spec).task("insurance_file_claim").steps()
    assert [s.number for s in wf.steps] == [str(s.number) for s in steps if s.goto is None] + [
        "" for s in steps if s.goto is not None
    ]


def test_workflow_view_of_an_unknown_task_names_the_task():
    from annotation.corpus import task_workflow
    from dialfork_dataset.sources import SourceError

    with pytest.raises(SourceError, match="unknown task 'weather'"):
        task_workflow(str(EXAMPLE), "weather")


def test_descriptions_of_a_missing_source_are_empty(tmp_path, caplog):
    from annotation.corpus import task_descriptions

    assert task_descriptions(None) == {}
    assert task_descriptions(tmp_path / "nowhere") == {}
    assert "task descriptions unavailable" in caplog.text


def test_annotating_a_corpus_generated_from_the_workflow_file(tmp_path):
    from fastapi.testclient import TestClient

    from annotation.app import create_app
    from annotation.corpus import load_corpus, task_descriptions
    from annotation.store import Study
    from dialfork_dataset.taxonomy import forks_per_source
    from generation import GenerationConfig, generate_corpus

    generate_corpus(
        GenerationConfig(
            star=f"workflow:{EXAMPLE}",
            out=str(tmp_path / "corpus"),
            per_task=6,
            tasks=("insurance_file_claim",),
        ),
        progress=False,
    )
    records = load_corpus(tmp_path / "corpus")
    study = Study(
        f"sqlite:///{tmp_path / 'study.db'}", study_seed=1, task_descriptions=task_descriptions(EXAMPLE)
    )
    assert study.import_records(records) == len(records) == 6 * (1 + forks_per_source())
    a = study.create_annotator("ann")
    study.draw_batch("insurance_file_claim", [a["id"]], 1, seed=3)
    client = TestClient(create_app(study, star_dir=f"workflow:{EXAMPLE}", analysis_dir=tmp_path / "an"))
    link = a["link_token"]
    intro = client.get(f"/a/{link}/intro/insurance_file_claim")
    assert intro.status_code == 200
    assert (
        "Help the customer file a new claim" in intro.text
        and "Ask the user for the policy number" in intro.text
    )
    assert client.get(f"/a/{link}/flowchart/insurance_file_claim").status_code == 404  # the file has none
    client.post(f"/a/{link}/intro/insurance_file_claim")
    tok = study.overview(study.annotator_by_link(link))["next"]["token"]
    page = client.get(f"/a/{link}/c/{tok}").text
    assert 'id="workflow"' in page and "Ask the user for the incident type" in page


def test_an_opened_source_is_read_again_when_its_kind_says_it_changed(tmp_path):
    """The cache of opened sources keys on the source kind's ``stamp``: an edited workflow file in a
    folder is read again; a registered kind brings its own stamp."""
    import os

    from annotation.corpus import workflow_source
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset.sources import SourceKind

    folder = tmp_path / "wf"
    folder.mkdir()
    (folder / "insurance.yaml").write_text(EXAMPLE.read_text(encoding="utf-8"), encoding="utf-8")
    first = workflow_source(f"workflow:{folder}")
    assert workflow_source(f"workflow:{folder}") is first  # unchanged: the cached source
    st = (folder / "insurance.yaml").stat()
    os.utime(folder / "insurance.yaml", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert workflow_source(f"workflow:{folder}") is not first  # the folder's newest file changed
    stamps = iter(range(100))
    source_kinds.register(
        SourceKind(
            "stamped",
            "dialfork_dataset.workflow.files:WorkflowCorpus",
            "a workflow file",
            stamp=lambda path: next(stamps),
        )
    )
    try:
        a = workflow_source(f"stamped:{EXAMPLE}")
        assert workflow_source(f"stamped:{EXAMPLE}") is not a  # its stamp changes on every call
    finally:
        source_kinds.unregister("stamped")
