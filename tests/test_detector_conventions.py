"""The Task 3 detectors follow scikit-learn's estimator conventions (issue 36 item 4, issue 45 item 4):
every registered detector is a ``sklearn.base.BaseEstimator`` whose ``fit`` checks the parameters
against the class's constraint table (``_parameter_constraints``, scikit-learn's constraint objects),
``check_is_fitted`` and ``assign`` are public, each fitted quantity has one name (ending in ``_``),
and the guard and the audits call no private name of another object.

:func:`test_registered_detector_follows_the_estimator_conventions` runs, on every registered
detector (the built-in ones and any registered at run time, e.g. ``tests/toy_extensions.py``), the
checks of scikit-learn's ``check_estimator`` that do not need numeric ``X, y``."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from dialfork_metrics.task3 import NotFittedError, StreamingDetector, make_detector
from dialfork_metrics.task3.registry import detector_specs

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


@pytest.mark.parametrize(
    "name, param, bad, match",
    [
        ("it", "order", 0, r"'order' parameter of StreamingDetector must be an int in the range \[1, inf\)"),
        ("ss+nc", "tau", -1.0, r"'tau' parameter of StreamingDetector must be a float in the range \(0"),
        ("wf", "false_alarm_rate", 2.0, r"'false_alarm_rate' parameter of WorkflowDetector .*Got 2\.0"),
        ("wf-sup", "folds", 1, r"'folds' parameter of SupervisedWorkflowDetector .*\[2, inf\)\. Got 1 "),
        ("random", "seed", -1, r"'seed' parameter of RandomTurnBaseline .*\[0, inf\)\. Got -1 "),
    ],
)
def test_fit_checks_parameters_set_after_construction(name, param, bad, match):
    det = make_detector(name, **({} if name == "random" else {"encoder": None}))
    assert param in det.get_params()
    setattr(det, param, bad)  # as set_params does: the constructor has run
    with pytest.raises(InvalidParameterError, match=match):
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
        for d in ("dialfork_metrics/guard", "dialfork_metrics/audit", "leaderboard/leakcheck")
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
        assert det.n_train_ == len(TRAIN)
        # one name per fitted quantity: the old aliases without the underscore are gone
        for alias in ("threshold", "n_train", "centroids", "lm", "task_models", "tasks", "calibration_stats"):
            assert not hasattr(det, alias), alias


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


def test_streaming_init_accepts_anything_and_fit_names_the_bad_parameter():
    det = make_detector("it", encoder=None, order=0, tau=-1.0, scope="global", preset="paper")
    assert (det.order, det.tau, det.scope) == (0, -1.0, "global")  # stored, not checked yet
    with pytest.raises(InvalidParameterError, match=r"'order' parameter of StreamingDetector .*Got 0 "):
        det.fit(TRAIN, embeddings=TRAIN_E)
    det.set_params(order=3)  # scikit-learn names the first bad parameter, in alphabetical order
    with pytest.raises(
        InvalidParameterError,
        match=r"'scope' parameter of StreamingDetector must be a str among \{.*'pooled'.*\} or None\. "
        r"Got 'global' ",
    ):
        det.fit(TRAIN, embeddings=TRAIN_E)
    det.set_params(scope="pooled")
    with pytest.raises(InvalidParameterError, match=r"'tau' parameter of StreamingDetector .*Got -1\.0 "):
        det.fit(TRAIN, embeddings=TRAIN_E)
    with pytest.raises(
        InvalidParameterError,
        match=r"'preset' parameter of StreamingDetector must be a str among \{'\w+', '\w+'\}\. Got 'x' ",
    ):
        make_detector("ss", encoder=None, preset="x").fit(TRAIN, embeddings=TRAIN_E)


def test_streaming_checks_the_settings_its_preset_resolves_to(monkeypatch):
    """The preset-resolved settings are checked with the same table (validate_parameter_constraints
    on the parameters merged with the resolved settings)."""
    from dialfork_metrics.task3.streaming import detector as detector_module

    paper = detector_module.preset_settings("paper", "it", None)
    monkeypatch.setattr(detector_module, "preset_settings", lambda *a: {**paper, "order": 0})
    det = make_detector("it", encoder=None, preset="paper")
    with pytest.raises(InvalidParameterError, match=r"'order' parameter of StreamingDetector \(with the "):
        det.fit(TRAIN, embeddings=TRAIN_E)


# -- every registered detector: scikit-learn's estimator checks that need no numeric X, y ------------
class _BadType:
    """A value of a type no constraint accepts (scikit-learn's ``check_param_validation`` uses one)."""


@pytest.fixture(scope="module")
def convention_data(template_corpus):
    """Small data from the template corpus: 8 conformant train dialogues (2 tasks), the forked
    and conformant dialogues of half the test sources (for detectors that learn from forks) and 8
    dialogues of the other half to predict."""
    from dialfork_metrics.task3 import load_examples
    from dialfork_metrics.task3.supervised.classifier import source_of

    test = load_examples(template_corpus, "test")
    sources = sorted({source_of(r) for r in test})
    fit_sources = set(sources[::2])
    held = [r for r in test if source_of(r) not in fit_sources]
    return {
        "train": load_examples(template_corpus, "train"),
        "forked": [r for r in test if source_of(r) in fit_sources],
        "predict": [r for r in held if r["hallucination_type"] is None][:2] + held[1::9][:6],
    }


def _supplied(need: str, star_dir: Path, tmp_path_factory) -> dict:
    """What the caller gives a detector for one of its registry ``needs`` ("forks" is how it fits)."""
    if need == "encoder":
        return {"encoder": "minilm"}  # the packaged MiniLM
    if need == "workflow":
        return {"workflow": f"star:{star_dir}"}
    if need == "false_alarm_rate":
        return {"false_alarm_rate": 0.1}
    if need == "seed":
        return {"seed": 0}
    if need == "model":  # the tiny random chat model of tests/test_task3_llm.py (no download)
        from fixtures.tiny_models import tiny_model_dir

        return {"model": tiny_model_dir("detector", tmp_path_factory)}
    assert need == "forks", f"the convention test does not know how to supply {need!r}: add it here"
    return {}


def _fit(det, spec, data):
    """Fit as the benchmarks do (benchmarks/bench_task3_tracks.py ``fit_detector``): conformant train
    dialogues, or forked and conformant ones for a detector that learns from forks."""
    if "forks" not in spec.needs:
        return det.fit(data["train"])
    rows = data["forked"]
    if "forks" in inspect.signature(det.fit).parameters:
        return det.fit(
            [r for r in rows if r["hallucination_type"] is None],
            forks=[r for r in rows if r["hallucination_type"] is not None],
        )
    return det.fit(rows)


def _same(a, b) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an object without a usable ==: equal types will do
        return type(a) is type(b)


def _bad_values(constraints) -> list:
    """Values every constraint of one parameter refuses: one of no accepted type, and one per
    constraint that scikit-learn can generate (a number outside an interval, a string outside
    the options...)."""
    from sklearn.utils._param_validation import generate_invalid_param_val, make_constraint

    if isinstance(constraints, str) and constraints == "no_validation":
        return []
    cs = [make_constraint(c) for c in constraints]
    out = [_BadType()]
    for c in cs:
        try:
            v = generate_invalid_param_val(c)
        except NotImplementedError:
            continue
        if not any(o.is_satisfied_by(v) for o in cs):
            out.append(v)
    return out


def _public_fitted(det) -> list[str]:
    return [k for k in vars(det) if k.endswith("_") and not k.startswith("_")]


@pytest.mark.parametrize("spec", detector_specs(), ids=lambda s: s.name)  # run-time registrations too
def test_registered_detector_follows_the_estimator_conventions(
    spec, convention_data, star_dir, tmp_path_factory
):
    """scikit-learn's estimator conventions, on every registered detector (``check_estimator``
    itself needs numeric ``X, y``)."""
    import re

    from sklearn.base import BaseEstimator, clone
    from sklearn.exceptions import NotFittedError as SkNotFittedError
    from sklearn.utils.validation import check_is_fitted

    kwargs = {k: v for need in spec.needs for k, v in _supplied(need, star_dir, tmp_path_factory).items()}
    det = spec.build(**kwargs)
    cls, name = type(det), type(det).__name__
    assert isinstance(det, BaseEstimator), f"{spec.name}: {name} is not a sklearn.base.BaseEstimator"

    # get_params: exactly the __init__ parameters, each the attribute of its own name
    init = [
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    params = det.get_params()
    assert sorted(params) == sorted(init)
    for k, v in params.items():
        assert v is getattr(det, k), k
    assert det.get_params(deep=False).keys() == params.keys()
    # the constraint table: one entry per parameter (scikit-learn's check_param_validation)
    table = cls._parameter_constraints
    assert sorted(table) == sorted(init), f"{name}._parameter_constraints keys vs __init__ parameters"

    # set_params: returns self, changes nothing given the same values, refuses an unknown name
    assert det.set_params(**params) is det
    assert all(_same(getattr(det, k), v) for k, v in params.items())
    with pytest.raises(ValueError, match="Invalid parameter 'no_such_parameter'"):
        det.set_params(no_such_parameter=1)

    # clone: a new unfitted estimator with equal parameters (clone checks they are stored as given)
    twin = clone(det)
    assert type(twin) is cls and twin is not det
    assert all(_same(twin.get_params()[k], v) for k, v in params.items())

    # __init__ and set_params check nothing; fit refuses a bad value, naming it and the parameter
    checked = 0
    for p, constraints in table.items():
        for bad in _bad_values(constraints):
            made = cls(**{**params, p: bad})
            assert getattr(made, p) is bad
            other = clone(det).set_params(**{p: bad})
            for d in (made, other):
                with pytest.raises(
                    InvalidParameterError,
                    match=rf"The '{p}' parameter of {name} must be .* Got {re.escape(repr(bad))} instead\.",
                ):
                    _fit(d, spec, convention_data)
            checked += 1
    assert checked or not table, f"{name}: no parameter could be given a bad value"

    # not fitted: check_is_fitted raises, and no fitted (trailing underscore) attribute exists
    assert isinstance(repr(det), str) and repr(det).startswith(name + "(")
    with pytest.raises(SkNotFittedError):
        check_is_fitted(det)
    assert not _public_fitted(det)

    # fit returns self, fitted; the parameters are unchanged
    assert _fit(det, spec, convention_data) is det
    check_is_fitted(det)
    if hasattr(det, "check_is_fitted"):
        det.check_is_fitted()
    assert _public_fitted(det)
    assert all(_same(det.get_params()[k], v) for k, v in params.items())
    assert repr(det).startswith(name + "(")

    # one prediction per dialogue: a system turn in 1..T, or None
    rows = convention_data["predict"]
    preds = det.predict_many(rows)
    assert len(preds) == len(rows)
    for r, p in zip(rows, preds):
        T = sum(t["speaker"] == "system" for t in r["turns"])
        assert p is None or (type(p) is int and 1 <= p <= T), (r["dialogue_id"], p, T)

    # a clone of the fitted detector is unfitted, with the same parameters
    fresh = clone(det)
    with pytest.raises(SkNotFittedError):
        check_is_fitted(fresh)
    assert not _public_fitted(fresh)
    assert all(_same(fresh.get_params()[k], v) for k, v in params.items())
