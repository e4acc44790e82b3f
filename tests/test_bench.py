"""End-to-end benchmark (issue: one-command benchmark) on a small template corpus."""

import json
import shutil

import numpy as np
import pytest

from dialfork_dataset import taxonomy
from dialfork_metrics.bench import (
    TASK1_METHODS,
    TASK2_METHODS,
    TASK3_DETECTORS,
    BenchError,
    main,
    run_benchmark,
    summarise_task1,
    task2_significance,
)
from dialfork_metrics.stats import holm


@pytest.fixture(scope="module")
def bench(template_hub, tmp_path_factory, embedding_cache):
    hub, _ = template_hub
    out = tmp_path_factory.mktemp("bench_out")
    rep = run_benchmark(
        hub,
        tasks=(1, 2, 3),
        encoders=("minilm",),
        out=out,
        n_resamples=500,
        progress=False,
        prd_kwargs={"num_runs": 3, "n_init": 3},
        cache_dir=embedding_cache,
    )
    return rep, out


def test_tables_have_all_rows_and_columns(bench):
    rep, out = bench
    t1 = rep["task1"]["summary"]["tau"]
    assert list(t1) == list(TASK1_METHODS)
    for m in TASK1_METHODS:
        assert set(t1[m]) == {*taxonomy.names(), "Avg"}
        assert all(v is not None for v in t1[m].values())
    assert t1["random"]["Avg"] == 0.0
    assert rep["task1"]["summary"]["n_units"] == 2 * len(taxonomy.names())  # 2 tasks x 4 types
    t2 = rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]
    assert list(t2) == list(TASK2_METHODS)
    for m in TASK2_METHODS:
        assert set(t2[m]) == {*taxonomy.names(), "Avg"}
    sig = rep["task2"]["significance"]
    assert {r["method"] for r in sig} == set(TASK2_METHODS) - {"flowscore"}
    for r in sig:
        assert r["ci_low"] <= r["mean_diff"] <= r["ci_high"]
        assert 0 <= r["p_wilcoxon_holm"] <= 1 and 0 <= r["p_ttest_holm"] <= 1
    t3 = rep["task3"]["minilm"]["results"]
    assert list(t3) == list(TASK3_DETECTORS)
    md = (out / "report.md").read_text()
    for title in ("Table 2.", "Table 3.", "Table 7.", "Tables 4 and 9."):
        assert title in md
    for m in ("FlowKL", "FBD", "PRD", "FlowScore", "FlowDTW", "Shared prefix", "IT+NC", "Always last"):
        assert f"| {m} |" in md


def test_flowscore_beats_length_controls(bench):
    rep, _ = bench
    t2 = rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]
    assert t2["flowscore"]["Avg"] > t2["turn_count_diff"]["Avg"]
    assert t2["flowscore"]["Avg"] > t2["word_count_diff"]["Avg"]
    assert t2["flowscore"]["Avg"] > 0.5


def test_report_json_reloads_and_files_written(bench):
    rep, out = bench
    back = json.loads((out / "report.json").read_text())
    assert back["meta"]["fingerprint"] == rep["meta"]["fingerprint"]
    assert back["task2"]["per_encoder"]["minilm"]["summary"]["tau"]["flowscore"]["Avg"] == pytest.approx(
        rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]["flowscore"]["Avg"]
    )
    assert set(back["meta"]["versions"]) >= {"numpy", "scipy", "datasets"}
    for name in (
        "task1_tau.png",
        "task2_tau_minilm.png",
        "task2_distance_by_k_minilm.png",
        "task3_summary_minilm.png",
        "task3_weights_minilm.png",
    ):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name
    graphs = sorted(out.glob("flowgraph_*"))
    assert {g.suffix for g in graphs} == {".png", ".graphml"}
    n_units = 2 * len(taxonomy.names())  # tasks x types (8 with the paper's four)
    assert (out / "task1_units.csv").read_text().count("\n") == 1 + n_units * len(TASK1_METHODS)
    assert rep["timings"]["total"] > 0 and 0 < rep["timings"]["encoding_share"] < 1


