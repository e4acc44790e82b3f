"""Generated D+ are checked (issue 39, item 5): the engine records each D+'s step coverage and
off-workflow turns in it, its forks and the manifest; the export flags and counts them in the card;
``--require-conformant`` drops them; bad checks and bad results are named."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dialfork_dataset.jsonl import read_jsonl
from dialfork_dataset.records import CONFORMANCE_FIELDS, conformance_errors, record_errors
from dialfork_dataset.taxonomy import forks_per_source
from generation import conformance as gc
from generation.engine import GenerationConfig, GenerationError, generate_corpus
from generation.options import build_parser, conformance_check

TASKS = ("weather", "bank_balance")
GOOD = {
    "check": "t",
    "conformant": True,
    "coverage": 0.5,
    "skipped": ["ask_city"],
    "off_workflow": [],
    "unfamiliar": [2],
    "reached_outcome": True,
}


def _records(out: Path) -> list[dict]:
    return [r for f in sorted(out.glob("*.jsonl")) for r in read_jsonl(f)]


class FlagFirst:
    """A toy check: the first D+ it sees (in the whole run) is flagged, with its 2nd turn off-workflow."""

    name = "flag-first"

    def fit(self, source, tasks=None):
        self.seen = 0
        return self

    def check_many(self, dialogues):
        out = []
        for _ in dialogues:
            self.seen += 1
            first = self.seen == 1
            out.append(
                {
                    **GOOD,
                    "check": self.name,
                    "conformant": not first,
                    "coverage": 1.0,
                    "skipped": [],
                    "off_workflow": [2] if first else [],
                    "unfamiliar": [],
                    "extra": "dropped",
                }
            )
        return out


class Malformed(FlagFirst):
    name = "malformed"

    def check_many(self, dialogues):
        return [{**GOOD, "coverage": 3.0, "off_workflow": [999]} for _ in dialogues]


@pytest.fixture
def toy_checks(monkeypatch):
    eps = {
        c.name: SimpleNamespace(name=c.name, value=f"tests:{c.__name__}", load=lambda c=c: c)
        for c in (FlagFirst, Malformed)
    }
    monkeypatch.setattr(gc, "_entry_points", lambda: eps)
    return eps


# ----------------------------------------------------------------------------- the record field
def test_conformance_values_are_validated_with_the_key_named():
    assert conformance_errors(GOOD) == []
    assert conformance_errors(GOOD, num_system_turns=1) == [
        "unfamiliar: turn numbers must be integers in 1..1, got [2]"
    ]
    errs = conformance_errors({**GOOD, "coverage": 1.5, "conformant": "yes", "surprise": 1})
    assert any(e.startswith("coverage:") for e in errs) and any(e.startswith("conformant:") for e in errs)
    assert any("unknown field(s) ['surprise']" in e for e in errs)
    assert conformance_errors("x") == [
        f"conformance: must be an object with {', '.join(CONFORMANCE_FIELDS)}, got 'x'"
    ]
    missing = {k: v for k, v in GOOD.items() if k != "skipped"}
    assert conformance_errors(missing) == ["conformance: missing skipped"]


def test_a_record_with_a_bad_check_result_is_invalid(tmp_path, star_dir):
    out = tmp_path / "c"
    generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(out), tasks=("weather",), per_task=1), progress=False
    )
    rec = _records(out)[0]
    assert rec["conformance"] is None and record_errors(rec) == []
    assert record_errors({**rec, "conformance": {**GOOD, "off_workflow": [0]}}) == [
        f"conformance.off_workflow: turn numbers must be integers in 1..{rec['num_system_turns']}, got [0]"
    ]


# ----------------------------------------------------------------------------- the engine
def test_the_engine_writes_each_check_into_d_plus_its_forks_and_the_manifest(tmp_path, star_dir, toy_checks):
    out = tmp_path / "c"
    cfg = GenerationConfig(
        star=str(star_dir), out=str(out), tasks=TASKS, per_task=2, check_conformance="flag-first"
    )
    m = generate_corpus(cfg, progress=False)
    recs = _records(out)
    heads = [r for r in recs if r["hallucination_type"] is None]
    flagged = [r["dialogue_id"] for r in heads if not r["conformance"]["conformant"]]
    assert len(flagged) == 1 and all(r["conformance"]["check"] == "flag-first" for r in recs)
    assert all("extra" not in r["conformance"] for r in recs)  # only the record's keys are kept
    for r in recs:  # every fork carries its source's result
        src = next(h for h in heads if h["dialogue_id"] == r["source_id"])
        assert r["conformance"] == src["conformance"]
    total = m.counts["total"]["conformance"]
    assert total == {
        "checked": 4,
        "flagged": 1,
        "flagged_forks": forks_per_source(),
    }  # the flagged D+'s forks
    task = next(t for t, c in m.counts["per_task"].items() if c["conformance"]["flagged"])
    assert m.counts["per_task"][task]["conformance"]["flagged_ids"] == flagged
    assert m["config"]["check_conformance"] == "flag-first"


def test_unchecked_corpora_keep_their_manifest_config(tmp_path, star_dir):
    m = generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(tmp_path / "c"), tasks=("weather",), per_task=1),
        progress=False,
    )
    assert "check_conformance" not in m["config"] and "conformance" not in m.counts["total"]


def test_an_unknown_check_fails_before_any_generation(tmp_path, star_dir, toy_checks):
    out = tmp_path / "c"
    with pytest.raises(
        GenerationError, match=r"no-such: no such check is installed \(installed: flag-first, malformed\)"
    ):
        generate_corpus(
            GenerationConfig(
                star=str(star_dir), out=str(out), tasks=("weather",), per_task=1, check_conformance="no-such"
            ),
            progress=False,
        )
    assert not out.exists()


def test_a_malformed_check_result_names_the_dialogue_and_the_keys(tmp_path, star_dir, toy_checks):
    with pytest.raises(GenerationError) as e:
        generate_corpus(
            GenerationConfig(
                star=str(star_dir),
                out=str(tmp_path / "c"),
                tasks=("weather",),
                per_task=1,
                check_conformance="malformed",
            ),
            progress=False,
        )
    msg = str(e.value)
    assert "malformed" in msg and "weather" in msg and "coverage:" in msg and "off_workflow:" in msg


def test_the_command_line_checks_llm_backends_by_default():
    p = build_parser()
    common = ["--out", "o"]
    assert conformance_check(p.parse_args(common)) is None  # template: conformant by construction
    assert conformance_check(p.parse_args([*common, "--backend", "openai"])) == gc.DEFAULT_CHECK
    assert conformance_check(p.parse_args([*common, "--backend", "openai", "--no-check-conformance"])) is None
    assert conformance_check(p.parse_args([*common, "--check-conformance"])) == gc.DEFAULT_CHECK
    assert conformance_check(p.parse_args([*common, "--check-conformance", "mine"])) == "mine"
    with pytest.raises(SystemExit):
        p.parse_args([*common, "--check-conformance", "--no-check-conformance"])


def test_the_toolkit_registers_its_check():
    assert gc.DEFAULT_CHECK in gc.available_checks()
    from dialfork_metrics.task3.workflow.conformance import WorkflowConformance

    assert gc.load_check(gc.DEFAULT_CHECK) is WorkflowConformance


# ----------------------------------------------------------------------------- the export
@pytest.fixture
def checked(tmp_path, star_dir, toy_checks):
    out = tmp_path / "checked"
    generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(out), tasks=TASKS, per_task=3, check_conformance="flag-first"
        ),
        progress=False,
    )
    return out


def test_the_export_flags_and_counts_them_in_the_card(tmp_path, checked):
    from dialfork_dataset.hub import export_hub_layout

    info = export_hub_layout(checked, tmp_path / "hub", blind_key="ab" * 32, hidden_fraction=0.3)
    assert info["conformance"]["checked"] == 6 and info["conformance"]["flagged"] == 1
    assert info["conformance"]["flagged_forks"] == forks_per_source() and info["conformance"]["dropped"] == 0
    card = (tmp_path / "hub" / "README.md").read_text()
    assert (
        "Conformance check of D+ (`flag-first`): 6 of 6" in card and "1 did not follow their workflow" in card
    )
    assert "`--require-conformant` drops them" in card


def test_require_conformant_drops_flagged_sources_with_their_forks(tmp_path, checked):
    from dialfork_dataset.hub import export_hub_layout, load_split

    recs = _records(checked)
    bad = next(
        r["dialogue_id"]
        for r in recs
        if r["hallucination_type"] is None and not r["conformance"]["conformant"]
    )
    info = export_hub_layout(
        checked, tmp_path / "hub", blind_key="ab" * 32, hidden_fraction=0.3, require_conformant=True
    )
    assert info["conformance"]["flagged"] == 0 and info["conformance"]["dropped"] == 1
    rows = [
        r
        for cfg in ("conformant", "forked")
        for s in ("train", "test")
        for r in load_split(tmp_path / "hub", cfg, s)
    ]
    assert rows and not [r for r in rows if r["source_id"] == bad]
    assert all(r["conformance"]["conformant"] for r in rows)
    assert "1 D+ removed" in (tmp_path / "hub" / "README.md").read_text()


def test_require_conformant_refuses_an_unchecked_corpus(tmp_path, star_dir):
    from dialfork_dataset.hub import export_hub_layout

    out = tmp_path / "plain"
    generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(out), tasks=TASKS, per_task=2), progress=False
    )
    with pytest.raises(ValueError, match=r"carry no conformance check .*--check-conformance"):
        export_hub_layout(out, tmp_path / "hub", blind_key="ab" * 32, require_conformant=True)
    card_info = export_hub_layout(out, tmp_path / "hub2", blind_key="ab" * 32, hidden_fraction=0.3)
    assert card_info["conformance"]["checked"] == 0
    assert "Conformance check of D+: none" in (tmp_path / "hub2" / "README.md").read_text()


# ----------------------------------------------------------------------------- the toolkit's check
@pytest.fixture(scope="module")
def real(tmp_path_factory, star_dir):
    """Template D+ checked with workflow-nodes (the packaged MiniLM), and the check itself."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.task3.workflow.conformance import WorkflowConformance

    out = tmp_path_factory.mktemp("real") / "c"
    generate_corpus(
        GenerationConfig(
            star=str(star_dir), out=str(out), tasks=TASKS, per_task=2, check_conformance=gc.DEFAULT_CHECK
        ),
        progress=False,
    )
    return _records(out), WorkflowConformance().fit(StarCorpus(star_dir), list(TASKS))


