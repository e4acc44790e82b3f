"""Five registries, one shape (issue 45): the generic registry of ``dialfork_dataset.registry`` under the
metrics, the hallucination types, the Task 3 detectors, the generation backends and the source kinds;
one error type, one ``"module:attr"`` resolver, read-only views; the torchmetrics classes and the
``evaluate`` module folders made from the metric registry."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
import toy_extensions
import yaml

from dialfork_dataset import registry as generic
from dialfork_dataset.registry import Registry, RegistryError, resolve

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Colour:
    name: str
    hex: str


# ---- the generic registry ---------------------------------------------------------------------
def test_the_generic_registry_doctests():
    result = doctest.testmod(generic, verbose=False)
    assert result.attempted > 0 and result.failed == 0


def test_register_get_unregister_names_and_the_read_only_view():
    reg = Registry(
        "colour", Colour, add_hint="register_colour", check=lambda s, r: [] if s.hex else ["no hex"]
    )
    red = reg.register(Colour("red", "#f00"))
    reg.register(Colour("blue", "#00f"))
    assert reg.names() == ("red", "blue") and reg.specs()[0] is red and reg.get("red") is red
    assert "red" in reg and ["x"] not in reg and len(reg) == 2 and list(reg) == ["red", "blue"]
    view = reg.view
    assert isinstance(view, MappingProxyType) and dict(view) == {"red": red, "blue": reg.get("blue")}
    with pytest.raises(TypeError):
        view["green"] = Colour("green", "#0f0")  # the view is read-only: register is the one way in
    with pytest.raises(RegistryError, match="a colour 'red' is already registered"):
        reg.register(Colour("red", "#e00"))
    reg.register(Colour("red", "#e00"), replace=True)  # a replaced entry keeps its position
    assert reg.names() == ("red", "blue") and reg.get("red").hex == "#e00"
    with pytest.raises(TypeError, match="takes a Colour, got str"):
        reg.register("green")
    with pytest.raises(ValueError, match="colour 'grey': no hex"):
        reg.register(Colour("grey", ""))
    assert reg.unregister("blue").hex == "#00f" and "blue" not in view  # the view is live
    for call in (reg.get, reg.unregister):
        with pytest.raises(RegistryError) as e:
            call("blue")
        assert str(e.value) == "unknown colour 'blue'; registered: red (add one with register_colour)"
        assert e.value.registered == ("red",) and e.value.errors == [str(e.value)]
    # one error type, caught by the except clauses of the older registries' errors
    assert issubclass(RegistryError, KeyError) and issubclass(RegistryError, ValueError)
    with pytest.raises(TypeError, match="error must be RegistryError"):
        Registry("colour", Colour, error=ValueError)


def test_the_one_resolver():
    import os.path

    assert resolve("os.path:join", "x") is os.path.join and resolve(len, "x") is len
    assert resolve("os.path:join.__name__", "x") == "join"  # a dotted attribute
    with pytest.raises(
        ValueError, match="my entry: expected an object or 'package.module:attr', got 'os.path'"
    ):
        resolve("os.path", "my entry")
    with pytest.raises(ValueError, match="my entry: cannot import 'nope' from 'os.path'"):
        resolve("os.path:nope", "my entry")
    with pytest.raises(LookupError, match="cannot import"):
        resolve("no_such_module_xyz:f", "my entry", error=LookupError)
    assert resolve("no_such_module_xyz:f", "x", loaded_only=True) is None  # imports nothing
    assert resolve("os.path:join", "x", loaded_only=True) is os.path.join


def test_every_module_attr_reference_goes_through_the_one_resolver():
    """The old resolvers are gone: the specs resolve their own references through ``resolve``."""
    from dialfork_dataset import lazy
    from dialfork_metrics import registry as metrics
    from generation import backends

    assert not hasattr(lazy, "resolve_ref") and not hasattr(backends, "load_attr")
    assert "resolve" not in metrics.__all__  # no wrapper of its own
    flowscore = metrics.get("flowscore")
    assert flowscore.fn_callable() is resolve(flowscore.fn, "x")
    assert flowscore.core_fn() is resolve(flowscore.core, "x")
    spec = backends.get("template")
    assert spec.target_class() is resolve(spec.target, "x")
    bad = backends.BackendSpec("broken_xyz", "no_such_module_xyz:C")
    with pytest.raises(backends.UnknownBackendError, match="backend 'broken_xyz': cannot import"):
        bad.target_class()
    # no registry module imports "module:attr" strings itself
    for path in (
        "dialfork_dataset/taxonomy.py",
        "dialfork_dataset/sources.py",
        "dialfork_metrics/registry.py",
        "dialfork_metrics/task3/registry.py",
        "dialfork_metrics/bench/task2.py",
        "generation/backends/__init__.py",
    ):
        code = (ROOT / path).read_text(encoding="utf-8")
        assert "import_module(" not in code and "importlib" not in code, path


# ---- the five registries ------------------------------------------------------------------------
def _five():
    """(kind, unregister, get, names) of each of the five registries."""
    from dialfork_dataset import sources, taxonomy
    from dialfork_metrics import registry as metrics
    from dialfork_metrics.task3 import registry as detectors
    from generation import backends

    return [
        ("Task 2 (pair) metric", metrics.unregister, metrics.get, lambda: metrics.names("pair")),
        ("hallucination type", taxonomy.unregister, taxonomy.get, taxonomy.names),
        ("Task 3 detector", detectors.unregister, detectors.get, detectors.names),
        ("backend", backends.unregister, backends.get, backends.names),
        ("source kind", sources.unregister, sources.get, sources.names),
    ]


def test_every_registry_has_the_same_verbs_and_a_named_builtin_tuple():
    from dialfork_dataset import sources, taxonomy
    from dialfork_metrics import registry as metrics
    from dialfork_metrics.task3 import registry as detectors
    from generation import backends

    for module, builtins in (
        (metrics, "BUILTIN_METRICS"),
        (taxonomy, "BUILTIN_TYPES"),
        (detectors, "BUILTIN_DETECTORS"),
        (backends, "BUILTIN_BACKENDS"),
        (sources, "BUILTIN_SOURCE_KINDS"),
    ):
        for verb in ("register", "unregister", "get", "names"):
            assert callable(getattr(module, verb, None)), f"{module.__name__}.{verb}"
        assert isinstance(getattr(module, builtins), tuple) and getattr(module, builtins), (
            f"{module.__name__}.{builtins}"
        )
    assert backends.names() == tuple(backends.BACKENDS) and sources.names() == tuple(sources.SOURCE_KINDS)


@pytest.mark.parametrize("kind, unregister, get, names", _five(), ids=[k for k, *_ in _five()])
def test_an_unknown_name_raises_the_one_error_naming_the_registered_ones(kind, unregister, get, names):
    listed = re.escape(f"unknown {kind} 'NO_SUCH'; registered: {', '.join(names())}")
    for call in (get, unregister):  # unregistering an unknown name raises in all five
        with pytest.raises(RegistryError, match=listed):
            call("NO_SUCH")
    with pytest.raises(KeyError):
        get("NO_SUCH")
    with pytest.raises(ValueError):
        get("NO_SUCH")


def test_the_registries_are_read_only_views():
    from dialfork_dataset.sources import SOURCE_KINDS, SourceKind
    from dialfork_dataset.taxonomy import REGISTERED_TYPES
    from dialfork_metrics.registry import view
    from dialfork_metrics.task3.registry import DETECTORS
    from generation.backends import BACKENDS, UnknownBackendError, get_backend

    for mapping in (SOURCE_KINDS, REGISTERED_TYPES, view("pair"), view("set"), DETECTORS, BACKENDS):
        assert isinstance(mapping, MappingProxyType)
    with pytest.raises(TypeError):
        BACKENDS["x"] = "generation.backends.template:TemplateBackend"  # no second way to register
    with pytest.raises(TypeError):
        SOURCE_KINDS["x"] = SourceKind("x2", "m:f")
    with pytest.raises(UnknownBackendError, match="unknown backend 'x'"):  # the old error, still
        get_backend("x")


def test_specs_are_checked_when_built_and_registered():
    from dialfork_dataset import sources as source_kinds
    from dialfork_dataset import taxonomy
    from dialfork_dataset.sources import SourceKind
    from dialfork_metrics.registry import MetricSpec
    from generation.backends import NEEDS, BackendSpec

    with pytest.raises(
        ValueError, match=r"backend 'b': unknown needs \['cloud'\]; known: \('surface_templates'"
    ):
        BackendSpec("b", "m:C", needs=("cloud",))
    with pytest.raises(ValueError, match="backend 'b': needs must be a tuple of names"):
        BackendSpec("b", "m:C", needs="a GPU")  # the old free text
    spec = BackendSpec("b", "m:C", needs=("gpu", "model"))
    assert spec.needs == ("model", "gpu") and str(spec.needs) == f"{NEEDS['model']}, {NEEDS['gpu']}"
    with pytest.raises(ValueError, match="source kind 'x': the name must be an identifier of 2 characters"):
        SourceKind("x", "m:f")
    with pytest.raises(
        ValueError, match="source kind 'xy': opener must be a callable or 'package.module:attr'"
    ):
        SourceKind("xy", "m.f")
    with pytest.raises(ValueError, match="metric 'm': core must be a callable or 'package.module:attr'"):
        MetricSpec("m", "pair", "M", core="m.f", input="turns")
    with pytest.raises(ValueError, match="metric 'm': label must be a non-empty string"):
        MetricSpec("m", "pair", " ", core=len, input="turns")
    for register, wrong in ((taxonomy.register, "TOY"), (source_kinds.register, object())):
        with pytest.raises(TypeError):
            register(wrong)


def test_the_toy_extensions_are_registered_for_the_whole_suite():
    """The toys are registered at start-up for every test (tests/conftest.py), as if built in, unless
    DIALFORK_TEST_TOY_EXTENSIONS=0; the toy type comes after every built-in type (appended: it
    keeps the paper's four first whatever else is built in)."""
    if not toy_extensions.enabled():
        pytest.skip("DIALFORK_TEST_TOY_EXTENSIONS=0")
    import generation.variants
    from dialfork_dataset import taxonomy
    from dialfork_dataset.sources import SOURCE_KINDS
    from dialfork_metrics.registry import names
    from dialfork_metrics.task3 import registry as detector_registry
    from generation.backends import BACKENDS

    assert taxonomy.names()[:4] == ("WIC", "SSPC", "GR", "CSC")
    assert taxonomy.names()[-1] == toy_extensions.TYPE
    assert toy_extensions.METRIC in names("pair") and toy_extensions.METRIC in names("set")
    assert toy_extensions.DETECTOR in detector_registry.names(in_benchmark=True)
    assert toy_extensions.BACKEND in BACKENDS and toy_extensions.SOURCE_KIND in SOURCE_KINDS
    assert toy_extensions.TYPE in generation.variants.load_variants().types


# ---- torchmetrics classes made from the metric registry ---------------------------------------
def test_torchmetrics_classes_are_made_from_the_metric_registry():
    pytest.importorskip("torchmetrics")
    import torch

    from dialfork_metrics import registry, setlevel
    from dialfork_metrics.dialogue import score_pairs
    from dialfork_metrics.torchmetrics import FBD, FlowDTW, FlowKL, FlowScore, metric_class, metric_classes

    assert FlowScore is metric_class("flowscore") and FlowDTW is metric_class("flowdtw")
    assert metric_class("flowkl", "set") is FlowKL and metric_class("fbd", "set") is FBD
    pair = metric_classes("pair")
    assert list(pair) == [n for n in registry.names("pair") if registry.get(n).core is not None]
    assert set(metric_classes("set")) == {s.name for s in registry.specs("set") if s.fn is not None}
    with pytest.raises(ValueError, match="pair metric 'random' has no torchmetrics class"):
        metric_class("random")
    refs = [["Book a table.", "For when?", "Tonight."], ["Weather?", "Which city?", "Paris.", "Sunny."]]
    preds = [["Book a table.", "Pizza instead?", "No."], ["Weather?", "Which city?", "Paris.", "Rainy."]]
    # a metric registered at run time has a class at once, its direction read from the entry
    registry.register(
        registry.MetricSpec(
            "sim_overlap", "pair", "Sim overlap", core=lambda a, b: 1.0 - toy_extensions.overlap_core(a, b),
            input="turns", direction="higher",
        )
    )  # fmt: skip
    try:
        cls = metric_class("sim_overlap")
        assert cls.__name__ == "SimOverlap" and cls.higher_is_better and not FlowScore.higher_is_better
        m = cls(return_scores=True)
        m.update(preds[:1], refs[:1])
        m.update(preds[1:], refs[1:])
        out = m.compute()
        want = score_pairs(refs, preds, ["sim_overlap"], None)["sim_overlap"]
        np.testing.assert_allclose(out["scores"].numpy(), want, rtol=1e-12)
        assert out["sim_overlap"].dtype == torch.float64 and float(out["sim_overlap"]) == pytest.approx(
            want.mean()
        )
    finally:
        registry.unregister("sim_overlap")
    # a set metric: its fn on the gathered sets (the dialogues travel as text)
    s = metric_class("word_count_diff", "set")()
    s.update(preds[:1], refs)
    s.update(preds[1:], [])
    assert float(s.compute()) == pytest.approx(setlevel.set_word_count_diff(refs, preds), rel=1e-12)
    assert s(preds, refs) is None  # a set-level metric has no value per batch


# ---- evaluate module folders made from the registry entry -------------------------------------
def _check_packaging(folder: Path, name: str) -> None:
    """What tests/test_evaluate_modules.py checks of a packaged module folder."""
    for f in (f"{name}.py", "README.md", "app.py", "requirements.txt"):
        assert (folder / f).is_file(), f
    readme = (folder / "README.md").read_text(encoding="utf-8")
    meta = yaml.safe_load(re.match(r"^---\n(.*?)\n---\n", readme, flags=re.S).group(1))
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and "evaluate" in meta["tags"]
    assert "## Citation" in readme and "@misc{dialfork2026" in readme
    app = (folder / "app.py").read_text(encoding="utf-8")
    assert "from dialfork_metrics.modules.space import launch" in app and "Path(__file__)" in app
    reqs = (folder / "requirements.txt").read_text(encoding="utf-8")
    assert "evaluate" in reqs and "dialfork" in reqs
    assert not re.search(r"^from \.", (folder / f"{name}.py").read_text(encoding="utf-8"), flags=re.M)


def _run_doctests(folder: Path, name: str, monkeypatch) -> None:
    from dialfork_metrics import modules

    monkeypatch.setattr(modules, "MODULES_DIR", folder.parent)  # dialfork_metrics.load finds it there
    spec = importlib.util.spec_from_file_location(f"_new_module_{name}", folder / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    test = doctest.DocTestParser().get_doctest(script._KWARGS_DESCRIPTION, {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0 and test.examples


def test_new_module_makes_a_metrics_evaluate_folder_from_its_entry(tmp_path, monkeypatch, capsys):
    """``python -m dialfork_metrics new-module NAME``: the entry and its function are the metric."""
    pytest.importorskip("evaluate")
    import evaluate

    from dialfork_metrics import registry
    from dialfork_metrics.__main__ import main
    from dialfork_metrics.dialogue import score_pairs

    registry.register(
        registry.MetricSpec("toy_jac", "pair", "Toy Jaccard", core=toy_extensions.overlap_core, input="turns")
    )
    registry.register(
        registry.MetricSpec("toy_jac", "set", "Toy Jaccard", core=len, fn=toy_extensions.set_overlap)
    )
    try:
        assert main(["new-module", "toy_jac", "--out", str(tmp_path)]) == 2  # at both levels: --level
        assert "give --level pair or --level set" in capsys.readouterr().err
        for level, out in (("pair", tmp_path / "pair"), ("set", tmp_path / "set")):
            assert main(["new-module", "toy_jac", "--level", level, "--out", str(out)]) == 0
            folder = out / "toy_jac"
            _check_packaging(folder, "toy_jac")
            _run_doctests(folder, "toy_jac", monkeypatch)
        refs = [["Book a table.", "For when?", "Tonight."], ["Weather?", "Which city?", "Paris.", "Sunny."]]
        preds = [["Book a table.", "Pizza instead?", "No."], ["Weather?", "Which city?", "Paris.", "Rainy."]]
        module = evaluate.load(str(tmp_path / "pair" / "toy_jac"))
        assert module.name == "toy_jac"
        got = module.compute(predictions=preds, references=refs)
        np.testing.assert_allclose(got["scores"], score_pairs(refs, preds, ["toy_jac"], None)["toy_jac"])
        assert set(got) == {"toy_jac", "scores"}  # no encoder: the metric reads texts
        sets = evaluate.load(str(tmp_path / "set" / "toy_jac")).compute(
            predictions=[preds], references=[refs]
        )
        assert sets["scores"] == [pytest.approx(toy_extensions.set_overlap(refs, preds))]
        # an existing folder is kept unless --force; an unknown name lists the registered ones
        assert main(["new-module", "toy_jac", "--level", "pair", "--out", str(tmp_path / "pair")]) == 2
        assert "exists; pass --force" in capsys.readouterr().err
        assert (
            main(["new-module", "toy_jac", "--level", "pair", "--out", str(tmp_path / "pair"), "--force"])
            == 0
        )
        assert main(["new-module", "nope", "--out", str(tmp_path)]) == 2
        assert "unknown Task 2 (pair) metric 'nope'; registered: mean_turn" in capsys.readouterr().err
        assert main(["new-module", "random", "--level", "pair", "--out", str(tmp_path)]) == 2
    finally:
        registry.unregister("toy_jac", "pair")
        registry.unregister("toy_jac", "set")


def test_new_module_of_a_packaged_metric_gives_its_folders_layout_and_house_style(tmp_path):
    """An encoder metric (flowscore, a packaged module): the same file set, the encoder options, and
    files that ``ruff`` leaves as they are (the generated folder may be committed as written)."""
    from dialfork_metrics import modules
    from dialfork_metrics.module_folder import class_name, write_module_folder

    folder = write_module_folder("flowscore", "pair", tmp_path)
    packaged = Path(modules.module_path("flowscore"))
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in packaged.iterdir())
    script = (folder / "flowscore.py").read_text(encoding="utf-8")
    assert "class Flowscore(RejectEmpty, evaluate.Metric)" in script and "module_encoder(" in script
    assert class_name("turn_count_diff") == "TurnCountDiff"
    with pytest.raises(ValueError, match="evaluate would name class"):
        class_name("flow_2")
    if shutil.which("ruff") or importlib.util.find_spec("ruff"):
        for command in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
            proc = subprocess.run(
                [sys.executable, "-m", "ruff", *command, "--config", str(ROOT / "ruff.toml")],
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
