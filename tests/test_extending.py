"""docs/extending.md, followed: each checklist done with a toy example of a few lines.

* a new metric: a ``(ref, cand) -> distance`` function plugged into Task 2 (``--metric``), and
  a built-in one: one :class:`dialfork_metrics.registry.MetricSpec` registered at run time, seen by
  ``score_pairs``, the benchmark's tables, the report and the method lists;
* a new generation backend: a class registered with ``generation.backends.register``, seen
  by the engine, the CLI, the device placement and the records' version;
* a new workflow source: a dict in the workflow-file format, a class implementing
  ``dialfork_dataset.sources.WorkflowSource``, and a source kind (``toy:PATH``) registered with
  ``dialfork_dataset.sources.register``, seen by every CLI that takes a source spec;
* a new Task 3 detector: one :class:`dialfork_metrics.task3.DetectorSpec` registered at run time
  (a toy "always the middle turn"), seen by ``make_detector``, the name lists, the CLIs, the
  benchmark's Task 3 run, its table and the weight sweep; bad entries are refused;
* a new hallucination type: ``tests/test_extending_type.py`` registers a toy fifth type at run time
  and runs generation, export, ``load_dataset``, the benchmark, the annotation tool and the audit on
  it; here, a type the registry does not name is refused by the variant pool.

The toys generate from ``examples/workflows/insurance.yaml`` (two tasks, no STAR needed).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import forks_per_source

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "workflows" / "insurance.yaml"


def read_records(folder: Path) -> list[dict]:
    return [json.loads(line) for f in sorted(folder.glob("*.jsonl")) for line in f.open(encoding="utf-8")]


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory) -> Path:
    """Template generation from the example workflow file: 2 tasks x 2 sources x (1 + forks_per_source())
    dialogues (17 with the paper's four types)."""
    from generation import GenerationConfig, generate_corpus

    out = tmp_path_factory.mktemp("extending") / "corpus"
    generate_corpus(GenerationConfig(star=f"workflow:{EXAMPLE}", out=str(out), per_task=2), progress=False)
    return out


# -- a new metric -----------------------------------------------------------------------------------
def toy_vocabulary_distance(ref: dict, cand: dict) -> float:
    """Toy Task 2 metric: 1 - Jaccard similarity of the two dialogues' word sets."""
    a, b = ({w for t in d["turns"] for w in t["text"].lower().split()} for d in (ref, cand))
    return 1.0 - len(a & b) / len(a | b)


def test_new_metric_plugs_into_task2(small_corpus):
    from dialfork_metrics.bench import load_corpus, load_custom_metric, run_task2

    name, fn = load_custom_metric("vocab=test_extending:toy_vocabulary_distance")  # what --metric takes
    assert (name, fn) == ("vocab", toy_vocabulary_distance)
    t2 = run_task2(load_corpus(small_corpus), encoder=None, methods=("random",), custom={name: fn})
    rows = [r for r in t2["units"] if r["method"] == "vocab"]
    assert len(rows) == 2 * 2 * len(taxonomy.names())  # sources x types, each ranking its 4 forks
    assert all(len(r["distances"]) == 4 and all(0 <= d <= 1 for d in r["distances"]) for r in rows)
    assert all(-1 <= r["tau"] <= 1 for r in rows)
    assert "vocab" in t2["methods"] and t2["summary"]["tau"]["vocab"]["Avg"] is not None


def toy_jaccard_core(refs: list, cands: list):
    """The toy metric as a registry core: validated turn lists in, one distance per pair out."""
    import numpy as np

    return np.array([toy_vocabulary_distance({"turns": a}, {"turns": b}) for a, b in zip(refs, cands)])


def toy_set_vocabulary(ctx, task: str, ref: list, tgt: list) -> float:
    """Toy Task 1 metric (a registry set core): 1 - Jaccard of the two sets' word sets."""
    return toy_vocabulary_distance(
        {"turns": [t for d in ref for t in d["turns"]]}, {"turns": [t for d in tgt for t in d["turns"]]}
    )


@pytest.fixture
def toy_registered():
    """The built-in checklist's one entry (the function is the toy above), undone afterwards."""
    from dialfork_metrics.registry import MetricSpec, register, unregister

    register(MetricSpec("vocab", "pair", "Vocabulary (Jaccard)", core=toy_jaccard_core, input="turns"))
    register(MetricSpec("vocab", "set", "Vocabulary (Jaccard)", core=toy_set_vocabulary))
    yield
    unregister("vocab", "pair")
    unregister("vocab", "set")


def test_new_builtin_metric_is_one_registry_entry(small_corpus, toy_registered):
    from pair_metric_tester import PairMetricTester

    from dialfork_metrics import bench
    from dialfork_metrics.dialogue import ALL_METHODS, score_pairs
    from dialfork_metrics.methods import LABELS, TASK1_METHODS, TASK2_METHODS
    from dialfork_metrics.report.markdown import task1_markdown, task2_markdown

    # the method lists, old names included
    assert "vocab" in TASK2_METHODS and "vocab" in bench.TASK2_METHODS and "vocab" in ALL_METHODS
    assert "vocab" in TASK1_METHODS and LABELS["vocab"] == "Vocabulary (Jaccard)"
    # score_pairs, and the shared tester's checks
    ref, cand = ["Hello there.", "Hi, how can I help?"], ["Hello.", "Hi, how can I help you?"]
    assert score_pairs([ref], [cand], ["vocab"], encoder=None)["vocab"][0] == pytest.approx(
        toy_vocabulary_distance({"turns": [{"text": t} for t in ref]}, {"turns": [{"text": t} for t in cand]})
    )
    tester = PairMetricTester("vocab")
    tester.check_entry_points()
    tester.check_input_forms()
    tester.check_bad_row_named()
    # the benchmark's Task 2 and Task 1 tables and the report
    corpus = bench.load_corpus(small_corpus)
    t2 = bench.run_task2(corpus, encoder=None, methods=("vocab", "random"))
    assert t2["methods"] == ["vocab", "random"] and t2["summary"]["tau"]["vocab"]["Avg"] is not None
    assert len([r for r in t2["units"] if r["method"] == "vocab"]) == 2 * 2 * len(taxonomy.names())
    assert "| Vocabulary (Jaccard) |" in task2_markdown({"per_encoder": {"none": t2}})
    t1 = bench.run_task1(corpus, encoder=None, methods=("vocab", "random"), progress=False)
    rows = [r for r in t1["units"] if r["method"] == "vocab"]
    assert rows and all(len(r["distances"]) == 4 and -1 <= r["tau"] <= 1 for r in rows)
    assert "Vocabulary (Jaccard)" in task1_markdown(t1)


def test_a_similarity_ranks_the_other_way(toy_registered):
    """``direction="higher"``: a similarity's tau is the distance's, on the negated values."""
    from dialfork_metrics.dialogue import score_quartets
    from dialfork_metrics.registry import MetricSpec, register, unregister

    register(
        MetricSpec(
            "vocab_sim",
            "pair",
            "Vocabulary overlap",
            input="turns",
            direction="higher",
            core=lambda refs, cands: 1.0 - toy_jaccard_core(refs, cands),
        )
    )
    try:
        src = ["Book a table for two.", "For when?", "Tonight at eight.", "Done: tonight at eight."]
        forks = {k: src[:k] + ["Would you like a pizza instead?", "No."] for k in (1, 2, 3)}
        (row,) = score_quartets([{"source": src, "type": "x", "forks": forks}], ["vocab", "vocab_sim"], None)
        assert row["tau"]["vocab_sim"] == row["tau"]["vocab"]
    finally:
        unregister("vocab_sim")


def test_a_flow_aware_metric_is_compared_with_the_controls_in_words():
    """The reports' sentence on controls reads the registry's ``flow_aware`` and ``control`` flags."""
    from dialfork_metrics.registry import MetricSpec, register, unregister
    from dialfork_metrics.report.markdown import TASK2_CONTROLS, TASK2_FLOW_METHODS, control_beats_sentence

    register(
        MetricSpec("vocab_flow", "pair", "Vocab flow", core=lambda a, b: None, input="turns", flow_aware=True)
    )
    try:
        assert "vocab_flow" in TASK2_FLOW_METHODS and "vocab_flow" not in TASK2_CONTROLS
        tau = {"vocab_flow": {"Avg": 0.2}, "shared_prefix": {"Avg": 0.5}}
        s = control_beats_sentence(tau, "same-source", TASK2_FLOW_METHODS, TASK2_CONTROLS)
        assert "Shared prefix (tau 0.500) beats Vocab flow (0.200)" in s
    finally:
        unregister("vocab_flow")
    assert "vocab_flow" not in TASK2_FLOW_METHODS


def listed(level: str) -> str:
    """The registered metric names of a level, as an unknown-name message lists them."""
    from dialfork_metrics.registry import names

    return ", ".join(names(level))


def test_registry_refuses_bad_entries():
    from dialfork_metrics.registry import MetricSpec, get, register

    with pytest.raises(ValueError, match="already registered"):
        register(MetricSpec("flowscore", "pair", "Again", core=toy_jaccard_core, input="turns"))
    with pytest.raises(ValueError, match="metric 'x': a pair metric declares input="):
        MetricSpec("x", "pair", "X", core=toy_jaccard_core)
    with pytest.raises(
        ValueError, match=re.escape(f"unknown Task 2 (pair) metric 'nope'; registered: {listed('pair')}")
    ):
        get("nope")


# -- a new Task 3 detector --------------------------------------------------------------------------
class MiddleTurnDetector:
    """Toy Task 3 detector: always the middle system turn (no training)."""

    def __init__(self, seed: int = 0):
        self.seed = seed  # unused: shows that the benchmark passes what the spec ``needs``

    def fit(self, dialogues, embeddings=None, **_):
        self.n_train_ = len(dialogues)
        return self

    def predict_many(self, dialogues, show_progress: bool = False):
        from dialfork_dataset.turns import as_turns

        return [(sum(t["speaker"] == "system" for t in as_turns(d)) + 1) // 2 for d in dialogues]


@pytest.fixture
def toy_detector():
    """The Task 3 checklist's one entry (the class above, named lazily), undone afterwards."""
    from dialfork_metrics.task3 import DetectorSpec
    from dialfork_metrics.task3 import registry as detector_registry

    detector_registry.register(
        DetectorSpec(
            "middle",
            "Always middle",
            "baselines",
            "test_extending:MiddleTurnDetector",
            needs=("seed",),
            in_benchmark=True,
            description="always the middle system turn",
        )
    )
    yield
    detector_registry.unregister("middle")


def test_new_detector_is_one_registry_entry(small_corpus, toy_detector):
    from dialfork_metrics import bench
    from dialfork_metrics.methods import LABELS, TASK3_DETECTORS, TASK3_REGIMES, regime
    from dialfork_metrics.report.markdown import _task3_header, task3_markdown, weight_sweep_markdown
    from dialfork_metrics.task3 import DETECTOR_NAMES, make_detector
    from dialfork_metrics.task3 import registry as detector_registry
    from dialfork_metrics.task3.__main__ import _build_parser as task3_parser

    # the name lists, old names included, and the CLIs that take a detector name
    assert "middle" in TASK3_DETECTORS and "middle" in bench.TASK3_DETECTORS and "middle" in DETECTOR_NAMES
    assert LABELS["middle"] == "Always middle" and regime("middle") == "baselines"
    assert (
        TASK3_REGIMES["baselines"] == detector_registry.names(regime="baselines")
        and TASK3_REGIMES["baselines"][-1] == "middle"
    )
    assert (
        task3_parser().parse_args(["predict", "--data", "x", "--out", "y", "--detector", "middle"]).detector
        == "middle"
    )
    assert "middle" in bench.build_parser().format_help()
    det = make_detector("middle", seed=3)
    assert isinstance(det, MiddleTurnDetector) and det.seed == 3
    # the benchmark's Task 3 run, its table and the weight sweep
    corpus = bench.load_corpus(small_corpus)
    t3 = bench.run_task3(
        corpus, None, detectors=("first", "middle"), progress=False, ablations=False, paper_table=False
    )
    assert list(t3["results"]) == ["first", "middle"]
    test = t3["predictions"]["middle"]
    assert len(test) == t3["n_test"] and all(isinstance(p, int) and p >= 1 for p in test.values())
    assert t3["results"]["middle"]["score"] is not None
    row = next(
        line for line in task3_markdown({"none": t3}).splitlines() if line.startswith("| Always middle |")
    )
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    assert len(cells) == len(_task3_header()) and cells[-1] not in ("", "-", "–")  # a Score
    sweep = bench.task3_weight_sweep(t3["results"])
    assert set(sweep["winners"]) == {"baselines"} and "middle" in sweep["scores"]
    assert "Appendix I" in weight_sweep_markdown({"none": sweep})


def test_detector_registry_refuses_bad_entries():
    from dialfork_dataset.registry import RegistryError
    from dialfork_metrics import bench
    from dialfork_metrics.task3 import DetectorSpec, make_detector
    from dialfork_metrics.task3 import registry as detector_registry

    with pytest.raises(ValueError, match="a Task 3 detector 'it' is already registered"):
        detector_registry.register(DetectorSpec("it", "IT again", "streaming", MiddleTurnDetector))
    with pytest.raises(ValueError, match=r"Task 3 detector 'x': regime 'fast' is not one of \('baselines'"):
        DetectorSpec("x", "X", "fast", MiddleTurnDetector)
    with pytest.raises(ValueError, match="Task 3 detector 'X': name must be a non-empty lower-case string"):
        DetectorSpec("X", "X", "other", MiddleTurnDetector)
    with pytest.raises(ValueError, match=r"Task 3 detector 'x': unknown needs \['gpu'\]; known: \('encoder'"):
        DetectorSpec("x", "X", "other", MiddleTurnDetector, needs=("gpu",))
    with pytest.raises(ValueError, match="Task 3 detector 'x': factory must be a class or function"):
        DetectorSpec("x", "X", "other", "test_extending.MiddleTurnDetector")
    with pytest.raises(ValueError, match=r"Task 3 detector 'x': in_benchmark=True but it needs \['forks'\]"):
        DetectorSpec("x", "X", "other", MiddleTurnDetector, needs=("forks",), in_benchmark=True)
    with pytest.raises(ValueError, match="Task 3 detector 'x' factory: cannot import 'Nope'"):
        DetectorSpec("x", "X", "other", "test_extending:Nope").build()
    with pytest.raises(TypeError, match="Task 3 detector 'it': method= is fixed by the name"):
        make_detector("it", method="ss")
    # an unknown name, everywhere a name is taken, lists the registered ones (read from the registry)
    registered = re.escape(
        f"unknown Task 3 detector 'nope'; registered: {', '.join(detector_registry.names())}"
    )
    with pytest.raises(RegistryError, match=registered):
        detector_registry.get("nope")
    with pytest.raises(ValueError, match=registered):
        make_detector("nope")
    with pytest.raises(RegistryError, match=registered):
        detector_registry.unregister("nope")
    with pytest.raises(
        bench.BenchError,
        match=re.escape(f"unknown Task 3 method(s) ['nope']; known: {', '.join(detector_registry.names())}"),
    ):
        bench.run_benchmark("unused", tasks=(3,), task3_detectors=("nope",))


# -- a new generation backend -----------------------------------------------------------------------
class ToyBackend:
    """Toy backend: says which turn it is and repeats the latest instruction it was given; ends at turn 14."""

    uses_messages = True  # the engine builds each agent's chat context (generation.prompts)

    def __init__(self, greeting: str = "Hello"):
        self.name = "toy"
        self.greeting = greeting

    def decoding(self) -> dict:
        return {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 32}

    def generate(self, requests):
        out = []
        for r in requests:  # the text depends on the request only: replay forks reproduce their prefix
            instruction = ([m["content"] for m in r.messages if m["role"] == "system"] or [""])[-1]
            text = f"{self.greeting}, {r.role} turn {r.turn_index}: {' '.join(instruction.split()[:6])}"
            out.append(text + " [END]" if r.turn_index >= 14 else text)
        return out


def toy_place(options: dict, state) -> dict:
    """Toy device placement (a BackendSpec's ``placement``): the process's device as ``greeting`` suffix."""
    return {**options, "greeting": f"{options.get('greeting', 'Hello')} from {state.device}"}


@pytest.fixture
def toy_backend():
    """Checklist step 2, at run time: one registry entry (step 1, the class, is ToyBackend above)."""
    from generation import backends
    from generation.backends import BACKENDS, BackendSpec

    spec = backends.register(
        BackendSpec(
            "toy",
            "test_extending:ToyBackend",
            llm=True,
            placement="test_extending:toy_place",
            needs=("server",),  # what it would need if it were real, in BackendSpec's vocabulary
        )
    )
    yield spec
    if "toy" in BACKENDS:  # a test may have unregistered it already (unregistering twice raises)
        backends.unregister("toy")


def test_new_backend_registers_and_generates(tmp_path, toy_backend):
    from dialfork_dataset.forks import system_turn_positions
    from generation import GenerationConfig, generate_corpus
    from generation.backends import get_backend

    assert isinstance(get_backend("toy", greeting="Hi"), ToyBackend)
    out = tmp_path / "toy_corpus"
    generate_corpus(
        GenerationConfig(
            star=f"workflow:{EXAMPLE}",
            out=str(out),
            backend="toy",
            backend_options={"greeting": "Hi"},
            per_task=1,
        ),
        progress=False,
    )
    recs = read_records(out)
    assert len(recs) == 2 * (1 + forks_per_source()) and {r["generator"] for r in recs} == {"toy"}
    forks = [r for r in recs if r["hallucination_type"]]
    src = {r["dialogue_id"]: r for r in recs if r["hallucination_type"] is None}
    for f in forks:  # the injected instruction reaches the system agent at the fork turn t_k
        parent = src[f["source_id"]]
        t = system_turn_positions(f["turns"])[f["fork_turn"] - 1]  # t_k counts system turns from 1
        assert [x["text"] for x in f["turns"][:t]] == [x["text"] for x in parent["turns"][:t]]
        assert f["turns"][t]["text"] != parent["turns"][t]["text"]


def test_new_backend_is_seen_by_the_cli_placement_and_version(tmp_path, toy_backend, capsys):
    """The registry entry is all the rest needs: ``--backend toy`` (choices read at parse time), the
    default conformance check (``llm``), device placement under accelerate (``placement``), the
    records' code_version (``target``)."""
    from types import SimpleNamespace

    from generation import backends
    from generation.backends import BACKENDS, UnknownBackendError, get_backend
    from generation.cli import main
    from generation.conformance import DEFAULT_CHECK
    from generation.distributed import backend_options_for_process
    from generation.engine.version import backend_code_files
    from generation.options import build_parser, conformance_check

    out = tmp_path / "cli"
    argv = [
        "--backend",
        "toy",
        "--backend-option",
        "greeting=Hey",
        "--source",
        f"workflow:{EXAMPLE}",
        "--out",
        str(out),
        "--per-task",
        "1",
        "--no-progress",
        "--quiet",
    ]
    assert conformance_check(build_parser().parse_args(argv)) == DEFAULT_CHECK  # an LLM backend: D+ checked
    assert main([*argv, "--no-check-conformance"]) == 0, capsys.readouterr().err
    recs = read_records(out)
    assert len(recs) == 2 * (1 + forks_per_source()) and {r["generator"] for r in recs} == {"toy"}
    assert all(t["text"].startswith("Hey,") for r in recs for t in r["turns"])
    assert "toy: an OpenAI-compatible server" in " ".join(build_parser().format_help().split())
    config = SimpleNamespace(backend="toy", backend_options={"greeting": "Hi"})
    assert backend_options_for_process(config, SimpleNamespace(num_processes=2, device="cuda:1")) == {
        "greeting": "Hi from cuda:1"
    }
    assert [p.name for p in backend_code_files("toy")] == ["test_extending.py"]
    backends.unregister("toy")
    assert "toy" not in BACKENDS
    with pytest.raises(
        UnknownBackendError, match=re.escape(f"unknown backend 'toy'; registered: {', '.join(BACKENDS)}")
    ):
        get_backend("toy")
    with pytest.raises(SystemExit):
        build_parser().parse_args(argv)  # no longer a choice
    assert "invalid choice: 'toy'" in capsys.readouterr().err


def test_backend_registry_refuses_bad_entries():
    from generation import backends
    from generation.backends import BackendSpec

    with pytest.raises(ValueError, match="backend 'template' is already registered"):
        backends.register("template", "x:Y")
    with pytest.raises(ValueError, match="backend 'bad': target must be 'module:attr'"):
        BackendSpec("bad", "no_colon")


# -- a new workflow source --------------------------------------------------------------------------
def test_new_workflow_source_from_a_dict(tmp_path):
    from dialfork_dataset.sources import open_source
    from dialfork_dataset.workflow.files import validate_workflow

    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))  # any format, converted to this dict
    data["tasks"] = [t for t in data["tasks"] if t["name"] == "insurance_claim_status"]
    data["tasks"][0]["domain"] = "claims"
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    assert validate_workflow(path) == []
    src = open_source(f"workflow:{path}")
    assert list(src.tasks) == ["insurance_claim_status"] and src.domains == {
        "claims": ["insurance_claim_status"]
    }
    steps = src.task("insurance_claim_status").steps()
    assert steps and src.task("insurance_claim_status").digraph().number_of_nodes() >= len(steps)

    data["tasks"][0]["steps"][0]["next"] = "no_such_step"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    problems = validate_workflow(path)
    assert (
        problems and all(p.startswith(f"{path}:") for p in problems) and "no_such_step" in "".join(problems)
    )