def test_template_d_plus_pass_and_a_wic_fork_does_not(real):
    recs, check = real
    heads = [r for r in recs if r["hallucination_type"] is None]
    assert heads and all(
        r["conformance"]["conformant"] and not r["conformance"]["off_workflow"] for r in heads
    )
    assert all(r["conformance"]["coverage"] >= 0.5 for r in heads)
    # a WIC fork k=1 runs another task's workflow from its first system turn: the check flags it there
    wic = [r for r in recs if r["hallucination_type"] == "WIC" and r["fork_position"] == 1]
    res = check.check_many(
        [(r["task"], [t["text"] for t in r["turns"] if t["speaker"] == "system"]) for r in wic]
    )
    assert sum(not x["conformant"] for x in res) >= len(wic) - 1
    for r, x in zip(wic, res):
        assert all(t >= r["fork_turn"] for t in x["off_workflow"])


def test_the_check_rejects_another_workflows_turns_and_counts_skipped_steps(real):
    _, check = real
    x = check.check(
        "weather",
        [
            "Hello, how can I help you?",
            "Could you tell me your account PIN, please?",
            "What is your account number?",
        ],
    )
    assert x["off_workflow"] and not x["conformant"] and x["coverage"] < 0.5 and x["skipped"]
    with pytest.raises(KeyError, match="hotel_book"):
        check.check("hotel_book", ["Hi"])