def test_statistics_match_hand_worked():
    # Task 1 summary on hand-made units: tau, exact recovery, Fisher over exact permutation p-values
    rows = []
    for i, d in enumerate([[4, 3, 2, 1], [4, 3, 1, 2], [1, 2, 3, 4]]):
        from dialfork_metrics.stats import exact_recovery, ranking_tau, unit_permutation_pvalue

        rows.append(
            {
                "task": f"t{i}",
                "type": "WIC",
                "method": "m",
                "distances": d,
                "tau": ranking_tau(d),
                "exact": exact_recovery(d),
                "p_perm": unit_permutation_pvalue(d),
            }
        )
    s = summarise_task1(rows, ["m"])
    assert s["tau"]["m"]["WIC"] == pytest.approx((1 + 4 / 6 - 1) / 3)
    assert s["exact_recovery"]["m"] == pytest.approx(1 / 3)
    from scipy.stats import combine_pvalues

    assert s["fisher_p"]["m"] == pytest.approx(combine_pvalues([1 / 24, 4 / 24, 1.0], method="fisher").pvalue)
    # Table 7 on hand-made units: Holm across encoders within each test
    per = {}
    for enc, shift in (("e1", 0.5), ("e2", 0.1)):
        units = []
        for u in range(12):
            units.append(
                {
                    "source_id": f"s{u}",
                    "type": "GR",
                    "method": "flowscore",
                    "distances": [4, 3, 2, 1],
                    "tau": 1.0,
                }
            )
            units.append(
                {
                    "source_id": f"s{u}",
                    "type": "GR",
                    "method": "mean_turn",
                    "distances": [1, 2, 3, 4],
                    "tau": 1.0 - shift - 0.01 * u,
                }
            )
        per[enc] = {"units": units, "methods": ["flowscore", "mean_turn"]}
    sig = task2_significance(per, n_resamples=1000, seed=3)
    raw = [r["p_wilcoxon"] for r in sig]
    assert [r["p_wilcoxon_holm"] for r in sig] == pytest.approx(holm(raw))
    assert sig == task2_significance(per, n_resamples=1000, seed=3)  # bootstrap determinism


def test_custom_metric_row(template_hub, tmp_path, embedding_cache):
    hub, _ = template_hub
    rep = run_benchmark(
        hub,
        tasks=(2,),
        encoders=("minilm",),
        out=None,
        n_resamples=200,
        progress=False,
        cache_dir=embedding_cache,
        task2_methods=("turn_count_diff", "flowscore"),
        custom_metrics=["mylen=dialfork_metrics.dialogue:turn_count_diff"],
    )
    t = rep["task2"]["per_encoder"]["minilm"]["summary"]["tau"]
    assert t["mylen"] == t["turn_count_diff"]


def test_bad_requests(template_hub):
    hub, _ = template_hub
    with pytest.raises(BenchError, match="unknown task"):
        run_benchmark(hub, tasks=(4,), out=None)
    with pytest.raises(ValueError, match="encoder"):
        run_benchmark(hub, tasks=(2,), encoders=("no-such-encoder-alias",), out=None)
    with pytest.raises(BenchError, match="unknown Task 2 method"):
        run_benchmark(hub, tasks=(2,), task2_methods=("flowscore", "bleu"), out=None)
    with pytest.raises(BenchError, match="--metric"):
        run_benchmark(hub, tasks=(2,), custom_metrics=["x=nonexistent_module:fn"], out=None)
    assert main(["--data", str(hub), "--tasks", "9", "--out", "/nonexistent"]) == 2


def test_missing_config_and_incomplete_units_are_skipped(template_hub, tmp_path, embedding_cache):
    hub, _ = template_hub
    cut = tmp_path / "hub"
    shutil.copytree(hub, cut)
    shutil.rmtree(cut / "data" / "forked")  # a corpus missing a config
    rep = run_benchmark(
        cut,
        tasks=(2,),
        encoders=("minilm",),
        out=None,
        task2_methods=("turn_count_diff",),
        n_resamples=100,
        progress=False,
        cache_dir=embedding_cache,
    )
    assert rep["meta"]["n_skipped_units"] >= 2
    assert any("config 'forked'" in s for s in rep["skipped"])
    assert rep["task2"]["per_encoder"]["minilm"]["summary"]["n_units"] == 0


