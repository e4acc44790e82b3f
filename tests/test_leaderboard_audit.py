"""``leaderboard audit``: every attack is caught on a deliberately leaky layout; the fixed layout passes.

Template layouts (STAR, the public code) exercise the lookup, sibling, regeneration and pair-diffing
attacks as a cheater would run them; synthetic layouts (``hidden_factory``) exercise the
correlation attack and the passing case with LLM-like replay prefixes.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hidden_factory import llm_like_records

from dialfork_dataset.hidden import HiddenKey, write_key_file
from dialfork_dataset.hub import AuditFailed, export_hub_layout, load_blind
from leaderboard.leakcheck import (
    CEILING,
    DETECTOR_MARGIN,
    FINGERPRINTS,
    GRAMMAR,
    LENGTH,
    METRIC_TAU_MAX,
    NODE_PREFIX,
    common_prefix,
    pair_diff_distances,
    run_audit,
    sibling_predictions,
    system_prefix_keys,
)
from leaderboard.synthetic import write_blind_and_gold

ROOT = Path(__file__).resolve().parents[1]
KEY = bytes(range(1, 33))


def by_name(report, track):
    return {a.name.split(" (")[0]: a for a in report.attacks if a.track == track}


# ---- pure pieces -----------------------------------------------------------------------------


def test_prefix_keys_and_diffing_by_hand():
    def d(*texts):
        out = []
        for i, t in enumerate(texts):
            out += [{"speaker": "user", "text": f"u{i}"}, {"speaker": "system", "text": t}]
        return out

    ref, k3, k1 = d("a", "b", "c", "d"), d("a", "b", "X", "Y"), d("Z", "b", "c", "d")
    assert common_prefix(system_prefix_keys(ref), system_prefix_keys(k3)) == 2
    assert common_prefix(system_prefix_keys(ref), system_prefix_keys(k1)) == 0
    dist = pair_diff_distances(
        [
            {"pair_id": "p1", "reference": ref, "candidate": k3},
            {"pair_id": "p2", "reference": ref, "candidate": k1},
        ]
    )
    assert dist["shared prefix"] == {"p1": -2.0, "p2": -0.0}
    assert dist["identical turns"] == {"p1": -6.0, "p2": -7.0}  # k1 differs in one turn only
    # siblings: the medoid is called conformant, the others are flagged where they leave it
    blind = [
        {"dialogue_id": i, "turns": t, "num_system_turns": 4}
        for i, t in (("r", ref), ("f", k3), ("g", d("a", "Q", "c", "d")))
    ]
    assert sibling_predictions(blind) == {"r": None, "f": 3, "g": 2}


# ---- template layouts ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template_split(tmp_path_factory, star_dir):
    """A key file, the public corpus (seed 0) and the hidden corpus (secret seed) of one task."""
    from generation.cli import main

    root = tmp_path_factory.mktemp("audit")
    key = write_key_file(
        root / "key.json", HiddenKey(bytes(range(7, 39)), "0f" * 16, 0.3)
    )  # fixed: no flakes
    common = [
        "--star",
        str(star_dir),
        "--tasks",
        "weather",
        "--per-task",
        "20",
        "--no-progress",
        "--hidden-key",
        str(key),
    ]
    assert main([*common, "--out", str(root / "pub"), "--split", "public"]) == 0
    assert main([*common, "--out", str(root / "hid"), "--split", "hidden"]) == 0
    return root, key


def audit(hub, gold, star_dir, seeds=(0,)):
    return run_audit(hub, gold, star=star_dir, regen_seeds=seeds, regen_scenarios_per_task=40)


@pytest.fixture(scope="module")
def fixed_template(template_split, star_dir):
    root, key = template_split
    export_hub_layout(root / "pub", root / "fixed", root / "fixed-gold", hidden=root / "hid", key=key)
    return root / "fixed", root / "fixed-gold", audit(root / "fixed", root / "fixed-gold", star_dir)


def test_fixed_template_layout_detector_track_passes(fixed_template):
    _, _, rep = fixed_template
    det = by_name(rep, "detector")
    for name in ("verbatim lookup", "sibling grouping", "regeneration", "correlations"):
        assert det[name].status == "pass", (name, rep.format_text())
        assert det[name].margin <= DETECTOR_MARGIN
    assert "0/" in det["verbatim lookup"].detail and "0/" in det["regeneration"].detail
    met = by_name(rep, "metric")
    assert met["verbatim lookup"].status == met["regeneration"].status == met["correlations"].status == "pass"
    # replayed template prefixes are exact copies: pair diffing recovers the fork order (the
    # reason for the `reword` prefix mode); the audit must say so
    assert met["pair diffing"].status == "FAIL" and met["pair diffing"].value > METRIC_TAU_MAX
    assert any("template simulator" in n for n in rep.notes)


def _public_task3_test(hub: Path) -> list[dict]:
    return [
        r
        for f in sorted((hub / "data" / "task3").glob("test-*.parquet"))
        for r in pq.read_table(f).to_pylist()
    ]


def _leaky_copy(fixed_hub: Path, fixed_gold: Path, dest: Path, rows: list[dict]) -> tuple[Path, Path]:
    """A copy of the fixed layout whose blind sets are ALL of ``rows`` (every sibling) — the layout
    before the hidden split."""
    hub, gold = dest / "hub", dest / "gold"
    shutil.copytree(fixed_hub, hub)
    for cfg in ("blind", "blind_task2"):
        shutil.rmtree(hub / "data" / cfg)
    write_blind_and_gold(rows, hub, gold, key=KEY)
    return hub, gold


def test_all_rows_layout_is_caught_by_lookup_siblings_and_pair_diffing(fixed_template, tmp_path, star_dir):
    hub0, gold0, _ = fixed_template
    hub, gold = _leaky_copy(hub0, gold0, tmp_path, _public_task3_test(hub0))
    rep = audit(hub, gold, star_dir)
    det, met = by_name(rep, "detector"), by_name(rep, "metric")
    assert det["verbatim lookup"].status == "FAIL" and det["verbatim lookup"].value > 99
    assert met["verbatim lookup"].status == "FAIL" and met["verbatim lookup"].value == pytest.approx(1.0)
    assert det["sibling grouping"].status == "FAIL"
    assert det["regeneration"].status == "FAIL"  # the public corpus was made with seed 0
    assert met["pair diffing"].status == "FAIL" and not rep.ok


def test_hidden_siblings_are_caught_by_sibling_grouping(fixed_template, template_split, tmp_path, star_dir):
    from dialfork_dataset.builder import load_records

    root, _ = template_split
    hub0, gold0, _ = fixed_template
    hub, gold = _leaky_copy(hub0, gold0, tmp_path, load_records(root / "hid"))
    rep = audit(hub, gold, star_dir)
    det = by_name(rep, "detector")
    assert det["verbatim lookup"].status == "pass" and det["regeneration"].status == "pass"
    assert det["sibling grouping"].status == "FAIL" and det["sibling grouping"].margin > DETECTOR_MARGIN


def test_public_seed_hidden_set_is_caught_by_regeneration(template_split, tmp_path, star_dir):
    root, _ = template_split
    export_hub_layout(
        root / "pub",
        tmp_path / "hub",
        tmp_path / "gold",
        blind_key=KEY.hex(),
        hidden_fraction=0.8,
        metric_share=0.2,
    )  # 13 blind dialogues: enough for a significant margin
    rep = audit(tmp_path / "hub", tmp_path / "gold", star_dir, seeds=(0, 1))
    det, met = by_name(rep, "detector"), by_name(rep, "metric")
    assert det["verbatim lookup"].status == "pass" and det["sibling grouping"].status == "pass"
    assert det["regeneration"].status == "FAIL" and det["regeneration"].value > 99
    assert met["regeneration"].status == "FAIL"


def test_export_runs_the_audit_and_publishes_nothing_on_failure(template_split, tmp_path, star_dir):
    root, _ = template_split
    opts = {"star": star_dir, "regen_seeds": (0,), "regen_scenarios_per_task": 40}
    with pytest.raises(AuditFailed) as ei:
        export_hub_layout(
            root / "pub",
            tmp_path / "hub",
            tmp_path / "gold",
            blind_key=KEY.hex(),
            hidden_fraction=0.8,
            metric_share=0.2,
            audit=functools.partial(run_audit, **opts),
        )
    assert "regeneration" in ei.value.report.worst()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing published, no staging left


# ---- synthetic layouts -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixed_llm_like(tmp_path_factory):
    root = tmp_path_factory.mktemp("llm_like")
    pub = llm_like_records(tasks=("weather", "trivia"), per_task=8, seed=1)
    hid = llm_like_records(tasks=("weather", "trivia"), per_task=40, seed=2, prefix="h", reword=0.1)
    info = export_hub_layout(
        pub, root / "hub", root / "gold", hidden=hid, blind_key=KEY.hex(), audit=run_audit
    )
    return root, info


def test_fixed_layout_passes_every_attack(fixed_llm_like):
    root, info = fixed_llm_like
    assert info["audit"]["ok"]
    rep = json.loads((root / "gold" / "audit_report.json").read_text())
    assert rep["ok"] and {a["status"] for a in rep["attacks"]} == {"pass", "skipped", "reported"}
    skipped = [a for a in rep["attacks"] if a["status"] == "skipped"]
    # no STAR given: no regeneration, no phrasing table for the node grammar
    assert {a["name"] for a in skipped} == {"regeneration (public code, public seeds)", GRAMMAR}
    pair = next(a for a in rep["attacks"] if a["name"].startswith("pair diffing"))
    assert 0.3 < pair["value"] < METRIC_TAU_MAX  # a control, not an oracle (paper, LLM replay: 0.682)
    # the simulator-aware attacks find no template fingerprint and no template length in LLM-like text
    new = {
        (a["name"], a["track"]): a
        for a in rep["attacks"]
        if a["simulator_aware"] and a["status"] != "skipped"
    }
    assert {n for n, _ in new} == {FINGERPRINTS, LENGTH, NODE_PREFIX}
    assert all(a["status"] == "pass" and not a["waived"] for a in new.values())
    fp = new[(FINGERPRINTS, "detector")]
    assert "0/40 blind dialogues flagged" in fp["detail"] and fp["margin"] <= 0  # all called conformant
    # the public-data ceiling is reported on both tracks, never a verdict
    assert {a["track"] for a in rep["attacks"] if a["name"] == CEILING and a["status"] == "reported"} == {
        "detector",
        "metric",
    }
    assert new[(NODE_PREFIX, "metric")]["value"] < METRIC_TAU_MAX


def test_row_order_sorted_by_label_is_caught(fixed_llm_like, tmp_path):
    root, _ = fixed_llm_like
    hub = tmp_path / "hub"
    shutil.copytree(root / "hub", hub)
    from dialfork_dataset import load_gold

    gold = {g["dialogue_id"]: g for g in load_gold(root / "gold")["task3"]}
    blind = load_blind(hub)
    blind.sort(
        key=lambda b: (gold[b["dialogue_id"]]["fork_turn"] or 0) / b["num_system_turns"]
    )  # leaks the label
    f = next((hub / "data" / "blind").glob("*.parquet"))
    pq.write_table(pa.Table.from_pylist(blind, schema=pq.read_schema(f)), f)
    rep = run_audit(hub, root / "gold")
    corr = by_name(rep, "detector")["correlations"]
    assert corr.status == "FAIL" and "row order" in corr.detail
    assert by_name(rep, "detector")["verbatim lookup"].status == "pass"


def test_audit_cli(fixed_llm_like, tmp_path):
    from leaderboard.synthetic import write_metadata, write_predictions

    root, _ = fixed_llm_like
    write_predictions({b["dialogue_id"]: None for b in load_blind(root / "hub")}, tmp_path / "silent.jsonl")
    write_metadata(tmp_path / "silent.metadata.json", method="never alarms")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "leaderboard",
            "audit",
            str(root / "hub"),
            "--gold",
            str(root / "gold"),
            "--regen-seeds",
            "0",
            "--out",
            str(tmp_path / "a.json"),
            "--honest",
            str(tmp_path / "silent.jsonl"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    for w in (
        "verbatim lookup",
        "sibling grouping",
        "regeneration",
        "pair diffing",
        "correlations",
        "Random",
        "first",
        "last",
        "verdict: PASS",
        "simulator fingerprints",
        "length rule",
        "node-level shared prefix",
        "public-data ceiling",
        "honest detector: never alarms",
    ):
        assert w in r.stdout
    rep = json.loads((tmp_path / "a.json").read_text())
    assert [h["name"] for h in rep["honest"]] == ["honest detector: never alarms"] and rep[
        "verdict"
    ].startswith("PASS")
    assert "plumbing only" not in rep["verdict"]  # an LLM-like hidden set: no plain-words warning
    r = subprocess.run(
        [sys.executable, "-m", "leaderboard", "audit", str(tmp_path), "--gold", str(root / "gold")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    # a folder that is no layout at all is named as such before anything is read (issue 31)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: HUB {tmp_path}: not a DialFork corpus (no data/ folder" in r.stderr