class HappyOnly:
    """Toy :class:`~dialfork_dataset.sources.WorkflowSource`: another source, its happy scenarios only."""

    def __init__(self, inner):
        self.inner = inner
        self.tasks, self.domains, self.dbs = inner.tasks, inner.domains, inner.dbs

    @property
    def scenarios(self):
        return [s for s in self.inner.scenarios if s.happy]

    def task(self, name):
        return self.inner.task(name)

    def scenario(self, scenario_id):
        return self.inner.scenario(scenario_id)

    def scenarios_for(self, task=None, single_task=True, happy=None):
        return [s for s in self.inner.scenarios_for(task, single_task, happy) if s.happy]

    def length_budget(self, task):
        return self.inner.length_budget(task)


def test_new_workflow_source_class(tmp_path):
    from dialfork_dataset.sources import is_source, open_source, require
    from generation import GenerationConfig, generate_corpus

    src = HappyOnly(open_source(f"workflow:{EXAMPLE}"))
    assert is_source(src) and open_source(src) is src
    require(src, "surface_templates", needed_by="the template backend")  # what the template backend needs
    out = tmp_path / "happy"
    generate_corpus(
        GenerationConfig(star=f"workflow:{EXAMPLE}", out=str(out), per_task=5), corpus=src, progress=False
    )
    used = {r["scenario_id"] for r in read_records(out)}  # fc05 and cs05 (unhappy) are left out
    assert used == {"fc01", "fc02", "fc03", "fc04", "fc06", "cs01", "cs02", "cs03", "cs04", "cs06"}


