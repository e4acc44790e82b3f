"""Report figures and tables rendered from a hand-made report (no encoder): every PNG is drawn."""

import numpy as np
import pytest

from dialfork_dataset import taxonomy
from dialfork_metrics.bench import distance_by_k, task3_weight_sweep, tau_confidence_intervals
from dialfork_metrics.report import (
    plot_distance_by_k_panels,
    plot_tau_bars_ci,
    task3_all_turns_markdown,
    weight_sweep_markdown,
    write_figures,
)
from dialfork_metrics.task3.scorer import score_predictions

PNG = b"\x89PNG\r\n\x1a\n"


def _task2_units(n_sources=6, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_sources):
        for h in taxonomy.names():
            d = np.sort(rng.random(4))[::-1] + 0.05 * rng.random(4)
            rows.append(
                {
                    "source_id": f"s{s}",
                    "type": h,
                    "method": "flowscore",
                    "distances": d.tolist(),
                    "tau": float(rng.uniform(0.5, 1)),
                }
            )
            rows.append(
                {
                    "source_id": f"s{s}",
                    "type": h,
                    "method": "turn_count_diff",
                    "distances": (10 * rng.random(4)).tolist(),
                    "tau": float(rng.uniform(-1, 1)),
                }
            )
            rows.append(
                {
                    "source_id": f"s{s}",
                    "type": h,
                    "method": "random",
                    "distances": rng.random(4).tolist(),
                    "tau": 0.0,
                }
            )
    return rows


def _task3_results():
    gold, preds, types = [], {}, taxonomy.names()
    for i in range(12):
        turns = [{"speaker": "user" if j % 2 == 0 else "system", "text": "x"} for j in range(10)]
        g = {
            "dialogue_id": f"d{i}",
            "num_system_turns": 5,
            "turns": turns,
            "hallucination_type": None if i < 4 else types[i % len(types)],
            "fork_turn": None if i < 4 else 1 + i % 5,
        }
        gold.append(g)
    out = {}
    for name, rule in {
        "first": lambda g: 1,
        "last": lambda g: 5,
        "it": lambda g: g["fork_turn"] or None,
        "ss": lambda g: None,
    }.items():
        preds = {g["dialogue_id"]: rule(g) for g in gold}
        out[name] = score_predictions(preds, gold)
    return out


def test_tau_ci_and_bars(tmp_path):
    rows = _task2_units()
    methods = ["flowscore", "turn_count_diff", "random"]
    ci = tau_confidence_intervals(rows, methods, "source_id", n_resamples=300, seed=1)
    types = taxonomy.names()
    table = {
        m: {h: float(np.mean([r["tau"] for r in rows if r["method"] == m and r["type"] == h])) for h in types}
        for m in methods
    }
    for m in methods:
        table[m]["Avg"] = float(np.mean([table[m][h] for h in types]))
        for h in (*types, "Avg"):
            assert ci[m][h][0] <= table[m][h] + 1e-12 and table[m][h] <= ci[m][h][1] + 1e-12
    assert ci["random"]["WIC"] == [0.0, 0.0]
    drawn = plot_tau_bars_ci(table, ci, "tau", tmp_path / "tau.png")
    assert drawn == ["flowscore", "turn_count_diff"]  # Random (all zero) has no bar and no legend entry
    assert (tmp_path / "tau.png").read_bytes()[:8] == PNG


def test_distance_by_k_is_absolute(tmp_path):
    rows = _task2_units()
    curves = distance_by_k(rows, ["flowscore", "turn_count_diff", "random"], n_resamples=300, seed=0)
    tc = np.array([r["distances"] for r in rows if r["method"] == "turn_count_diff" and r["type"] == "SSPC"])
    assert curves["turn_count_diff"]["SSPC"]["mean"] == pytest.approx(
        tc.mean(axis=0).tolist()
    )  # not rescaled
    assert curves["turn_count_diff"]["SSPC"]["n"] == 6
    assert plot_distance_by_k_panels(curves, "d", tmp_path / "d.png") == ["flowscore", "turn_count_diff"]
    assert (tmp_path / "d.png").read_bytes()[:8] == PNG


def test_weight_sweep_and_task3_figures(tmp_path):
    res = _task3_results()
    assert res["ss"]["mae_h"] is None and res["ss"]["cov_h"] == 0.0  # flags nothing
    sw = task3_weight_sweep(res)
    assert sw["winners"]["streaming"] == ["it"] * len(sw["weights"]) and sw["stable"]["streaming"]
    assert [w[0] + w[2] for w in sw["weights"]] == pytest.approx([0.5] * len(sw["weights"]))
    with pytest.raises(ValueError, match="outside"):
        task3_weight_sweep(res, mae_weights=(0.6,))
    md = weight_sweep_markdown({"enc": sw})
    assert "| w (MAE_h / MAE_c / cov_h / cov_c) | winner baselines (Score) | winner streaming (Score) |" in md
    assert (
        "| 0.35 / 0.35 / 0.15 / 0.15 |" in md
        and "Same winner at every weight: baselines: yes, streaming: yes." in md
    )
    t3 = {"enc": {"results": res, "n_train": 1, "n_test": 12}}
    assert "Task 3 MAEs in all turns" in task3_all_turns_markdown(t3)
    report = {"task3": t3, "task3_weight_sweep": {"enc": sw}}
    paths = write_figures(report, tmp_path)
    assert [p.name for p in paths] == ["task3_summary_enc.png", "task3_weights_enc.png"]
    for p in paths:
        assert p.read_bytes()[:8] == PNG and p.stat().st_size > 10_000


def test_report_md_embeds_every_figure(tmp_path):
    """report.md shows every PNG written next to it (issue 31: it embedded none), by a relative
    link that exists, with the figure's title as its caption; without plots it has no section."""
    import re

    from dialfork_metrics.report import write_reports

    res = _task3_results()
    report = {
        "meta": {
            "data": "x",
            "fingerprint": "f" * 16,
            "n_records": 12,
            "n_conformant": 4,
            "encoders": ["enc"],
            "seed": 0,
        },
        "timings": {"total": 1.0, "encoding_share": 0.5},
        "task3": {"enc": {"results": res, "n_train": 1, "n_test": 12}},
        "task3_weight_sweep": {"enc": task3_weight_sweep(res)},
    }
    paths = write_reports(report, tmp_path)
    pngs = sorted(p.name for p in paths if p.suffix == ".png")
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    linked = re.findall(r"!\[([^\]]+)\]\(([^)]+)\)", md)
    assert sorted(name for _, name in linked) == pngs == ["task3_summary_enc.png", "task3_weights_enc.png"]
    assert all((tmp_path / name).is_file() for _, name in linked)
    assert ("Task 3 (enc): Score under other weights (Appendix I)", "task3_weights_enc.png") in linked
    assert md.index("## Figures") < md.index("Skipped units")
    write_reports(report, tmp_path / "noplots", plots=False)
    assert "## Figures" not in (tmp_path / "noplots" / "report.md").read_text(encoding="utf-8")
