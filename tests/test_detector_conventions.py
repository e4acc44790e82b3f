"""The Task 3 detectors follow scikit-learn's estimator conventions (issue 36 item 4): ``fit``
checks the parameters against the class's one constraint table (:mod:`dialfork_metrics.task3.params`),
``check_is_fitted`` and ``assign`` are public, and the guard and the audits call no private name
of another object."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest

from dialfork_metrics.task3 import NotFittedError, StreamingDetector, make_detector
from dialfork_metrics.task3.params import Constraint, either, integer, interval, one_of, validate_params

ROOT = Path(__file__).resolve().parents[1]

TRAIN = [
    [
        {"speaker": "user", "text": f"u{i}"},
        {"speaker": "system", "text": f"s{i}"},
        {"speaker": "user", "text": f"v{i}"},
        {"speaker": "system", "text": f"t{i}"},
    ]
    for i in range(12)
]
TRAIN_E = [np.random.default_rng(i).normal(size=(4, 6)) for i in range(12)]


def test_constraint_helpers():
    assert integer(1).check(np.int64(3)) and not integer(1).check(True) and not integer(1).check(0)
    assert interval(0, 1).check(0.5) and not interval(0, 1).check(1.0) and interval(0, 1, "both").check(1)
    assert not interval(0, None).check(float("nan")) and interval(0, None, "left").check(0)
    assert interval(0, 1).expected == "in (0, 1)" and interval(0, None, "left").expected == ">= 0"
    assert one_of(("a", "b")).check("a") and not one_of((1, 2)).check(True)
    ms = either(one_of(("auto",)), interval(-1, 1, "both"))
    assert ms.check("auto") and ms.check(-1) and not ms.check("x")
    with pytest.raises(ValueError, match="closed must be"):
        interval(0, 1, "open")


def test_validate_params_lists_every_bad_value():
    table = {"k": integer(1), "rule": one_of(("a", "b")), "x": Constraint(lambda v: v == 1, "one")}
    validate_params("Demo", {"k": 1, "rule": "b", "unchecked": object()}, table)
    with pytest.raises(ValueError, match=r"^Demo: k must be an integer >= 1, got 0; rule must be one of"):
        validate_params("Demo", {"k": 0, "rule": "c", "x": 1}, table)


@pytest.mark.parametrize(
    "name, param, bad, match",
    [
        ("it", "order", 0, "order must be an integer >= 1"),
        ("ss+nc", "tau", -1.0, "tau must be > 0"),
        ("wf", "false_alarm_rate", 2.0, "false_alarm_rate must be in"),
        ("wf-sup", "folds", 1, "folds must be an integer >= 2"),
        ("random", "seed", -1, "seed must be an integer >= 0"),
    ],
)
def test_fit_checks_parameters_set_after_construction(name, param, bad, match):
    det = make_detector(name, **({} if name == "random" else {"encoder": None}))
    assert param in det.get_params()
    setattr(det, param, bad)  # scikit-learn's set_params path: the constructor has run
    with pytest.raises(ValueError, match=match):
        det.fit(TRAIN, embeddings=TRAIN_E)


@pytest.mark.parametrize("name", ["it", "ss+nc", "wf", "wf-sup"])
def test_check_is_fitted_is_public(name):
    det = make_detector(name, encoder=None)
    with pytest.raises(NotFittedError, match="not fitted"):
        det.check_is_fitted()


def test_streaming_assign_is_public():
    det = make_detector("it", encoder=None, distance_threshold=0.9).fit(TRAIN, embeddings=TRAIN_E)
    det.check_is_fitted()
    nodes, conf = det.assign("system", TRAIN_E[0][[1, 3]])
    assert nodes.dtype == np.int64 and nodes.shape == (2,) and np.all(conf == 1.0)
    assert set(nodes.tolist()) <= set(range(det.vocab_size))


def _private_uses(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            out.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_guard_and_audits_call_no_private_name_of_another_object():
    files = [
        f
        for d in ("dialfork_metrics/guard", "dialfork_metrics/audit", "leaderboard/audit")
        for f in sorted((ROOT / d).rglob("*.py"))
    ]
    assert len(files) > 5
    bad = [u for f in files for u in _private_uses(f)]
    assert not bad, "private names used across objects (make them public):\n" + "\n".join(bad)


@pytest.mark.parametrize("name", ["it", "ss+nc", "wf", "random"])
def test_init_stores_parameters_and_fit_adds_underscore_attributes(name):
    kwargs = {} if name == "random" else {"encoder": None}
    if name in ("it", "ss+nc"):
        kwargs["distance_threshold"] = 0.9
    det = make_detector(name, **kwargs)
    public = {k for k in vars(det) if not k.startswith("_")}
    assert public <= set(det.get_params()), public - set(det.get_params())
    assert not [k for k in public if k.endswith("_")]
    if name == "wf":
        return  # fitting needs a workflow (tests/test_workflow_detector.py)
    det.fit(TRAIN, embeddings=TRAIN_E)
    added = {k for k in vars(det) if not k.startswith("_")} - public
    assert all(k.endswith("_") for k in added), added
    if name != "random":
        assert {
            "lm_",
            "threshold_",
            "centroids_",
            "n_train_",
            "tasks_",
            "order_",
            "settings_source_",
        } <= added
        assert det.threshold == det.threshold_ and det.n_train == det.n_train_ == len(TRAIN)
        with pytest.raises(AttributeError, match="threshold is a fitted attribute, read-only"):
            det.threshold = 0.5


@pytest.mark.parametrize("name", ["it", "ss+nc"])
def test_streaming_init_stores_parameters_as_given_and_fit_resolves_presets(name):
    """scikit-learn's convention for StreamingDetector: ``__init__`` stores its parameters as given
    (a setting left to the preset stays None), ``get_params`` round-trips through the constructor
    (``clone``), and ``fit`` resolves the presets into fitted ``_`` attributes without changing a
    parameter."""
    det = make_detector(name, encoder=None, distance_threshold=0.9, tau=1)
    params = det.get_params()
    assert set(params) == set(inspect.signature(StreamingDetector).parameters)
    assert params["order"] is None and params["scope"] is None and params["threshold_rule"] is None
    assert params["tau"] == 1 and type(params["tau"]) is int  # as given, not coerced
    clone = StreamingDetector(**params)
    assert clone.get_params() == params
    det.fit(TRAIN, embeddings=TRAIN_E)
    assert det.get_params() == params  # fit changes no parameter
    assert det.order_ == det.settings()["order"] and det.scope_ == det.settings()["scope"]
    assert (
        det.settings_source["order"] == "preset:selected"
        and det.settings_source["distance_threshold"] == "explicit"
    )
    assert det.settings() == clone.settings()  # before fit, settings() resolves the parameters
    clone.fit(TRAIN, embeddings=TRAIN_E)
    assert clone.thresholds == det.thresholds and clone.config() == det.config()
    assert clone.predict_many(TRAIN, embeddings=TRAIN_E) == det.predict_many(TRAIN, embeddings=TRAIN_E)


def test_streaming_init_accepts_anything_and_fit_names_every_bad_parameter():
    det = make_detector("it", encoder=None, order=0, tau=-1.0, scope="global", preset="paper")
    assert (det.order, det.tau, det.scope) == (0, -1.0, "global")  # stored, not checked yet
    with pytest.raises(
        ValueError,
        match=r"^StreamingDetector: order must be an integer >= 1, got 0; "
        r"tau must be > 0, got -1.0; .*scope must be one of \('task', 'pooled'\)",
    ):
        det.fit(TRAIN, embeddings=TRAIN_E)
    with pytest.raises(
        ValueError, match=r"StreamingDetector: preset must be one of \('selected', 'paper'\), got 'x'"
    ):
        make_detector("ss", encoder=None, preset="x").fit(TRAIN, embeddings=TRAIN_E)