def open_toy(path):
    """Toy source kind's opener: a workflow file, its happy scenarios only."""
    from dialfork_dataset.workflow.files import WorkflowCorpus

    return HappyOnly(WorkflowCorpus(path))


@pytest.fixture
def toy_source_kind():
    """The class checklist's step 4, at run time: one registry entry makes ``toy:PATH`` a spec."""
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset.sources import SourceKind

    kind = source_kinds.register(
        SourceKind(
            "toy",
            "test_extending:open_toy",
            "a workflow file (happy scenarios)",
            title="toy",
            source_dataset="original",
            licence="CC0-1.0",
            credit="a toy workflow file (CC0-1.0)",
        )
    )
    yield kind
    source_kinds.unregister("toy")


def test_new_source_kind_is_one_registry_entry(tmp_path, toy_source_kind, capsys):
    """``toy:PATH`` works wherever a source spec is taken: ``python -m generation --source`` (its
    ``main()``, in process), the one spec parser, the audit's ``--source``, Task 3's source read back
    from a corpus's manifest, the judge's workflow text and the dataset card's credits."""
    from dialfork_dataset.sources import (
        card_source,
        open_source,
        parse_source_spec,
        recorded_source,
        source_identity,
        source_spec_of,
    )
    from dialfork_metrics.audit.core import parse_source
    from dialfork_metrics.judge import LLMJudge
    from dialfork_metrics.task3.__main__ import _manifest_star
    from generation.cli import main
    from generation.options import build_parser

    spec = f"toy:{EXAMPLE}"
    assert (
        parse_source_spec(spec) == ("toy", EXAMPLE.resolve())
        and source_identity(spec) == f"toy:{EXAMPLE.resolve()}"
    )
    assert isinstance(open_source(spec), HappyOnly)
    assert "toy:PATH, a workflow file (happy scenarios)" in " ".join(build_parser().format_help().split())
    out = tmp_path / "toy_source"
    assert main(["--source", spec, "--out", str(out), "--per-task", "5", "--no-progress", "--quiet"]) == 0, (
        capsys.readouterr().err
    )
    used = {r["scenario_id"] for r in read_records(out)}  # the unhappy fc05 and cs05 are left out
    assert used == {"fc01", "fc02", "fc03", "fc04", "fc06", "cs01", "cs02", "cs03", "cs04", "cs06"}
    assert json.loads((out / "manifest.json").read_text(encoding="utf-8"))["config"]["star"] == spec
    assert _manifest_star(str(out)) == recorded_source(spec) == spec  # Task 3 reads the source back
    assert parse_source(spec, None) == spec  # the agent audit's --source
    judge = LLMJudge(client=object(), star_dir=spec)
    assert judge.workflow_for("insurance_claim_status") == open_source(spec).task(
        "insurance_claim_status"
    ).render_steps(with_templates=False)
    assert card_source(spec) == {
        "kind": "toy",
        "title": "toy",
        "source_dataset": "original",
        "licence": "CC0-1.0",
        "credit": "a toy workflow file (CC0-1.0)",
        "note": None,
    }
    assert card_source(None)["source_dataset"] == "extended|other-star"  # a corpus without a manifest: STAR
    assert source_spec_of(open_source(f"workflow:{EXAMPLE}")) == f"workflow:{EXAMPLE.resolve()}"


