"""The analyses of Appendix N: hand-worked values and simulated annotators with known properties."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("statsmodels")
pytest.importorskip("krippendorff")

from annotation import analysis as A  # noqa: E402
from annotation.report import load_answers, run_analyses  # noqa: E402
from annotation.simulate import simulate_judgments  # noqa: E402
from dialfork_dataset import taxonomy  # noqa: E402
from dialfork_dataset.taxonomy import breaking_types, forks_per_source  # noqa: E402

NB = 300  # bootstrap resamples in tests


def _row(
    annotator,
    did,
    k,
    slider,
    *,
    task="weather",
    source=None,
    htype="WIC",
    cue_kind="true",
    answer="yes",
    onset=None,
    tk=None,
    prefix=None,
    t=0,
):
    conformant = k is None
    return {
        "annotator": annotator,
        "task": task,
        "dialogue_id": did,
        "source_id": source or did,
        "hallucination_type": None if conformant else htype,
        "fork_position": k,
        "fork_turn": None if conformant else (tk if tk is not None else k + 1),
        "num_system_turns": 8,
        "cue_kind": "foil" if conformant else cue_kind,
        "cue_type": "GR",
        "slider": slider,
        "cue_answer": answer,
        "onset_turn": onset,
        "prefix_answer": prefix,
        "position": t,
        "completed_at": f"2026-01-01T00:00:{t:02d}",
    }


# ------------------------------------------------------------------ hand-worked primitives


def test_kendall_tau_b_hand_worked():
    # k = 1,1,2,2,3,3,4,4 and strictly rising ratings: 24 untied pairs, all concordant, 4 tied in k
    # tau_b = 24 / sqrt((28 - 4) * (28 - 0)) = 24 / sqrt(672)
    tau = A.kendall_tau_b([10, 20, 30, 40, 50, 60, 70, 80], [1, 1, 2, 2, 3, 3, 4, 4])
    assert tau == pytest.approx(24 / math.sqrt(672))
    assert math.isnan(A.kendall_tau_b([5, 5, 5], [1, 2, 3]))


def test_wilson_hand_worked():
    # Wilson (1927): (p + z^2/2n +- z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), p = 0.8, n = 10
    z, p, n = 1.959963984540054, 0.8, 10
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = A.wilson(8, 10)
    assert lo == pytest.approx(c - h) and hi == pytest.approx(c + h)
    assert A.wilson(0, 0) == (None, None)


def test_fisher_one_sided_hand_worked():
    # [[3, 1], [1, 3]]: P(X >= 3) under the hypergeometric = (C(4,3) C(4,1) + C(4,4) C(4,0)) / C(8,4) = 17/70
    assert A.fisher_greater(3, 4, 1, 4) == pytest.approx(17 / 70)


def test_gwet_ac1_hand_worked_and_matches_fallback():
    # two raters, five items: a/a, a/b, b/b, b/b, a/a -> pa = 4/5; pi_a = 5/10 -> pe = 2 * 0.5 * 0.5 = 0.5
    # AC1 = (0.8 - 0.5) / (1 - 0.5) = 0.6
    ratings = [["a", "a"], ["a", "b"], ["b", "b"], ["b", "b"], ["a", "a"]]
    r = A.gwet_ac1(ratings, ["a", "b"])
    assert r["ac1"] == pytest.approx(0.6) and r["raw"] == pytest.approx(0.8) and r["n_subjects"] == 5
    table = np.array([[2, 0], [1, 1], [0, 2], [0, 2], [2, 0]], float)
    assert A._gwet_ac1_counts(table)[0] == pytest.approx(0.6)
    # three categories, unequal numbers of raters: irrCAC and the documented formula agree
    rng = np.random.default_rng(0)
    cats = ["yes", "partly", "no"]
    subj = [list(rng.choice(cats, size=int(rng.integers(2, 4)), p=[0.6, 0.1, 0.3])) for _ in range(40)]
    table = np.array([[s.count(c) for c in cats] for s in subj], float)
    got = A.gwet_ac1(subj, cats)
    ac1, pa, _ = A._gwet_ac1_counts(table)
    assert got["ac1"] == pytest.approx(ac1, abs=1e-5) and got["raw"] == pytest.approx(
        pa, abs=1e-5
    )  # irrCAC: 5 digits


def test_gwet_ac1_without_irrcac(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "irrCAC.raw", None)  # import fails: the documented formula is used
    r = A.gwet_ac1([["a", "a"], ["a", "b"], ["b", "b"], ["b", "b"], ["a", "a"]], ["a", "b"])
    assert r["ac1"] == pytest.approx(0.6) and r["raw"] == pytest.approx(0.8)


def test_gwet_ac1_one_conversation_with_two_ratings():
    # irrCAC's standard error divides by n - 1 = 0 (issue 52); the coefficient itself is defined:
    # agreeing raters: pa = 1, pi = (1, 0) -> pe = 0 -> AC1 = 1; disagreeing: pa = 0, pe = 0.5 -> AC1 = -1
    agree = A.gwet_ac1([["yes", "yes"], ["no"]], ["yes", "no"])  # the single rating does not count
    assert agree == {"ac1": pytest.approx(1.0), "raw": pytest.approx(1.0), "n_subjects": 1}
    split = A.gwet_ac1([["yes", "no"]], ["yes", "no"])
    assert split["ac1"] == pytest.approx(-1.0) and split["raw"] == pytest.approx(0.0)
    # three categories: pi = (2/3, 1/3, 0) -> pe = (2/9 + 2/9) / 2 = 2/9; pa = 2/6 -> AC1 = (1/3 - 2/9) / (7/9)
    three = A.gwet_ac1([["yes", "yes", "partly"]], ["yes", "partly", "no"])
    assert three["ac1"] == pytest.approx((1 / 3 - 2 / 9) / (7 / 9)) and three["raw"] == pytest.approx(1 / 3)
    # a single category: chance agreement is certain, AC1 undefined (None, not a division by zero)
    assert A.gwet_ac1([["yes", "yes"], ["yes", "yes"]], ["yes"])["ac1"] is None


def test_krippendorff_interval_hand_worked():
    # units (1,1), (2,2), (3,4): D_o = 2*1 / 6 = 1/3; D_e = 82 / 30 -> alpha = 1 - 10/82
    r = A.krippendorff_interval([[1, 1], [2, 2], [3, 4]])
    assert r["alpha"] == pytest.approx(1 - 10 / 82)
    assert A.krippendorff_interval([[1], [2]])["alpha"] is None


def test_probability_of_superiority_hand_worked():
    # one annotator: k=1 -> 10, k=2 -> 30, k=3 -> 30, conformant -> 90
    # pairs at different positions: (1,2) win, (1,3) win, (2,3) tie 1/2, (1,c) (2,c) (3,c) wins -> 5.5 / 6
    rows = [_row("a", "d1", 1, 10), _row("a", "d2", 2, 30), _row("a", "d3", 3, 30), _row("a", "c", None, 90)]
    df = A.prepare(rows)
    ps = A.probability_of_superiority(df, ["WIC"], n_boot=NB)
    assert ps["ps"] == pytest.approx(5.5 / 6) and ps["pairs"] == 6 and ps["units"] == 1
    assert A.probability_of_superiority(df, ["WIC"], low=[1], high=[5], n_boot=NB)["ps"] == 1.0


def test_spearman_vectorized_equals_scipy():
    from scipy import stats

    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 5, 30).astype(float), rng.normal(size=30)
    assert A.spearman_rho(x, y) == pytest.approx(stats.spearmanr(x, y).statistic)


def test_first_judgment_and_mean_slider():
    rows = [_row("b", "d1", 2, 80, answer="no", t=5), _row("a", "d1", 2, 40, answer="yes", onset=3, t=1)]
    conv = A.first_judgments(A.prepare(rows))
    assert len(conv) == 1
    assert conv.loc[0, "cue_answer"] == "yes"  # the earliest judgment
    assert conv.loc[0, "mean_slider"] == 60 and conv.loc[0, "n_judges"] == 2


def test_rq3_onset_distribution_hand_worked():
    rows = [_row("a", f"d{i}", 2, 50, tk=3, onset=o, t=i) for i, o in enumerate([3, 3, 4, 6])]
    rows.append(_row("a", "dn", 2, 50, tk=3, answer="no", t=9))
    r = A.rq3(A.first_judgments(A.prepare(rows)))
    assert r["n"] == 4 and r["distribution"] == {"0": 2, "1": 1, "3": 1}
    assert r["exact"]["rate"] == 0.5 and r["within_one"]["rate"] == 0.75 and r["median_abs_error"] == 0.5


def test_prepare_reports_every_bad_row():
    rows = [_row("a", "d1", 1, 140), _row("a", "d2", 1, 50, answer="maybe")]
    with pytest.raises(A.AnswersError) as e:
        A.prepare(rows)
    assert len(e.value.errors) == 2
    assert "slider must be in 0..100" in e.value.errors[0] and "cue_answer" in e.value.errors[1]


def test_exclusion_criterion():
    rows = []
    for i in range(3):  # annotator x confirms 2 of 3 conformant foils -> excluded
        rows.append(
            _row("x", f"cx{i}", None, 90, answer="yes" if i < 2 else "no", onset=2 if i < 2 else None, t=i)
        )
    rows.append(_row("y", "cy0", None, 90, answer="yes", onset=1))  # only one conformant: not assessed
    f = {r["annotator"]: r for r in A.annotator_foils(A.prepare(rows))}
    assert f["x"]["excluded"] and f["x"]["conformant_foil_rate"] == pytest.approx(2 / 3)
    assert not f["y"]["assessed"] and not f["y"]["excluded"]
    assert A.analyse(rows, n_boot=NB)["excluded_annotators"] == ["x"]
    assert A.analyse(rows, n_boot=NB, apply_exclusion=False)["excluded_annotators"] == []


# ------------------------------------------------------------------ simulated annotators


def test_ratings_rising_with_k_give_positive_tau():
    rows = simulate_judgments(n_annotators=8, tasks=("weather",), slope=20.0, noise=8.0, seed=2)
    res = A.analyse(rows, n_boot=NB, seed=0)
    t = res["rq1"]["breaking"]["tau_b_within_units"]
    assert t["n"] == 8 and t["mean"] > 0.6 and t["ci_low"] > 0.4
    assert t["p_wilcoxon_greater"] < 0.01
    q = res["rq1"]["breaking"]["tau_b_quartets"]
    # one quartet per (annotator, breaking type), split over four annotators
    assert q["n"] == 8 * len(breaking_types()) and q["mean"] > 0.6
    assert res["rq1"]["breaking"]["superiority"]["ps"] > 0.85
    ms = res["rq1"]["breaking"]["mean_slider"]
    assert (
        ms["k1"]["mean"] < ms["k2"]["mean"] < ms["k3"]["mean"] < ms["k4"]["mean"] < ms["conformant"]["mean"]
    )


def test_pure_noise_gives_tau_about_zero():
    rows = simulate_judgments(
        n_annotators=16,
        tasks=("weather", "hotel_book"),
        slope=0.0,
        base=50.0,
        conformant_mean=50.0,
        noise=25.0,
        seed=3,
    )
    res = A.analyse(rows, n_boot=NB, seed=0)
    t = res["rq1"]["all"]["tau_b_within_units"]
    assert abs(t["mean"]) < 0.1 and t["ci_low"] < 0 < t["ci_high"]
    assert abs(res["rq1"]["all"]["superiority"]["ps"] - 0.5) < 0.05


def test_per_type_slopes_are_recovered():
    rows = simulate_judgments(
        n_annotators=8,
        tasks=("weather",),
        slope={h: 0 if h == "CSC" else 20 for h in taxonomy.names()},  # flat for CSC alone
        base=40,
        noise=5,
        seed=4,
    )
    res = A.analyse(rows, n_boot=NB)
    csc = res["rq1"]["mean_slider_per_type"]["CSC"]
    gr = res["rq1"]["mean_slider_per_type"]["GR"]
    assert abs(csc["k4"]["mean"] - csc["k1"]["mean"]) < 8 and gr["k4"]["mean"] - gr["k1"]["mean"] > 50
    assert (
        res["rq1"]["breaking"]["tau_b_within_units"]["mean"] > res["rq1"]["all"]["tau_b_within_units"]["mean"]
    )


def test_confirmation_foils_agreement_and_learning():
    rows = simulate_judgments(
        n_annotators=10,
        tasks=("weather",),
        p_confirm_true=0.9,
        p_confirm_foil=0.05,
        p_onset_exact=1.0,
        overlap=2,
        seed=5,
    )
    res = A.analyse(rows, n_boot=NB)
    r2 = res["rq2"]
    assert r2["true_overall"]["rate"] > 0.8 and r2["foil_conformant"]["rate"] < 0.2
    assert r2["p_fisher_true_vs_foil_conformant"] < 1e-6
    assert res["rq3"]["exact"]["rate"] == 1.0
    assert res["rq4"]["overall"]["yes_or_mostly"]["n"] > 0
    ag = res["agreement"]
    n = forks_per_source() + 4  # the first annotator's: one fork per type and position, 4 conformant
    assert ag["conversations"] == n and ag["judged_by"] == {"3": n}
    assert ag["slider"]["alpha"] > 0.5  # slider driven by k: raters agree
    assert ag["onset"]["alpha"] == pytest.approx(1.0)  # every onset exactly at t_k
    assert set(res["learning"]) == {"first", "middle", "last"}
    n_true = sum(res["learning"][t]["true_confirmed"]["n"] for t in res["learning"])
    assert n_true == sum(1 for r in rows if r["hallucination_type"] and r["cue_kind"] == "true")


def test_distance_correlation_known_monotone():
    rows = simulate_judgments(n_annotators=6, tasks=("weather",), seed=6)
    conv_mean = {}
    for r in rows:
        conv_mean.setdefault(r["dialogue_id"], []).append(r["slider"])
    exact = {d: 100 - float(np.mean(v)) for d, v in conv_mean.items()}
    rng = np.random.default_rng(0)
    res = A.analyse(
        rows, distances={"exact": exact, "noise": {d: float(rng.random()) for d in exact}}, n_boot=NB
    )
    dc = res["distance_correlation"]
    assert (
        dc["exact"]["rho"] == pytest.approx(1.0) and dc["exact"]["n"] == 6 * forks_per_source()
    )  # the forks each annotator judged
    assert abs(dc["noise"]["rho"]) < 0.3


def test_run_analyses_writes_report_json_csv_and_figure(tmp_path):
    rows = simulate_judgments(n_annotators=6, tasks=("weather",), overlap=1, seed=7)
    res = run_analyses(rows, tmp_path, n_boot=NB, plots=True)
    md = (tmp_path / "report.md").read_text()
    assert "| RQ | Question | Validates | Measure | Statistic | Result |" in md
    for rq in ("RQ1", "RQ2", "RQ3", "RQ4"):
        assert f"| {rq} |" in md
    assert "Gwet's AC1" in md and "Krippendorff" in md
    data = json.loads((tmp_path / "analyses.json").read_text())
    assert data["counts"]["judgments"] == len(rows) and data["verdicts"]["RQ1"] == "Yes"
    assert (tmp_path / "summary.csv").read_text().startswith("section,statistic,value")
    assert (tmp_path / "figure8.png").stat().st_size > 10_000
    assert res["rq2"]["true_overall"]["n"] > 0


def test_cli_analyse_on_exported_answers(tmp_path, capsys):
    from annotation.__main__ import main

    rows = simulate_judgments(n_annotators=4, tasks=("weather",), seed=8)
    (tmp_path / "answers.json").write_text(json.dumps(rows))
    assert len(load_answers(tmp_path / "answers.json")) == len(rows)
    dist = tmp_path / "d.csv"
    dist.write_text(
        "dialogue_id,method,distance\n"
        + "".join(f"{r['dialogue_id']},m,{i}\n" for i, r in enumerate(rows) if r["hallucination_type"])
    )
    rc = main(
        [
            "analyse",
            "--answers",
            str(tmp_path / "answers.json"),
            "--out",
            str(tmp_path / "out"),
            "--n-boot",
            "200",
            "--no-plots",
            "--distances",
            str(dist),
        ]
    )
    assert rc == 0
    assert "judgments analysed" in capsys.readouterr().out
    assert "Task-2 distances" in (tmp_path / "out" / "report.md").read_text()
