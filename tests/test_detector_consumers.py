"""Every consumer of a Task 3 detector reads its registry entry (issue 45 item 2).

``DetectorSpec.build_from`` passes a detector only what its ``needs`` name; ``save_format`` and
``loader`` say how it is saved and loaded back (``load_detector`` dispatches on them); the Task 3 CLI
(``--detector-option``, ``--save-detector``, ``--load-detector``), the audit and the guard CLI build
a detector registered at run time, one that takes no ``encoder=``, without a name of their own."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from dialfork_metrics.task3 import registry as detector_registry
from dialfork_metrics.task3.registry import DetectorSpec

TOY_FORMAT = "dialfork-test-toy-turn"
TURNS = [
    {"speaker": "user", "text": "Hi, what's the weather?"},
    {"speaker": "system", "text": "Which city?"},
    {"speaker": "user", "text": "Detroit."},
    {"speaker": "system", "text": "For which day?"},
    {"speaker": "user", "text": "Monday."},
    {"speaker": "system", "text": "Sunny in Detroit on Monday."},
]


class ToyTurnDetector:
    """Always system turn ``turn`` (the last one in shorter dialogues); no encoder; saved as its
    ``config.json``."""

    def __init__(self, turn: int = 1, false_alarm_rate: float = 0.05):
        self.turn = turn
        self.false_alarm_rate = false_alarm_rate

    def get_params(self) -> dict:
        return {"turn": self.turn, "false_alarm_rate": self.false_alarm_rate}

    def fit(self, dialogues, embeddings=None, **_):
        self.n_train_ = len(list(dialogues))
        return self

    def predict_many(self, dialogues, embeddings=None, show_progress=False):
        from dialfork_dataset.turns import as_turns

        return [min(self.turn, sum(t["speaker"] == "system" for t in as_turns(d))) for d in dialogues]

    def config(self) -> dict:
        return {"detector": "toy-turn", **self.get_params()}

    def save(self, path):
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        cfg = {"format": TOY_FORMAT, **self.get_params(), "n_train": self.n_train_}
        (path / "config.json").write_text(json.dumps(cfg))
        return path

    @classmethod
    def load(cls, path):  # takes no encoder: load_detector must not pass one
        cfg = json.loads((Path(path) / "config.json").read_text())
        det = cls(turn=cfg["turn"], false_alarm_rate=cfg["false_alarm_rate"])
        det.n_train_ = cfg["n_train"]
        return det


class NeverFitted(ToyTurnDetector):
    """A detector that cannot be saved, and must not be fitted by a run refused up front."""

    def fit(self, dialogues, embeddings=None, **_):
        raise AssertionError("fitted, but the run should have been refused before fitting")


class Recorder:
    """Keeps the keyword arguments it was built with (explicit ones: an unexpected keyword is a TypeError)."""

    def __init__(self, seed: int = 0, alpha: float = 1.0, workflow=None):
        self.kw = {"seed": seed, "alpha": alpha, "workflow": workflow}


def ss_without_encoder_need(false_alarm_rate: float = 0.05):
    """A streaming SS detector that picks its own encoder and settings (its spec needs no encoder)."""
    from dialfork_metrics.task3.streaming import StreamingDetector

    return StreamingDetector(
        method="ss",
        node_confidence=False,
        order=2,
        calibration="in_sample",
        scope="pooled",
        encoder="minilm",
        false_alarm_rate=false_alarm_rate,
    )


@pytest.fixture
def toy_detectors():
    """``toy-turn`` (saveable, needs false_alarm_rate), ``toy-nosave`` (no save capability) and
    ``toy-ss`` (a guard-able streaming detector that needs no encoder), removed afterwards."""
    here = __name__
    specs = [
        DetectorSpec(
            "toy-turn",
            "Toy turn",
            "other",
            f"{here}:ToyTurnDetector",
            ("false_alarm_rate",),
            save_format=TOY_FORMAT,
            loader=f"{here}:ToyTurnDetector.load",
        ),
        DetectorSpec("toy-nosave", "Toy no save", "other", f"{here}:NeverFitted"),
        DetectorSpec(
            "toy-ss",
            "Toy SS",
            "streaming",
            f"{here}:ss_without_encoder_need",
            ("false_alarm_rate",),
            guard=True,
        ),
    ]
    for s in specs:
        detector_registry.register(s)
    yield
    for s in specs:
        detector_registry.unregister(s.name)


def _cli(main, *args: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([str(a) for a in args])
    return rc, out.getvalue(), err.getvalue()


def _task3(*args: object) -> tuple[int, str, str]:
    from dialfork_metrics.task3.__main__ import main

    return _cli(main, *args)


def _write(path: Path, n: int) -> Path:
    rows = [{"dialogue_id": f"d{i}", "task": "weather", "turns": TURNS[: 2 * (i % 3 + 1)]} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


# -- the spec ---------------------------------------------------------------------------------------
def test_build_from_passes_only_what_the_detector_needs():
    spec = DetectorSpec("rec", "Rec", "other", Recorder, ("seed",))
    everything = {"encoder": object(), "workflow": "star:x", "false_alarm_rate": 0.2, "seed": 3, "forks": []}
    assert spec.build_from(everything, alpha=2.0).kw == {"seed": 3, "alpha": 2.0, "workflow": None}
    assert spec.build_from(everything, seed=5).kw["seed"] == 5  # an option wins over what is available
    assert DetectorSpec("rec", "Rec", "other", Recorder, ("workflow", "forks")).build_from(everything).kw == {
        "seed": 0,
        "alpha": 1.0,
        "workflow": "star:x",  # forks is a need, never a keyword
    }
    with pytest.raises(
        ValueError, match=r"Task 3 detector 'rec': build_from got \['order'\], which are not needs"
    ):
        spec.build_from({"order": 3})
    with pytest.raises(TypeError):  # an option the factory does not take still fails
        spec.build_from({}, beta=1)
    # the built-ins: a detector that needs no encoder never gets one
    assert type(detector_registry.get("first").build_from(everything)).__name__ == "FirstTurnBaseline"
    assert detector_registry.get("random").build_from(everything).seed == 3
    it = detector_registry.get("it").build_from(
        {"encoder": "minilm", "seed": 1, "false_alarm_rate": 0.1}, order=3
    )
    assert (it.get_params()["order"], it.get_params()["false_alarm_rate"], it.method) == (3, 0.1, "it")


def test_parameters_and_check_options_name_the_detector():
    spec = detector_registry.get("it")
    params = spec.parameters()
    assert "order" in params and "encoder" in params and "method" not in params  # method: fixed by the name
    spec.check_options(["order", "false_alarm_rate"])
    with pytest.raises(
        TypeError, match=r"^--detector-option nope: Task 3 detector 'it' takes no such option; "
    ):
        spec.check_options(["nope"], "--detector-option")
    with pytest.raises(TypeError, match="method: fixed by the name of Task 3 detector 'it'"):
        spec.check_options(["method"])
    assert detector_registry.get("first").parameters() == ()
    assert DetectorSpec("p", "P", "other", lambda **kw: kw).parameters() is None  # takes anything


def test_save_capability_is_validated_and_filled_for_the_built_ins():
    from dialfork_metrics.task3.baselines import trivial as baselines
    from dialfork_metrics.task3.streaming import FORMAT as STREAMING_FORMAT
    from dialfork_metrics.task3.supervised import classifier as workflow_classifier
    from dialfork_metrics.task3.workflow import detector as workflow_detector

    with pytest.raises(ValueError, match="Task 3 detector 'x': save_format is given without loader"):
        DetectorSpec("x", "X", "other", Recorder, save_format="fmt")
    with pytest.raises(ValueError, match="Task 3 detector 'x': loader is given without save_format"):
        DetectorSpec("x", "X", "other", Recorder, loader=f"{__name__}:ToyTurnDetector.load")
    with pytest.raises(ValueError, match="Task 3 detector 'x': loader must be a function"):
        DetectorSpec("x", "X", "other", Recorder, save_format="fmt", loader="no.colon")
    with pytest.raises(ValueError, match="Task 3 detector 'x': save_format must be a non-empty string"):
        DetectorSpec("x", "X", "other", Recorder, save_format=" ", loader=Recorder)
    with pytest.raises(
        ValueError, match="save_format 'dialfork-task3-baseline' is that of first, last, random"
    ):
        detector_registry.register(
            DetectorSpec("x", "X", "other", Recorder, save_format=baselines.FORMAT, loader=Recorder)
        )
    expected = {
        "first": baselines.FORMAT,
        "random": baselines.FORMAT,
        "it": STREAMING_FORMAT,
        "ss+nc": STREAMING_FORMAT,
        "wf": workflow_detector.FORMAT,
        "wf-sup": workflow_classifier.FORMAT,
        "llm": None,
    }
    assert {n: detector_registry.get(n).save_format for n in expected} == expected
    assert "llm" not in detector_registry.names(can_save=True) and "wf-sup" in detector_registry.names(
        can_save=True
    )
    for n in detector_registry.names(can_save=True):
        assert callable(detector_registry.get(n).loader_fn()), n
    with pytest.raises(ValueError, match="Task 3 detector 'llm' cannot be saved or loaded"):
        detector_registry.get("llm").loader_fn()


def test_load_detector_goes_through_the_registry(tmp_path, toy_detectors):
    from dialfork_metrics.task3 import load_detector, make_detector
    from dialfork_metrics.task3.detectors import saved_detector_spec

    det = make_detector("toy-turn", turn=2).fit([TURNS])
    back = load_detector(det.save(tmp_path / "toy"), encoder="minilm")  # its loader takes no encoder
    assert isinstance(back, ToyTurnDetector) and (back.turn, back.n_train_) == (2, 1)
    assert saved_detector_spec(tmp_path / "toy").name == "toy-turn"
    base = load_detector(make_detector("random", seed=4).save(tmp_path / "rnd"), encoder="minilm")
    assert type(base).__name__ == "RandomTurnBaseline" and base.seed == 4
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "config.json").write_text(json.dumps({"format": "nope"}))
    with pytest.raises(
        ValueError,
        match=r"unknown detector format 'nope'; registered formats: .*dialfork-test-toy-turn \(toy-turn\)",
    ):
        load_detector(tmp_path / "odd")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_detector(tmp_path)


# -- the Task 3 CLI ---------------------------------------------------------------------------------
def test_cli_detector_options_save_and_load_a_run_time_detector(tmp_path, toy_detectors):
    data, fit = _write(tmp_path / "mine.jsonl", 5), _write(tmp_path / "fit.jsonl", 3)
    common = ("predict", "--data", data, "--no-progress")
    rc, _, err = _task3(
        *common,
        "--fit-data",
        fit,
        "--detector",
        "toy-turn",
        "--detector-option",
        "turn=2",
        "--detector-option",
        "false_alarm_rate=0.2",
        "--out",
        tmp_path / "a.jsonl",
        "--save-detector",
        tmp_path / "det",
    )
    assert rc == 0, err
    assert "fitting toy-turn on 3 conformant train dialogues" in err
    preds = [json.loads(x)["prediction"] for x in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert preds == [1, 2, 2, 1, 2]
    report = json.loads((tmp_path / "a.jsonl.report.json").read_text())
    assert report["detector"] == {"detector": "toy-turn", "turn": 2, "false_alarm_rate": 0.2}
    assert json.loads((tmp_path / "det" / "config.json").read_text())["format"] == TOY_FORMAT
    # loaded back through the registry (the --detector named is not what decides how)
    rc, _, err = _task3(
        *common, "--detector", "first", "--load-detector", tmp_path / "det", "--out", tmp_path / "b.jsonl"
    )
    assert rc == 0, err
    assert (tmp_path / "b.jsonl").read_text() == (tmp_path / "a.jsonl").read_text()
    assert json.loads((tmp_path / "b.jsonl.report.json").read_text())["detector"]["turn"] == 2


def test_cli_refuses_bad_options_and_unsaveable_detectors_up_front(tmp_path, toy_detectors):
    data = _write(tmp_path / "mine.jsonl", 2)
    out = tmp_path / "p.jsonl"
    common = ("predict", "--data", data, "--fit-data", data, "--out", out, "--no-progress")
    rc, _, err = _task3(*common, "--detector", "toy-turn", "--detector-option", "nope=1")
    assert rc == 2 and err.count("\n") == 1, err
    assert err == (
        "error: --detector-option nope: Task 3 detector 'toy-turn' takes no such option; "
        "its parameters: turn, false_alarm_rate\n"
    )
    rc, _, err = _task3(*common, "--detector", "it", "--detector-option", "ordre=3")
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith(
        "error: --detector-option ordre: Task 3 detector 'it' takes no such option; its parameters: order, K, tau,"
    )
    rc, _, err = _task3(*common, "--detector", "it", "--detector-option", "method=ss")
    assert rc == 2 and "fixed by the name" in err
    rc, _, err = _task3(*common, "--detector", "toy-turn", "--detector-option", "turn")
    assert rc == 2 and "expected KEY=VALUE" in err
    rc, _, err = _task3(*common, "--detector", "toy-nosave", "--save-detector", tmp_path / "det")
    assert rc == 2 and err.count("\n") == 1, err  # refused before fitting (NeverFitted.fit raises)
    assert "--save-detector: detector 'toy-nosave' cannot be saved" in err
    assert (
        "the detectors that can: " + ", ".join(detector_registry.names(can_save=True)) in err
        and "llm" not in err
    )
    assert not out.exists() and not (tmp_path / "det").exists()


def test_cli_detector_option_reaches_a_streaming_constructor(tmp_path):
    fit = _write(tmp_path / "fit.jsonl", 6)
    rc, _, err = _task3(
        "predict",
        "--data",
        fit,
        "--fit-data",
        fit,
        "--detector",
        "ss",
        "--calibration",
        "in_sample",
        "--scope",
        "pooled",
        "--order",
        "3",
        "--detector-option",
        "order=2",
        "--detector-option",
        "K=4",
        "--out",
        tmp_path / "p.jsonl",
        "--no-progress",
    )
    assert rc == 0, err
    report = json.loads((tmp_path / "p.jsonl.report.json").read_text())
    assert (report["detector"]["order"], report["detector"]["K"]) == (2, 4)  # over --order 3
    assert report["n_train"] == 6 and report["vocab_size"] > 0


# -- the audit and the guard ------------------------------------------------------------------------
class _HashModel:
    """A stand-in sentence model: each text's embedding is a fixed function of its bytes."""

    def get_sentence_embedding_dimension(self) -> int:
        return 16

    def encode(self, texts, **_):
        import hashlib

        import numpy as np

        seeds = [int.from_bytes(hashlib.sha256(t.encode()).digest()[:8], "little") for t in texts]
        return np.stack([np.random.default_rng(s).normal(size=16) for s in seeds]).astype(np.float32)