def test_an_unknown_source_kind_lists_the_registered_ones(toy_source_kind):
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset.sources import SOURCE_KINDS, SourceError, SourceKind, parse_source_spec
    from dialfork_metrics.audit.core import AuditError, parse_source

    kinds = tuple(SOURCE_KINDS)  # the registered kinds, in registration order: the toy is the last
    assert kinds[:2] == ("star", "workflow") and kinds[-1] == "toy"
    with pytest.raises(
        SourceError, match=re.escape(f"unknown source kind 'toyy'; registered: {', '.join(kinds)}")
    ):
        parse_source_spec("toyy:/nowhere")
    with pytest.raises(AuditError, match=re.escape("expected " + " or ".join(f"{k}:PATH" for k in kinds))):
        parse_source("toyy:/nowhere", None)
    with pytest.raises(SourceError, match="no path after 'toy:'"):
        parse_source_spec("toy:")
    with pytest.raises(ValueError, match="source kind 'star' is already registered"):
        source_kinds.register(SourceKind("star", "x:y"))


# -- a new hallucination type: tests/test_extending_type.py registers one at run time -----------------
def test_a_type_the_taxonomy_does_not_name_is_refused(tmp_path):
    """Without step 1, the variant pool refuses the type: the taxonomy is the one list."""
    from generation.variants import VariantError, default_variants_data, load_variants

    pool = default_variants_data()
    pool["types"]["TOY"] = pool["types"]["GR"]
    p = tmp_path / "v.yaml"
    p.write_text(yaml.safe_dump(pool), encoding="utf-8")
    with pytest.raises(VariantError, match=r"unknown type\(s\) \['TOY'\]"):
        load_variants(p)