def test_paper_statistics_and_units(bench):
    rep, out = bench
    # Table 7: W and t next to the p-values (recomputed from the units)
    from scipy.stats import ttest_1samp, wilcoxon

    units = rep["task2"]["per_encoder"]["minilm"]["units"]
    tau = {(u["source_id"], u["type"], u["method"]): u["tau"] for u in units}
    for r in rep["task2"]["significance"]:
        diff = [
            tau[(s_, h, "flowscore")] - tau[(s_, h, r["method"])] for (s_, h, m) in tau if m == "flowscore"
        ]
        if any(diff) and len(set(diff)) > 1:
            assert r["W"] == wilcoxon(diff, alternative="greater", zero_method="wilcox").statistic
            assert r["t"] == pytest.approx(ttest_1samp(diff, 0.0).statistic)
    md = (out / "report.md").read_text()
    assert (
        "| Encoder | Method | N | Mean Delta | 95% CI (bootstrap) | W | p W (Holm) | t | p t (Holm) |" in md
    )
    # Appendix J: FlowKL against FBD and PRD only, one Holm family, CI around the mean
    comp = rep["task1"]["comparisons"]
    assert [(c["a"], c["b"]) for c in comp] == [("flowkl", "fbd"), ("flowkl", "prd")]
    assert [c["p_holm"] for c in comp] == pytest.approx(holm([c["p"] for c in comp]))
    n_units = 2 * len(taxonomy.names())  # tasks x types (8 with the paper's four)
    for c in comp:
        assert c["ci_low"] <= c["mean_diff"] <= c["ci_high"] and c["n_units"] == n_units
    assert "Appendix J. FlowKL against each method" in md and f"| FlowKL | FBD | {n_units} |" in md
    # tau CIs hold the tau they bound; Random's is [0, 0]
    for t in (rep["task1"]["summary"], rep["task2"]["per_encoder"]["minilm"]["summary"]):
        for m, row in t["tau"].items():
            for h, v in row.items():
                lo, hi = t["tau_ci"][m][h]
                assert lo - 1e-12 <= v <= hi + 1e-12, (m, h)
        assert t["tau_ci"]["random"]["Avg"] == [0.0, 0.0]
    # Task 2 distance by k: absolute means per type equal the units' means
    curves = rep["task2"]["per_encoder"]["minilm"]["summary"]["distance_by_k"]
    fs = [u["distances"] for u in units if u["method"] == "flowscore" and u["type"] == "GR"]
    assert curves["flowscore"]["GR"]["mean"] == pytest.approx(list(np.mean(fs, axis=0)))
    assert all(
        lo <= m_ <= hi
        for lo, m_, hi in zip(
            curves["flowscore"]["GR"]["low"],
            curves["flowscore"]["GR"]["mean"],
            curves["flowscore"]["GR"]["high"],
        )
    )
    # Task 3: MAEs in both units, labelled; all turns are longer than system turns
    t3 = rep["task3"]["minilm"]["results"]
    for r in t3.values():
        assert r["all_turns"]["unit"] == "all turns"
        assert r["all_turns"]["mae_c_ref"] > r["mae_c_ref"]
    assert "MAEs in system turns" in md and "Task 3 MAEs in all turns" in md
    # Appendix I: at the paper's weights the sweep gives back the Score
    sw = rep["task3_weight_sweep"]["minilm"]
    i = [w[0] for w in sw["weights"]].index(0.35)
    assert sw["weights"][i] == pytest.approx([0.35, 0.35, 0.15, 0.15])
    for det, r in t3.items():
        assert sw["scores"][det][i] == pytest.approx(r["score"])
    from dialfork_metrics.methods import TASK3_REGIMES

    # a regime per family of detectors that ran (wf, workflow-aware, runs where the workflow is found)
    assert set(sw["winners"]) == {g for g, ds in TASK3_REGIMES.items() if set(ds) & set(t3)}
    assert {"baselines", "streaming"} <= set(sw["winners"])
    assert "Appendix I. Task 3 Score weights" in md
    for name in ("task1_comparisons.csv", "task3_all_turns.csv", "task3_weight_sweep.csv"):
        assert (out / name).read_text().count("\n") > 1, name