def test_audit_builds_a_run_time_detector_that_takes_no_encoder(
    template_corpus, star_dir, tmp_path, toy_detectors
):
    from types import SimpleNamespace

    from dialfork_dataset.star import StarCorpus
    from dialfork_metrics.audit import audit_agent
    from dialfork_metrics.audit.__main__ import build_parser
    from dialfork_metrics.audit.report import audit_detector_names, load_reference, score_audit
    from dialfork_metrics.audit.store import Store
    from dialfork_metrics.encoders import Encoder
    from generation.api import TemplateBackend

    assert "toy-turn" in audit_detector_names() and "wf-sup" not in audit_detector_names()
    base = ["--agent", "u", "--model", "m", "--tasks", "weather", "--reference", "r", "--out", "o"]
    assert build_parser().parse_args([*base, "--detector", "toy-turn"]).detector == "toy-turn"
    with pytest.raises(
        ValueError, match="detector 'wf-sup' learns from labelled forks"
    ):  # before any dialogue
        audit_agent(
            "http://127.0.0.1:9/v1", "m", ["weather"], "unused", out=tmp_path / "x", detector="wf-sup"
        )
    with pytest.raises(ValueError, match="unknown Task 3 detector 'nope'"):
        audit_agent("http://127.0.0.1:9/v1", "m", ["weather"], "unused", out=tmp_path / "x", detector="nope")
    assert not (tmp_path / "x").exists()
    # the audit's scoring builds the detector from its entry: no encoder= for one that takes none
    corpus = StarCorpus(star_dir)
    refs = load_reference(template_corpus, ["weather"])
    store = Store(tmp_path / "audit")
    store.records = {r["dialogue_id"]: r for r in refs["weather"][:3]}
    task = corpus.tasks["weather"]
    jobs = [SimpleNamespace(dialogue_id=i, task=task) for i in store.records]
    backend = TemplateBackend()
    backend.bind_corpus(corpus)
    enc = Encoder("hash", model=_HashModel(), show_progress=False)
    rep = score_audit(jobs, store, refs, enc, backend, detector="toy-turn", detector_options={"turn": 2})
    got = rep.task("weather")
    assert got["detector"] == "toy-turn" and got["dialogues"] == 3
    assert set(got["first_alarms"].values()) == {2}


def test_guard_cli_fits_a_run_time_detector_that_takes_no_encoder(template_corpus, tmp_path, toy_detectors):
    from dialfork_metrics.guard.__main__ import main
    from dialfork_metrics.guard.monitor import Monitor

    out = tmp_path / "m.zip"
    args = ("fit", "--data", template_corpus, "--task", "weather", "--detector", "toy-ss", "--out", out)
    rc, stdout, err = _cli(main, *args, "--false-alarm-rate", "0.1")
    assert rc == 0, err
    assert "dialogues of weather; saved to" in stdout
    mon = Monitor.load(out)
    assert mon.detector.get_params()["false_alarm_rate"] == 0.1 and mon.detector.order_ == 2