def test_counting_the_records_of_a_source(small_corpus):
    """FORKS_PER_SOURCE (taxonomy) is what a source gets: one fork per (type, position)."""
    from dialfork_dataset.taxonomy import FORKS_PER_SOURCE

    per_source = Counter(r["source_id"] for r in read_records(small_corpus) if r["hallucination_type"])
    assert set(per_source.values()) == {FORKS_PER_SOURCE}


# -- argument order (docs/extending.md, "Argument order") ------------------------------------------
def _params_of(path: Path, name: str) -> list[list[str]]:
    import ast

    return [
        [a.arg for a in n.args.args if a.arg != "self"]
        for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(n, ast.FunctionDef) and n.name == name
    ]


def test_argument_order_per_layer():
    root = Path(__file__).resolve().parents[1] / "dialfork_metrics"
    # evaluate modules and torchmetrics: predictions, references (evaluate's order)
    modules = sorted((root / "modules").glob("*/*.py"))
    computes = [p for f in modules for p in _params_of(f, "_compute")]
    assert len(computes) >= 4 and all(p[:2] == ["predictions", "references"] for p in computes), computes
    updates = _params_of(root / "torchmetrics.py", "update")
    assert len(updates) >= 3 and all(p[:2] == ["predictions", "references"] for p in updates), updates
    # functions: the reference first (d(D, D'), KL(reference || target))
    for fn in (
        "flowscore",
        "flowdtw",
        "mean_turn",
        "full_dialog",
        "turn_count_diff",
        "word_count_diff",
        "shared_prefix",
    ):
        assert _params_of(root / "dialogue.py", fn)[0][:2] == ["ref", "cand"], fn
    assert _params_of(root / "dialogue.py", "score_pairs")[0][:2] == ["references", "candidates"]
    for fn in ("fbd_from_embeddings", "prd_from_embeddings"):
        assert _params_of(root / "setlevel.py", fn)[0][:2] == ["X_ref", "X_tgt"], fn