def test_the_check_reads_with_the_step_reader_when_asked(real, star_dir):
    """``step_reader="auto"``: the shipped step reader picks the steps (the packaged MiniLM is its
    encoder); the template D+ still pass and another workflow's turn is still rejected."""
    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.task3.workflow.conformance import WorkflowConformance

    recs, plain = real
    check = WorkflowConformance(step_reader="auto").fit(StarCorpus(star_dir), list(TASKS))
    assert check.assigner_.reader_ is not None and plain.assigner_.reader_ is None
    heads = [r for r in recs if r["hallucination_type"] is None]
    res = check.check_many(
        [(r["task"], [t["text"] for t in r["turns"] if t["speaker"] == "system"]) for r in heads]
    )
    assert all(x["conformant"] for x in res)
    x = check.check("weather", ["Hello, how can I help you?", "Could you tell me your account PIN, please?"])
    assert x["off_workflow"] == [2] and not x["conformant"]


def test_the_check_validates_its_parameters():
    from dialfork_metrics.task3.workflow.conformance import WorkflowConformance

    with pytest.raises(
        ValueError, match=r"min_coverage must be a number in \[0, 1\].*max_off_workflow must be"
    ):
        WorkflowConformance(min_coverage=2, max_off_workflow=-1)._check_params()
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        WorkflowConformance().check("weather", ["Hi"])


