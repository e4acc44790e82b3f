"""The simulator-aware and public-data attacks of the audit (issue 33).

Pure pieces are checked by hand; then a template release (public corpus + hidden corpus made with
the secret seed, two tasks) must be caught by every simulator-aware attack, the public-data ceiling
is reported, never failed, and a plumbing-only export publishes the verdict in its card and on the
leaderboard page. The LLM-side check (each attack must pass on an LLM-generated hidden set) is
``assert_simulator_attacks(audit_corpora(public, llm_hidden, ...), caught=False)``: see
:func:`assert_simulator_attacks` and ``docs/hidden_split.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hidden_factory import llm_like_records

from dialfork_dataset.hidden import HiddenKey, write_key_file
from leaderboard.leakcheck import (
    ALPHA,
    CEILING,
    DETECTOR_MARGIN,
    FINGERPRINTS,
    GRAMMAR,
    LENGTH,
    METRIC_TAU_MAX,
    NODE_PREFIX,
    PLUMBING_ONLY_TEXT,
    audit_corpora,
    honest_results,
)
from leaderboard.leakcheck.learned import (
    VectorScorer,
    cluster_texts,
    length_rule,
    modal_lengths,
    node_prefix_distances,
)
from leaderboard.leakcheck.scoring import _Detector
from leaderboard.leakcheck.simulator import (
    Fingerprinter,
    NodeGrammar,
    PhrasingTable,
    PublicPools,
    template_regex,
)

TOY = {
    "weather": {
        "hello": ["Hello, how can I help?"],
        "ask_city": ["Which city?", "For which town, {name}?"],
        "inform": ["It will be {weather} in {city}."],
        "out_of_scope": ["Sorry, I don't understand."],
        "inform_outcome": ["{message}"],
        "bye": ["Goodbye."],
    },
    "bank": {"hello": ["Hello, how can I help?"], "ask_pin": ["What is your PIN?"], "bye": ["Goodbye."]},
}


def dlg(*pairs):
    """Turns from (user, system) pairs."""
    return [t for u, s in pairs for t in ({"speaker": "user", "text": u}, {"speaker": "system", "text": s})]


# ---- pure pieces -----------------------------------------------------------------------------


def test_phrasing_table_maps_turns_to_nodes():
    import re

    assert re.fullmatch(template_regex("It will be {weather:s} in {city}."), "It will be sunny in New  York.")
    t = PhrasingTable(TOY, reword_markers=["Alright."])
    assert t.node("For which town, Sam?", "weather") == "ask_city"
    assert t.node("Alright. Which city?", "weather") == "ask_city"  # a reword marker in front
    assert (
        t.node("Sorry, I don't understand. Which city?", "weather") == "out_of_scope"
    )  # off-topic reply + question
    assert t.node("anything at all", "weather") is None  # a bare {message} names no node
    assert (
        t.node("What is your PIN?", "weather") is None
        and t.other_task("What is your PIN?", "weather") == "bank"
    )
    assert t.other_task("Hello, how can I help?", "weather") is None  # shared with its own task
    assert t.guess_task(["Hello, how can I help?", "What is your PIN?"]) == "bank"
    assert t.guess_task(["Hello, how can I help?", "What is your PIN?"], candidates=["weather"]) == "weather"
    assert t.guess_task(["no phrasing of any task"]) is None


def test_public_pools_are_pruned_by_conformant_turns():
    coliving = "Want to try co-living instead? It's a great way to meet people and save money."
    full = PublicPools.load()
    assert full.is_line(coliving) and full.is_line("Just to confirm, your name is Sam?")
    assert (
        full.bridge_rest("Alright, I'll now help you with bank balance. What is your PIN?")
        == "What is your PIN?"
    )
    assert full.is_reaction("I already told you: Paris.") and full.is_reaction("No thanks.")
    assert not full.is_reaction("Paris.")  # a bare "{v}" is no reaction
    pruned = PublicPools.load(conformant_system=[coliving], conformant_user=["No thanks."])
    assert not pruned.is_line(coliving) and not pruned.is_reaction("No thanks.") and pruned.pruned >= 2
    assert pruned.is_reaction("I already told you: Paris.")


def test_fingerprints_and_grammar_by_hand():
    table = PhrasingTable(TOY)
    conf = dlg(
        ("Hi", "Hello, how can I help?"),
        ("weather", "Which city?"),
        ("Paris", "It will be sunny in Paris."),
        ("thanks", "Goodbye."),
    )
    fp = Fingerprinter(PublicPools.load(), table, {"Hello, how can I help?"}, {"weather": {"Which city?"}})
    assert fp.first_turn(conf, "weather") is None
    gr = dlg(
        ("Hi", "Hello, how can I help?"),
        ("weather", "Have you thought about our monthly membership? It would cover this and much more."),
        ("no", "Goodbye."),
    )
    assert fp.first_turn(gr, "weather") == (2, "variant line")
    sorry = dlg(("Hi", "Hello, how can I help?"), ("weather", "Sorry, which city?"))
    assert fp.first_turn(sorry, "weather") == (2, "forced-difference fallback")
    wic = dlg(("Hi", "Hello, how can I help?"), ("weather", "What is your PIN?"))
    assert fp.first_turn(wic, "weather") == (2, "another task's phrasing")
    react = dlg(("Hi", "Which city?"), ("I already told you: Paris.", "It will be sunny in Paris."))
    assert fp.first_turn(react, "weather") == (1, "user reaction")

    g = NodeGrammar(table).fit(
        [
            ("weather", conf, None),
            ("weather", dlg(("x", "Hello, how can I help?"), ("y", "Custom greeting turn.")), 1),
        ]
    )
    assert g.first_violation(conf, "weather") is None
    reverse = dlg(("Hi", "Hello, how can I help?"), ("w", "It will be rainy in Rome."), ("?", "Which city?"))
    assert g.first_violation(reverse, "weather") == 2  # hello -> inform was never seen
    chat = dlg(
        ("Hi", "Hello, how can I help?"),
        ("w", "Sorry, I don't understand. Which city?"),
        ("w", "Which city?"),
        ("Rome", "It will be rainy in Rome."),
    )
    assert g.first_violation(chat, "weather") is None  # the off-topic reply is transparent
    # a conformant turn past the fork prefix (upto=1) is not learnt; an unparsed one is flagged
    assert (
        g.first_violation(dlg(("x", "Hello, how can I help?"), ("y", "Custom greeting turn.")), "weather")
        == 2
    )
    assert g.first_violation(conf, "unseen_task") == 1


def test_vector_scorer_and_matched_random_match_the_official_scorer():
    from dialfork_metrics.task3.scorer import score_predictions

    gold = [
        {k: r[k] for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for r in llm_like_records(per_task=3, seed=5)
    ]
    rng = np.random.default_rng(0)
    det = _Detector(gold, draws=20, seed=3)
    for _ in range(5):
        preds = {
            g["dialogue_id"]: (
                None if rng.random() < 0.3 else int(rng.integers(1, g["num_system_turns"] + 1))
            )
            for g in gold
        }
        assert det.score(preds) == pytest.approx(score_predictions(preds, gold)["score"], abs=1e-9)
        assert VectorScorer(gold).score_dict(preds) == pytest.approx(det.score(preds), abs=1e-12)
    # matched Random: the known predictions dealt to random dialogues, as the loop over dicts did
    known = {g["dialogue_id"]: (None if i % 3 == 0 else 1 + i % 4) for i, g in enumerate(gold[:12])}
    ref_rng = np.random.default_rng(3 + 7)
    T = det.T
    rel = [None if v is None else (v - 1) / max(int(T[det.ids.index(i)]) - 1, 1) for i, v in known.items()]
    expected = []
    for d in det.draws:
        p = dict(zip(det.ids, map(int, d)))
        for j, x in zip(ref_rng.choice(len(det.ids), size=len(rel), replace=False), rel):
            p[det.ids[j]] = None if x is None else int(np.clip(round(1 + x * (int(T[j]) - 1)), 1, int(T[j])))
        expected.append(score_predictions(p, gold)["score"])
    assert det.matched(known) == pytest.approx(np.array(expected), abs=1e-9)
    # honest predictions are checked before they are scored
    with pytest.raises(ValueError, match="not a blind dialogue"):
        honest_results({"x": {"nope": 1}}, det)
    with pytest.raises(ValueError, match="outside 1..T"):
        honest_results({"x": {gold[0]["dialogue_id"]: 99}}, det)


def test_length_rule_and_node_clusters_by_hand():
    conf = [
        {"dialogue_id": f"c{i}", "task": "t", "num_system_turns": 6, "hallucination_type": None}
        for i in range(6)
    ]
    conf.append({"dialogue_id": "c9", "task": "t", "num_system_turns": 7, "hallucination_type": None})
    forks = [
        {
            "dialogue_id": f"f{i}",
            "task": "t",
            "num_system_turns": 9,
            "hallucination_type": "GR",
            "fork_turn": 2,
        }
        for i in range(6)
    ]
    assert modal_lengths(conf) == {"t": 6}
    predict, desc = length_rule(conf + forks, ["t"] * 13, {"t": 6})
    preds = predict(
        [{"dialogue_id": "a", "num_system_turns": 6}, {"dialogue_id": "b", "num_system_turns": 10}],
        ["t", "t"],
    )
    assert preds["a"] is None and preds["b"] == 2 and "called conformant" in desc  # the fork turn, learnt
    texts = [
        "It will be sunny in Paris on Monday.",
        "It will be sunny in Rome on Monday.",
        "What is your PIN?",
        "What's your PIN, please?",
    ]
    tight, loose = cluster_texts(texts, thresholds=(0.3, 0.7))
    assert tight[0] == tight[1] and len({tight[0], tight[2], tight[3]}) == 3  # one tree, two cuts
    assert loose[0] == loose[1] and loose[2] == loose[3] and loose[0] != loose[2]
    ref = dlg(("a", "Hello, how can I help?"), ("b", "Which city?"), ("c", "It will be sunny in Paris."))
    far = dlg(
        ("a", "Hello, how can I help?"), ("b", "What is your PIN?"), ("c", "It will be sunny in Paris.")
    )
    near = dlg(("a", "Hello, how can I help?"), ("b", "For which town, Sam?"), ("c", "Goodbye."))
    d, why = node_prefix_distances(
        [
            {"pair_id": "p1", "reference": ref, "candidate": far},
            {"pair_id": "p2", "reference": ref, "candidate": near},
        ],
        ["weather"] * 2,
        PhrasingTable(TOY),
    )
    assert (
        d == {"p1": -1.0, "p2": -2.0} and "0.5" in why
    )  # another phrasing of the same node keeps the prefix


# ---- a template release ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def template_release(tmp_path_factory, star_dir):
    """Public (20 scenarios per task) and hidden (60 per task, secret seed) template corpora of two
    tasks with reworded prefixes, and the audit of the release they make (96 blind dialogues: a
    length rule's margin is significant; 384 pairs)."""
    from generation.cli import main

    root = tmp_path_factory.mktemp("cheater")
    key = write_key_file(root / "key.json", HiddenKey(bytes(range(7, 39)), "0f" * 16, 0.3))
    common = [
        "--star",
        str(star_dir),
        "--tasks",
        "weather,doctor_schedule",
        "--no-progress",
        "--hidden-key",
        str(key),
        "--prefix-mode",
        "reword",
    ]
    assert main([*common, "--per-task", "20", "--out", str(root / "pub"), "--split", "public"]) == 0
    assert main([*common, "--per-task", "60", "--out", str(root / "hid"), "--split", "hidden"]) == 0
    from dialfork_dataset.hub import export_hub_layout

    export_hub_layout(
        root / "pub", root / "hub", root / "gold", hidden=root / "hid", key=key, metric_share=0.2
    )
    from leaderboard.leakcheck import run_audit

    report = run_audit(
        root / "hub", root / "gold", star=star_dir, regen_seeds=(0,), regen_scenarios_per_task=20
    )
    return root, key, report


def by(report):
    return {(a.name, a.track): a for a in report.attacks}


#: The simulator-aware attacks and tracks that must catch a template hidden set and must not catch
#: an LLM-generated one (issue 33, item 3).
SIMULATOR_AWARE = (
    (FINGERPRINTS, "detector"),
    (GRAMMAR, "detector"),
    (LENGTH, "detector"),
    (GRAMMAR, "metric"),
    (NODE_PREFIX, "metric"),
)


def assert_simulator_attacks(report, caught: bool) -> None:
    """Every attack of :data:`SIMULATOR_AWARE` fails ``report`` (``caught``) or passes it.

    For the LLM side: ``assert_simulator_attacks(audit_corpora(public, llm_hidden, key=KEY,
    star=STAR, regen_seeds=(0,)), caught=False)``.
    """
    a = by(report)
    for key in SIMULATOR_AWARE:
        r = a[key]
        assert r.simulator_aware and not r.waived, key
        assert (r.status == "FAIL") == caught, (key, report.format_text())
        if caught and r.track == "detector":
            assert r.margin > DETECTOR_MARGIN and r.p_value < ALPHA
        if caught and r.track == "metric":
            assert r.value > METRIC_TAU_MAX


def test_every_simulator_aware_attack_is_caught_on_a_template_hidden_set(template_release):
    _, _, rep = template_release
    a = by(rep)
    assert rep.counts["blind"] >= 90 and rep.counts["pairs"] >= 300
    assert_simulator_attacks(rep, caught=True)
    assert a[(FINGERPRINTS, "detector")].value > 90 and a[(GRAMMAR, "detector")].value > 95
    assert a[(GRAMMAR, "metric")].value > 0.95 and a[(NODE_PREFIX, "metric")].value > 0.95
    # the fingerprints alone on the candidates: far above Random, near the bar (0.78-0.9 on template sets)
    assert a[(FINGERPRINTS, "metric")].value > 0.6
    # the older attacks are not fooled by the reworded prefixes and the secret seed
    assert all(x.status != "FAIL" for x in rep.attacks if not x.simulator_aware)
    assert not rep.ok and "simulator fingerprints" in rep.worst() and PLUMBING_ONLY_TEXT in rep.verdict()


def test_public_data_ceiling_is_reported_not_failed(template_release):
    _, _, rep = template_release
    c = by(rep)[(CEILING, "detector")]
    assert c.status == "reported" and not c.simulator_aware
    assert c.value > c.control + DETECTOR_MARGIN  # the public labelled configs teach the template's tells
    assert rep.ceiling() is c and by(rep)[(CEILING, "metric")].status == "reported"
    assert "public-data ceiling (reported, not a verdict)" in rep.format_text()


def test_attacks_run_on_given_corpora_and_honest_detectors_are_scored_beside(template_release, star_dir):
    """The entry point for an LLM hidden set: audit_corpora(public, hidden, key=..., star=...)."""
    root, key, rep = template_release
    from dialfork_dataset.hub import load_gold

    gold = {g["dialogue_id"]: g for g in load_gold(root / "gold")["task3"]}
    honest = {"oracle": {i: g["fork_turn"] for i, g in gold.items()}, "silent": {i: None for i in gold}}
    rep2 = audit_corpora(
        root / "pub",
        root / "hid",
        key=key,
        export_options={"metric_share": 0.2},
        star=star_dir,
        regen_seeds=(),
        honest=honest,
        workdir=root / "again",
    )
    a2 = by(rep2)
    assert a2[(FINGERPRINTS, "detector")].status == a2[(GRAMMAR, "detector")].status == "FAIL"  # same release
    assert (
        a2[(FINGERPRINTS, "detector")].detail.split(";")[0]
        == by(rep)[(FINGERPRINTS, "detector")].detail.split(";")[0]
    )
    h = {x.name: x for x in rep2.honest}
    assert (
        h["honest detector: oracle"].value == pytest.approx(100.0)
        and h["honest detector: oracle"].status == "reported"
    )
    assert (
        rep2.best_honest().name == "honest detector: oracle"
        and rep2.to_dict()["honest"][0]["status"] == "reported"
    )


def test_plumbing_only_export_waives_and_publishes_the_verdict(template_release, star_dir, tmp_path):
    from leaderboard.__main__ import main as dataset_main
    from leaderboard.render import render_html

    root, key, _ = template_release
    args = [
        "export",
        str(root / "pub"),
        str(tmp_path / "hub"),
        "--hidden",
        str(root / "hid"),
        "--key-file",
        str(key),
        "--gold-dir",
        str(tmp_path / "gold"),
        "--star",
        str(star_dir),
        "--regen-seeds",
        "0",
    ]
    assert dataset_main([*args, "--plumbing-only"]) == 0
    rep = json.loads((tmp_path / "gold" / "audit_report.json").read_text())
    assert rep["ok"] and rep["plumbing_only"] and rep["verdict"].startswith("PASS FOR PLUMBING ONLY")
    waived = {a["name"] for a in rep["attacks"] if a["waived"]}
    assert {FINGERPRINTS, GRAMMAR, NODE_PREFIX} <= waived
    assert waived == {a["name"] for a in rep["attacks"] if a["status"] == "FAIL"}
    assert all(a["simulator_aware"] for a in rep["attacks"] if a["waived"])
    card = (tmp_path / "hub" / "README.md").read_text()
    assert "## Leaderboard audit" in card and card.index("## Leaderboard audit") < card.index(
        "## How it was made"
    )
    assert (
        PLUMBING_ONLY_TEXT in card
        and "FAIL (waived: plumbing only)" in card
        and "| simulator fingerprints" in card
    )
    assert "Public-data ceiling" in card
    from dialfork_dataset.hub import read_card_gold_revision

    assert read_card_gold_revision(tmp_path / "hub")  # the YAML header survives the new section
    page = render_html([], audit=rep)
    assert 'class="audit plumbing"' in page and "its scores do not rank detectors" in page
    assert "simulator fingerprints (public pools)" in page and "Public-data ceiling" in page
    from leaderboard import LocalStore
    from leaderboard.app import LeaderboardApp

    app = LeaderboardApp(
        blind_dir=str(tmp_path / "hub"),
        gold_dir=str(tmp_path / "gold"),
        store=LocalStore(tmp_path / "store"),
        require_login=False,
    )
    assert (
        app.audit_report() == rep and 'class="audit plumbing"' in app.handle_refresh()
    )  # the Space's page too


def test_export_without_plumbing_only_fails_and_says_why(template_release, star_dir, tmp_path, capsys):
    from leaderboard.__main__ import main as dataset_main

    root, key, _ = template_release
    assert (
        dataset_main(
            [
                "export",
                str(root / "pub"),
                str(tmp_path / "hub"),
                "--hidden",
                str(root / "hid"),
                "--key-file",
                str(key),
                "--gold-dir",
                str(tmp_path / "gold"),
                "--regen-seeds",
                "0",
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "simulator fingerprints" in err and "--plumbing-only" in err
    assert not (tmp_path / "hub").exists()


def test_render_cli_shows_the_audit(tmp_path):
    from leaderboard.__main__ import main

    rep = {
        "ok": False,
        "verdict": "FAIL: x <b>",
        "attacks": [
            {
                "name": "a<script>",
                "track": "detector",
                "value": 99.0,
                "matched_random": 20.0,
                "status": "FAIL",
            }
        ],
        "thresholds": {"detector_margin": 5, "metric_tau_max": 0.8},
    }
    (tmp_path / "a.json").write_text(json.dumps(rep))
    (tmp_path / "store").mkdir()
    assert (
        main(
            [
                "render",
                "--results",
                str(tmp_path / "store"),
                "--out",
                str(tmp_path / "site"),
                "--audit",
                str(tmp_path / "a.json"),
            ]
        )
        == 0
    )
    page = (tmp_path / "site" / "index.html").read_text()
    assert 'class="audit fail"' in page and "a&lt;script&gt;" in page and "FAIL: x &lt;b&gt;" in page
    assert (
        main(
            [
                "render",
                "--results",
                str(tmp_path / "store"),
                "--out",
                str(tmp_path / "site"),
                "--audit",
                str(tmp_path / "missing.json"),
            ]
        )
        == 2
    )


# ---- an LLM release: the same attacks on a hidden set that SmolLM2-135M-Instruct wrote ---------

LLM_HIDDEN = Path(__file__).resolve().parent / "fixtures" / "llm_hidden"


@pytest.fixture(scope="module")
def llm_release(tmp_path_factory, star_dir):
    """The public side of the fixture's key (template, 20 scenarios per task, reworded prefixes) and,
    as the hidden set, the corpus SmolLM2-135M-Instruct generated for the key's reserved scenarios
    with its secret seed and reworded prefixes, as a release makes it (tests/fixtures/llm_hidden/
    README.md: the command that made it; 12 scenarios, so about 9 blind dialogues and 48 pairs)."""
    from generation.cli import main

    root = tmp_path_factory.mktemp("cheater_llm")
    key = LLM_HIDDEN / "hidden_key.json"
    tasks = json.loads((LLM_HIDDEN / "corpus" / "manifest.json").read_text())["config"]["tasks"]
    assert (
        main(
            [
                "--star",
                str(star_dir),
                "--tasks",
                ",".join(tasks),
                "--no-progress",
                "--hidden-key",
                str(key),
                "--prefix-mode",
                "reword",
                "--per-task",
                "20",
                "--out",
                str(root / "pub"),
                "--split",
                "public",
            ]
        )
        == 0
    )
    return audit_corpora(
        root / "pub",
        LLM_HIDDEN / "corpus",
        key=key,
        star=star_dir,
        regen_seeds=(0,),
        regen_scenarios_per_task=20,
        export_options={"metric_share": 0.2},
    )


def test_no_simulator_aware_attack_catches_an_llm_hidden_set(llm_release):
    """Issue 33, item 3, the other side: the attacks that solve a template hidden set learn nothing
    from a hidden set that a real LLM wrote, and the release passes its audit."""
    rep = llm_release
    assert rep.counts["blind"] >= 8 and rep.counts["pairs"] >= 40
    assert_simulator_attacks(rep, caught=False)
    a = by(rep)
    assert a[(FINGERPRINTS, "detector")].value < a[(FINGERPRINTS, "detector")].control + DETECTOR_MARGIN
    assert rep.ok and PLUMBING_ONLY_TEXT not in rep.verdict()
    assert all(x.status != "FAIL" for x in rep.attacks)
