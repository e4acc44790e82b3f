"""Task 3 streaming detectors: fitting scope, presets, operating point, trade-off curve, settings
selection on train data only, and the tree-cut clustering it uses (synthetic embeddings, plus
one end-to-end run on a STAR template corpus)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dialfork_dataset.forks import fork_turns
from dialfork_metrics.flowgraph import cluster_embeddings, cluster_tree, cut_cluster_tree
from dialfork_metrics.task3 import load_detector, make_detector
from dialfork_metrics.task3.selection import (
    coverage_at,
    first_alarms,
    select_settings,
    source_folds,
    system_turn_index,
    tradeoff_curve,
)
from dialfork_metrics.task3.streaming import PAPER_SETTINGS, SELECTABLE, preset_settings

D = 16
N_STEPS = 6


def _unit(rng, n):
    x = rng.normal(size=(n, D))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


PROTO_RNG = np.random.default_rng(42)
PROTOS = {
    task: {"user": _unit(PROTO_RNG, N_STEPS), "system": _unit(PROTO_RNG, N_STEPS)} for task in ("a", "b")
}
OFF = _unit(PROTO_RNG, 4)


def _noisy(v, rng, noise=0.08):
    v = v + noise * rng.normal(size=D) / np.sqrt(D)
    return v / np.linalg.norm(v)


def _dialogue(rng, task, source, k=None, htype="SSPC"):
    steps = list(range(N_STEPS))
    if rng.random() < 0.3:
        steps.pop(int(rng.integers(1, N_STEPS - 1)))
    T = len(steps)
    fork_at = fork_turns(T)[k - 1] if k else None
    turns, emb = [], []
    for i, s in enumerate(steps, start=1):
        turns.append({"speaker": "user", "text": f"u{s}"})
        emb.append(_noisy(PROTOS[task]["user"][s], rng))
        off = fork_at is not None and i >= fork_at
        turns.append({"speaker": "system", "text": f"s{s}"})
        emb.append(_noisy(OFF[int(rng.integers(len(OFF)))] if off else PROTOS[task]["system"][s], rng))
    rec = {
        "dialogue_id": f"{source}" + (f"-{htype}-k{k}" if k else ""),
        "source_id": source,
        "task": task,
        "turns": turns,
        "num_system_turns": T,
        "hallucination_type": htype if k else None,
        "fork_position": k,
        "fork_turn": fork_at,
    }
    return rec, np.stack(emb)


def _corpus(seed, n_sources):
    rng = np.random.default_rng(seed)
    recs, embs = [], []
    for task in ("a", "b"):
        for j in range(n_sources):
            src = f"{task}{seed}-{j}"
            for k in (None, 1, 2, 3, 4):
                r, e = _dialogue(rng, task, src, k)
                recs.append(r)
                embs.append(e)
    return recs, embs


TRAIN, TRAIN_E = _corpus(0, 24)
TEST, TEST_E = _corpus(1, 10)
CONF = [(r, e) for r, e in zip(TRAIN, TRAIN_E) if r["hallucination_type"] is None]
CONF_R, CONF_E = [r for r, _ in CONF], [e for _, e in CONF]
SMALL_GRID = {
    "calibration": ("in_sample", "cross_fit"),
    "backoff": (False,),
    "distance_threshold": (0.3, 0.6),
    "scope": ("task", "pooled"),
    "order": (2, 3),
    "position_weight": (0.0, 1.0),
}


# -- clustering: one tree, many cuts -------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_cuts_match_sklearn_partition(seed):
    rng = np.random.default_rng(seed)
    E = np.concatenate([_noisy(c, rng, 0.5)[None] for c in _unit(rng, 12) for _ in range(15)])
    Z = cluster_tree(E)
    for thr in (0.1, 0.3, 0.55, 0.8, 1.2):
        a, b = cut_cluster_tree(Z, thr), cluster_embeddings(E, distance_threshold=thr)
        # the same partition: a bijection between labels
        pairs = set(zip(a.tolist(), b.tolist()))
        assert len(pairs) == len(set(a.tolist())) == len(set(b.tolist())), thr
        assert a[0] == 0 and sorted(set(a.tolist())) == list(range(a.max() + 1))


def test_tree_cut_validation():
    with pytest.raises(ValueError, match="at least 2"):
        cluster_tree(np.ones((1, 3)))
    with pytest.raises(ValueError, match=r"\(0, 2\]"):
        cut_cluster_tree(cluster_tree(np.eye(3)), 0.0)


# -- presets and settings --------------------------------------------------------------------------
def test_presets_and_explicit_overrides():
    paper = make_detector("it+nc", encoder=None, preset="paper")
    assert paper.settings() == PAPER_SETTINGS and paper.settings()["scope"] == "task" and paper.scope is None
    sel = make_detector("ss+nc", encoder="minilm")
    assert sel.settings() == preset_settings("selected", "ss+nc", "minilm")
    assert set(sel.settings_source.values()) == {"preset:selected"}
    det = make_detector("it", encoder=None, preset="paper", order=3, scope="pooled")
    assert det.order == 3 and det.scope == "pooled" and det.calibration is None  # parameters as given
    assert det.settings()["calibration"] == "in_sample"
    assert det.settings_source["order"] == "explicit" and det.settings_source["backoff"] == "preset:paper"
    for bad, match in (
        ({"preset": "x"}, "'preset' parameter of StreamingDetector must be a str among .* Got 'x'"),
        ({"scope": "global"}, "'scope' parameter of StreamingDetector must be a str among .* Got 'global'"),
    ):
        with pytest.raises(ValueError, match=match):
            make_detector("it", encoder=None, **bad).resolved_settings()


# -- scope -----------------------------------------------------------------------------------------
def test_task_scope_is_one_pooled_model_per_task(tmp_path):
    det = make_detector("it+nc", encoder=None, scope="task", order=2, calibration="in_sample").fit(
        CONF_R, embeddings=CONF_E
    )
    assert sorted(det.task_models_) == ["a", "b"] and det.threshold_ is None
    preds = det.predict_many(TEST, embeddings=TEST_E)
    for task in ("a", "b"):
        idx = [i for i, r in enumerate(CONF_R) if r["task"] == task]
        solo = make_detector("it+nc", encoder=None, scope="pooled", order=2, calibration="in_sample").fit(
            [CONF_R[i] for i in idx], embeddings=[CONF_E[i] for i in idx]
        )
        assert det.for_task(task).threshold_ == solo.threshold_
        ti = [i for i, r in enumerate(TEST) if r["task"] == task]
        assert [preds[i] for i in ti] == solo.predict_many(
            [TEST[i] for i in ti], embeddings=[TEST_E[i] for i in ti]
        )
        stream = det.start(task)  # streaming, per task
        outs = [stream.update(t, e) for t, e in zip(TEST[ti[1]]["turns"], TEST_E[ti[1]])]
        assert stream.flag == preds[ti[1]] and stream.flag == next((o for o in outs if o is not None), None)
    with pytest.raises(ValueError, match="no model for task"):
        det.start()
    with pytest.raises(ValueError, match="without a task model"):
        det.predict_many([{**TEST[0], "task": "zzz"}], embeddings=[TEST_E[0]])
    back = load_detector(det.save(tmp_path / "d"))
    assert back.scope_ == "task" and sorted(back.task_models_) == ["a", "b"]
    assert back.predict_many(TEST, embeddings=TEST_E) == preds
    assert back.thresholds == det.thresholds
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    assert [e["task"] for e in cfg["task_models"]] == ["a", "b"] and cfg["scope"] == "task"


def test_pooled_scope_and_single_task_are_one_model():
    pooled = make_detector("ss", encoder=None, scope="pooled").fit(CONF_R, embeddings=CONF_E)
    assert not pooled.task_models_ and pooled.threshold_ is not None and pooled.start() is not None
    one = [i for i, r in enumerate(CONF_R) if r["task"] == "a"]
    det = make_detector("ss", encoder=None, scope="task").fit(
        [CONF_R[i] for i in one], embeddings=[CONF_E[i] for i in one]
    )
    assert not det.task_models_ and det.tasks_ == ["a"] and det.for_task("a") is det
    with pytest.raises(ValueError, match="fitted on task"):
        det.for_task("b")


# -- operating point ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["it", "ss+nc"])
def test_recalibrate_equals_refit(name):
    det = make_detector(name, encoder=None, calibration="cross_fit").fit(CONF_R, embeddings=CONF_E)
    det.recalibrate(0.2)
    ref = make_detector(name, encoder=None, calibration="cross_fit", false_alarm_rate=0.2).fit(
        CONF_R, embeddings=CONF_E
    )
    assert det.thresholds == ref.thresholds
    assert det.predict_many(TEST, embeddings=TEST_E) == ref.predict_many(TEST, embeddings=TEST_E)


def test_cross_fit_meets_the_target_on_held_out_dialogues():
    held = [(r, e) for r, e in zip(TEST, TEST_E) if r["hallucination_type"] is None]
    rates = {}
    for cal in ("in_sample", "cross_fit"):
        det = make_detector("it", encoder=None, calibration=cal, order=3, false_alarm_rate=0.1).fit(
            CONF_R, embeddings=CONF_E
        )
        rates[cal] = np.mean(
            [p is not None for p in det.predict_many([r for r, _ in held], [e for _, e in held])]
        )
    assert rates["cross_fit"] <= rates["in_sample"]


# -- trade-off curve ----------------------------------------------------------------------------------
def test_tradeoff_curve_hand_worked():
    calib = {None: np.arange(1, 101, dtype=float)}  # IT statistic min p_t of 100 conformant train dialogues
    stats = np.array([0.5, 50.5, 99.5, 200.0, 0.1, 0.2, 3.0, 60.0])  # 4 conformant, 4 forks
    fork = [False] * 4 + [True] * 4
    cur = tradeoff_curve(stats, [None] * 8, fork, calib, "it", levels=[0.0, 0.5, 1.0])
    # thresholds: a=0 -> 1, a=.5 -> 50.5, a=1 -> 100 (alarm when stat < threshold)
    np.testing.assert_allclose(cur["cov_c"], [0, 0.25, 0.25, 0.75, 1])
    np.testing.assert_allclose(cur["cov_h"], [0, 0.5, 0.75, 1.0, 1])
    assert coverage_at(cur, 0.25) == pytest.approx(0.75)
    assert coverage_at(cur, 0.5) == pytest.approx(0.875)  # halfway between (0.25, .75) and (0.75, 1)
    with pytest.raises(ValueError, match="both conformant and forked"):
        tradeoff_curve(stats[:4], [None] * 4, fork[:4], calib, "it")


@pytest.mark.parametrize("name", ["it+nc", "ss"])
def test_curve_passes_through_the_operating_point(name):
    det = make_detector(name, encoder=None, calibration="cross_fit", order=2).fit(CONF_R, embeddings=CONF_E)
    preds = det.predict_many(TEST, embeddings=TEST_E)
    fork = [r["hallucination_type"] is not None for r in TEST]
    st, keys = det.dialogue_statistics(TEST, TEST_E)
    cur = tradeoff_curve(
        st,
        keys,
        fork,
        {k: m.calibration_stats_ for k, m in det.models().items()},
        det.method,
        levels=[det.false_alarm_rate],
        threshold_rule=det.threshold_rule_,
        confidence=det.confidence,
    )
    flagged = np.array([p is not None for p in preds])
    assert cur["cov_c"][1] == pytest.approx(flagged[~np.array(fork)].mean())
    assert cur["cov_h"][1] == pytest.approx(flagged[np.array(fork)].mean())
    # first_alarms on p_t reproduces the streaming predictions
    m = det.models()
    ps = det.turn_probabilities(TEST, TEST_E)
    out = [
        first_alarms(
            [p],
            [system_turn_index(r["turns"])],
            det.method,
            m[r["task"] if det.task_models_ else next(iter(m))].threshold_,
            det.position_weight_,
        )[0]
        for p, r in zip(ps, TEST)
    ]
    assert out == preds


# -- selection ------------------------------------------------------------------------------------------
def test_source_folds_are_stratified_by_task_and_seeded():
    f = source_folds(TRAIN, 3, seed=0)
    assert f == source_folds(list(reversed(TRAIN)), 3, seed=0) and f != source_folds(TRAIN, 3, seed=1)
    for task in ("a", "b"):
        counts = np.bincount([v for k, v in f.items() if k.startswith(task)], minlength=3)
        assert counts.max() - counts.min() <= 1


def test_selection_chooses_and_is_reproducible(caplog):
    with caplog.at_level("WARNING", logger="dialfork_metrics.task3.selection"):
        sel = select_settings(TRAIN, TRAIN_E, grid=SMALL_GRID, n_folds=3, false_alarm_rate=0.1)
    n_conf = sum(r["hallucination_type"] is None for r in TRAIN)
    for r in sel.table:  # the held-out false-alarm rate with its exact 95% interval
        assert r["n_conformant"] == n_conf == sel.meta["n_conformant"]
        lo, hi = r["cov_c_ci"]
        assert 0.0 <= lo <= r["cov_c"] <= hi <= 1.0 and hi - lo > 0.05
    # a few dozen held-out conformant dialogues cannot resolve a 10% target: the selection says so
    assert sel.meta["false_alarm_ci_half_width"] > 0.01
    assert "cannot tell settings near the 10.0% target apart" in caplog.text
    assert set(sel.chosen) == {"it", "ss", "it+nc", "ss+nc"}
    for d, s in sel.chosen.items():
        assert set(s) == set(SELECTABLE)
        rows = [r for r in sel.table if r["detector"] == d]
        assert len(rows) == 32
        best = next(r for r in rows if all(r[k] == s[k] for k in SELECTABLE))
        ok = [r for r in rows if r["cov_c"] <= 0.1 + 0.01]
        assert (
            best["score"] == max(r["score"] for r in ok)
            if ok
            else best["cov_c"] == min(r["cov_c"] for r in rows)
        )
    again = select_settings(
        list(reversed(TRAIN)), list(reversed(TRAIN_E)), grid=SMALL_GRID, n_folds=3, false_alarm_rate=0.1
    )
    assert again.chosen == sel.chosen
    with pytest.raises(ValueError, match="forks of the train sources"):
        select_settings(CONF_R, CONF_E, grid=SMALL_GRID)
    with pytest.raises(ValueError, match="unknown grid key"):
        select_settings(TRAIN, TRAIN_E, grid={"K": (3,)})


@pytest.mark.parametrize("name,gamma", [("it", 0.0), ("it", 1.0), ("ss+nc", 0.5)])
def test_selection_held_out_rows_match_a_detector_fitted_on_the_other_folds(name, gamma):
    grid = {
        "calibration": ("cross_fit",),
        "backoff": (True,),
        "distance_threshold": (0.6,),
        "scope": ("pooled",),
        "order": (3,),
        "position_weight": (gamma,),
    }
    sel = select_settings(TRAIN, TRAIN_E, grid=grid, n_folds=2, max_forks_per_source=None, detectors=(name,))
    folds = source_folds(TRAIN, 2, seed=0)
    preds = {}
    for f in (0, 1):
        # in the selection's canonical order (by dialogue id): the cross_fit folds are dealt by position
        fit = sorted(
            [
                (r, e)
                for r, e in zip(TRAIN, TRAIN_E)
                if folds[r["source_id"]] != f and r["hallucination_type"] is None
            ],
            key=lambda x: str(x[0]["dialogue_id"]),
        )
        det = make_detector(name, encoder=None, **grid_one(grid)).fit(
            [r for r, _ in fit], embeddings=[e for _, e in fit]
        )
        held = [(r, e) for r, e in zip(TRAIN, TRAIN_E) if folds[r["source_id"]] == f]
        for (r, _), p in zip(held, det.predict_many([r for r, _ in held], [e for _, e in held])):
            preds[r["dialogue_id"]] = p
    from dialfork_metrics.task3 import score_predictions

    ref = score_predictions(preds, TRAIN)
    row = sel.table[0]
    assert row["score"] == pytest.approx(ref["score"]) and row["cov_c"] == pytest.approx(ref["cov_c"])


def grid_one(grid):
    return {k: v[0] for k, v in grid.items()}


def test_bench_selection_never_reads_test_labels(template_corpus):
    """run_task3(select=True) on a STAR template corpus: shuffling the test split's labels (types,
    fork turns, which dialogue is conformant) leaves every chosen setting unchanged."""
    from dialfork_metrics.bench import Corpus, load_corpus, run_task3
    from dialfork_metrics.encoders import Encoder

    corpus = load_corpus(template_corpus)
    enc = Encoder("minilm", show_progress=False)
    grid = {
        "calibration": ("in_sample", "cross_fit"),
        "backoff": (False,),
        "distance_threshold": (0.55, 0.8),
        "scope": ("task",),
        "order": (3,),
        "position_weight": (0.0, 1.0),
    }
    kw = {
        "detectors": ("it", "ss+nc"),
        "select": True,
        "selection_kwargs": {"grid": grid, "n_folds": 2},
        "ablations": False,
        "paper_table": False,
        "progress": False,
    }
    a = run_task3(corpus, enc, **kw)
    recs = [dict(r) for r in corpus.records]
    # permute the labels among the test dialogues of one source and one length T (a fork turn fits
    # its T; a type may change a fork's length, e.g. a premature close, so a source's T can differ)
    by_source: dict[tuple[str, int], list[dict]] = {}
    for r in recs:
        if corpus.assignment.get(r["source_id"]) == "test":
            by_source.setdefault((r["source_id"], r["num_system_turns"]), []).append(r)
    assert any(len(g) > 1 and len({r["fork_turn"] for r in g}) > 1 for g in by_source.values())
    rng = np.random.default_rng(0)
    for group in by_source.values():
        labels = [(r["hallucination_type"], r["fork_turn"], r["fork_position"]) for r in group]
        for r, j in zip(group, rng.permutation(len(group))):
            r["hallucination_type"], r["fork_turn"], r["fork_position"] = labels[j]
    shuffled = Corpus(recs, corpus.assignment, corpus.origin)
    b = run_task3(shuffled, enc, **kw)
    assert a["selection"]["chosen"] == b["selection"]["chosen"]
    assert a["selection"]["table"] == b["selection"]["table"]
    assert a["results"]["it"]["settings"] == a["selection"]["chosen"]["it"]
    assert (
        a["results"]["it"]["score"] != b["results"]["it"]["score"]
        or a["results"]["it"]["cov_c"] != b["results"]["it"]["cov_c"]
    )  # the shuffle did change the test labels the scores are computed from


def test_bench_task3_tables_curve_and_ablations(template_corpus, tmp_path):
    """run_task3 + write_reports: the main rows carry settings, curves and coverage at 1/5/10% FA;
    Table 9 runs the paper's protocol at N=3; the order and scope ablations; the trade-off PNG."""
    from dialfork_metrics.bench import load_corpus, run_task3
    from dialfork_metrics.encoders import Encoder
    from dialfork_metrics.report import write_reports

    corpus = load_corpus(template_corpus)
    r3 = run_task3(
        corpus,
        Encoder("minilm", show_progress=False),
        detectors=("first", "it", "ss+nc"),
        ablation_orders=(2, 3),
        ablation_max_forks_per_source=2,
        progress=False,
    )
    r3.pop("predictions")
    for d in ("it", "ss+nc"):
        r = r3["results"][d]
        assert r["settings"] == make_detector(d, encoder="minilm").settings() and r["preset"] == "selected"
        assert set(r["coverage_at"]) == {"0.01", "0.05", "0.1"}
        assert r["coverage_at"]["0.01"] <= r["coverage_at"]["0.05"] <= r["coverage_at"]["0.1"]
        assert r3["table9"][d]["settings"] == {**PAPER_SETTINGS, "order": 3}
        assert [r3["ablation_order"][n][d]["settings"]["order"] for n in ("2", "3")] == [2, 3]
        assert {sc: r3["ablation_scope"][sc][d]["n_models"] for sc in ("task", "pooled")} == {
            "task": 2,
            "pooled": 1,
        }
    assert "curve" not in r3["results"]["first"]
    assert r3["ablation_n_test"] < r3["n_test"]
    report = {
        "meta": {
            "data": "x",
            "fingerprint": "0" * 16,
            "n_records": 1,
            "n_conformant": 1,
            "encoders": ["minilm"],
            "seed": 0,
        },
        "timings": {"total": 1.0, "encoding_share": 0.5},
        "task3": {"minilm": r3},
        "skipped": [],
    }
    write_reports(report, tmp_path)
    md = (tmp_path / "report.md").read_text()
    for title in (
        "Tables 4 and 9.",
        "Table 9 protocol (the paper's settings, N=3",
        "cov_h @5% FA",
        "Ablation: N-gram order N",
        "Ablation: fitting scope",
        "vs paper 93.82%",
    ):
        assert title in md, title
    png = (tmp_path / "task3_tradeoff_minilm.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_dialogues_without_task_are_routed_at_their_first_turn():
    det = make_detector("it", encoder=None, scope="task", order=2).fit(CONF_R, embeddings=CONF_E)
    blind = [{k: v for k, v in r.items() if k != "task"} for r in TEST]
    assert [det.route_task(r["turns"][0]["speaker"], e[0]) for r, e in zip(TEST, TEST_E)] == [
        r["task"] for r in TEST
    ]
    assert det.predict_many(blind, embeddings=TEST_E) == det.predict_many(TEST, embeddings=TEST_E)


def test_fork_subsample_draws_positions_uniformly_not_the_earliest():
    from dialfork_metrics.task3.selection import _subsample_forks

    recs = [{"dialogue_id": "s-conf", "source_id": "s", "hallucination_type": None}]
    recs += [
        {"dialogue_id": f"s-{pos}-{h}", "source_id": "s", "hallucination_type": h, "fork_position": pos}
        for pos in range(1, 9)
        for h in ("WIC", "GR")
    ]
    drawn = []
    for seed in range(40):
        keep = _subsample_forks(recs, 4, seed)
        assert keep == _subsample_forks(recs, 4, seed)  # seeded
        assert 0 in keep  # every conformant dialogue stays
        pos = [recs[i]["fork_position"] for i in keep if i]
        assert len(pos) == len(set(pos)) == 4  # one fork per drawn position
        drawn += pos
    counts = np.bincount(drawn, minlength=9)[1:]
    # 160 draws over 8 positions: each position about 20 times, the late ones as often as the early ones
    assert counts.min() >= 8 and counts[4:].sum() >= 60
    assert _subsample_forks(recs, None, 0) == list(range(len(recs)))
    assert len(_subsample_forks(recs, 20, 0)) == 9  # a cap above the positions keeps one fork per position