def test_check_results_are_json_round_trips(real):
    recs, _ = real
    for r in recs[:3]:
        assert json.loads(json.dumps(r["conformance"])) == r["conformance"]


def test_an_llm_backend_is_checked_by_default_and_its_babble_flagged(tmp_path, star_dir):
    """``python -m generation --backend transformers`` with a tiny random model (no download): the
    CLI checks D+ by default; one-token babble follows no workflow, so every D+ is flagged."""
    from test_gen_hf import tiny_corpus_model

    from generation.cli import main

    model = tiny_corpus_model(tmp_path / "m", star_dir)
    out = tmp_path / "llm"
    rc = main(
        [
            "--backend",
            "transformers",
            "--model",
            model,
            "--backend-option",
            "max_new_tokens=1",
            "--star",
            str(star_dir),
            "--out",
            str(out),
            "--tasks",
            "weather",
            "--per-task",
            "1",
            "--budget",
            "8",
            "--no-progress",
            "--quiet",
        ]
    )
    assert rc == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["check_conformance"] == gc.DEFAULT_CHECK
    heads = [r for r in _records(out) if r["hallucination_type"] is None]
    assert heads and all(r["conformance"]["check"] == gc.DEFAULT_CHECK for r in heads)
    assert all(not r["conformance"]["conformant"] for r in heads)
    assert manifest["counts"]["total"]["conformance"]["flagged"] == len(heads)


def test_leaderboard_export_require_conformant_on_an_unchecked_corpus_says_how_to_check(
    tmp_path, star_dir, capsys
):
    from leaderboard.__main__ import main

    out = tmp_path / "plain"
    generate_corpus(
        GenerationConfig(star=str(star_dir), out=str(out), tasks=TASKS, per_task=2), progress=False
    )
    rc = main(
        [
            "export",
            str(out),
            str(tmp_path / "hub"),
            "--blind-key",
            "ab" * 32,
            "--no-audit",
            "--require-conformant",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--require-conformant" in err and "--check-conformance" in err
    assert not (tmp_path / "hub").exists()
