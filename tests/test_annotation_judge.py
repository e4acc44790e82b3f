"""Table 11: the calibrated LLM judge next to the people, on a study completed by simulated
annotators, with the judge served by a fake OpenAI-compatible server (tests/judge_fake.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("sqlalchemy")

from judge_fake import serve_fake_judge  # noqa: E402

from annotation.simulate import synthetic_records  # noqa: E402
from annotation.store import Study  # noqa: E402
from dialfork_metrics.judge import LLMJudge  # noqa: E402


@pytest.fixture(scope="module")
def records():
    return synthetic_records("weather", 10, seed=5)


@pytest.fixture
def study(tmp_path, records, star_dir):
    """Four people complete two mini-blocks each: a slider rising with k, the true instruction
    confirmed at t_k, foils rejected, prefixes followed."""
    from sqlalchemy import select
    from sqlalchemy.orm import Session

    from annotation.corpus import task_descriptions
    from annotation.db import Assignment, Conversation

    st = Study(
        f"sqlite:///{tmp_path / 'study.db'}", study_seed=11, task_descriptions=task_descriptions(star_dir)
    )
    st.import_records(records)
    by_id = {r["dialogue_id"]: r for r in records}
    rng = np.random.default_rng(0)
    for name in ("p1", "p2", "p3", "p4"):
        a = st.create_annotator(name)
        st.draw_batch("weather", [a["id"]], 2, seed=len(name) + ord(name[-1]), overlap_share=0.0)
        ann = st.annotator_by_link(a["link_token"])
        st.mark_intro_seen(ann, "weather")
        while st.overview(ann)["next"] is not None:
            tok = st.overview(ann)["next"]["token"]
            with Session(st.engine) as s:
                a_row = s.scalar(select(Assignment).where(Assignment.token == tok))
                conv = s.get(Conversation, a_row.conversation_id)
                rec, cue_kind = by_id[conv.dialogue_id], conv.cue_kind
            k = rec["fork_position"]
            st.submit(
                ann,
                tok,
                1,
                {"slider": int(np.clip((95 if k is None else 15 * k) + rng.normal(0, 5), 0, 100))},
            )
            body = (
                {"answer": "yes", "onset_turn": rec["fork_turn"]} if cue_kind == "true" else {"answer": "no"}
            )
            if st.submit(ann, tok, 2, body)["next_step"] == 3:
                st.submit(ann, tok, 3, {"prefix": "yes"})
    return st


def test_judge_on_the_study_and_the_corpus(study, records, star_dir):
    from annotation.analysis import analyse
    from annotation.judge import JUDGE_ANNOTATOR, run_judge

    people = study.judgments()
    assert len(people) == 40
    with serve_fake_judge() as url:
        judge = LLMJudge("fake-judge", backend="openai", base_url=url, star_dir=star_dir)
        res = run_judge(judge, study, records, calibration="isotonic", n_folds=4, seed=0)
    stored = {r["dialogue_id"]: r["cue_text"] for r in people}
    assert len(res["study"]) == len(stored) and all(r["annotator"] == JUDGE_ANNOTATOR for r in res["study"])
    assert all(r["cue_text"] == stored[r["dialogue_id"]] for r in res["study"])  # the cue people saw
    assert len(res["all"]) == len(records)
    cal = res["calibration"]
    assert (
        cal["method"] == "isotonic" and cal["n"] == len(stored) and cal["map"]["x"] == sorted(cal["map"]["x"])
    )
    # the corpus column applies the map fitted on the study: increasing in the raw rating
    pairs = sorted((r["slider_raw"], r["slider"]) for r in res["all"])
    assert all(b[1] >= a[1] - 1e-9 for a, b in zip(pairs, pairs[1:]))
    assert all(0 <= r["slider"] <= 100 for r in res["study"] + res["all"])
    for rows in (res["study"], res["all"]):  # the fake judge's known answers, through the same analyses
        a = analyse(rows, n_boot=50, apply_exclusion=False)
        assert a["rq3"]["exact"]["rate"] == 1.0
        assert a["rq2"]["true_overall"]["rate"] == 1.0 and a["rq2"]["foil_conformant"]["rate"] == 0.0
        assert a["rq4"]["overall"]["yes_or_mostly"]["rate"] == 1.0
        ms = a["rq1"]["breaking"]["mean_slider"]
        assert ms["k1"]["mean"] <= ms["k4"]["mean"] <= ms["conformant"]["mean"]


def test_table11_in_the_report_and_the_cli(study, records, tmp_path, star_dir, capsys):
    from annotation.__main__ import main
    from dialfork_dataset.jsonl import read_jsonl, write_jsonl

    corpus = tmp_path / "corpus"
    write_jsonl(corpus / "weather.jsonl", records)
    db = str(study.engine.url)
    out = tmp_path / "judged"
    with serve_fake_judge() as url:
        rc = main(
            [
                "judge",
                "--db",
                db,
                "--out",
                str(out),
                "--model",
                "fake-judge",
                "--backend",
                "openai",
                "--base-url",
                url,
                "--corpus",
                str(corpus),
                "--star",
                str(star_dir),
                "--n-boot",
                "50",
                "--no-plots",
                "--folds",
                "3",
            ]
        )
    assert rc == 0 and "Table 11" in capsys.readouterr().out
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "## Table 11: the calibrated LLM judge next to the people" in report
    header = next(line for line in report.splitlines() if line.startswith("| | People"))
    assert (
        header
        == "| | People (this study) | LLM judge (fake-judge), study | LLM judge (fake-judge), all dialogues |"
    )
    onset = next(line for line in report.splitlines() if line.startswith("| Onset at t_k"))
    assert onset.endswith("| 100% / 100% | 100% / 100% |")
    res = json.loads((out / "analyses.json").read_text(encoding="utf-8"))
    assert res["llm_judge"]["calibration"]["method"] == "isotonic"
    # the judge judges each conversation the people judged once: 40 with the paper's types (4 people x 2
    # blocks x 5, no overlap); another type set can give two people the same conversation
    distinct = {r["dialogue_id"] for r in study.judgments()}
    assert res["llm_judge"]["study"]["counts"]["judgments"] == len(distinct) >= 35
    assert len(read_jsonl(out / "judge_all.jsonl")) == len(records)
    # without a judge the report keeps the people-only layout
    assert (
        main(["analyse", "--db", db, "--out", str(tmp_path / "plain"), "--n-boot", "50", "--no-plots"]) == 0
    )
    assert "| | People (this study) |" in (tmp_path / "plain" / "report.md").read_text(encoding="utf-8")


def test_judge_needs_people_first(tmp_path, records):
    from annotation.judge import run_judge

    st = Study(f"sqlite:///{tmp_path / 'empty.db'}", study_seed=1)
    st.import_records(records)
    with serve_fake_judge() as url:
        with pytest.raises(ValueError, match="no completed judgments"):
            run_judge(LLMJudge("m", backend="openai", base_url=url, workflows={"weather": "1. x"}), st)
        with pytest.raises(ValueError, match="calibration"):
            run_judge(LLMJudge("m", backend="openai", base_url=url), st, calibration="platt")
