"""The packaged evaluate modules: discovery, Space files, card, doctests, core agreement, batching.

Every module folder discovered under dialfork_metrics/modules/ is checked against the packaging
convention of docs/evaluate_modules.md (also those written by other parts: flowkl, task3).
"""

from __future__ import annotations

import doctest
import importlib.util
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

import dialfork_metrics as dm
from dialfork_metrics import dialogue as DLG
from dialfork_metrics import modules as M
from dialfork_metrics.encoders import get_encoder

DISCOVERED = M.available()
OURS = ["flowscore", "flowdtw"]

REF = [
    "Hi, I want to book a doctor appointment.",
    "Sure. What is your name?",
    "Mark Smith.",
    "Which doctor would you like to see?",
    "Dr. Morgan, please.",
]
FORK = REF[:2] + ["Would you like to try our co-living apartments instead?", "No, a doctor!"]
OTHER = ["I need a taxi to the airport.", "When do you want to leave?", "At 5 pm."]


def as_dicts(turns):
    return [{"speaker": "user" if i % 2 == 0 else "system", "text": t} for i, t in enumerate(turns)]


@pytest.fixture(scope="module")
def enc():
    e = get_encoder("minilm")
    e.model  # noqa: B018
    return e


def load_script(name: str):
    path = Path(M.module_path(name)) / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"_dialfork_module_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_doctests(text: str, name: str) -> None:
    parser = doctest.DocTestParser()
    test = parser.get_doctest(text, {}, name, None, 0)
    assert test.examples, f"{name}: no doctest examples"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    res = runner.summarize(verbose=False)
    assert res.failed == 0, f"{name}: {res.failed} of {res.attempted} doctest examples failed"


# ------------------------------------------------------------------ discovery and files
def test_discovery_and_paths():
    assert set(OURS) <= set(DISCOVERED)
    for name in DISCOVERED:
        p = Path(M.module_path(name))
        assert p.is_dir() and (p / f"{name}.py").is_file() and p.parent == M.MODULES_DIR
    assert dm.module_path("flowscore") == M.module_path("flowscore")
    with pytest.raises(ValueError, match="available: .*flowdtw.*flowscore"):
        M.module_path("bleu")


@pytest.mark.parametrize("name", DISCOVERED)
def test_space_files_and_card(name):
    folder = Path(M.module_path(name))
    for f in ("README.md", "app.py", "requirements.txt"):
        assert (folder / f).is_file(), f"{name}: missing {f}"
    readme = (folder / "README.md").read_text(encoding="utf-8")
    m = re.match(r"^---\n(.*?)\n---\n", readme, flags=re.S)
    assert m, f"{name}: README.md must start with Space YAML front matter"
    meta = yaml.safe_load(m.group(1))
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and "evaluate" in meta["tags"]
    assert "## Citation" in readme and "@misc{dialfork2026" in readme
    app = (folder / "app.py").read_text(encoding="utf-8")
    # the Space runs the module file beside app.py (not a Hub copy) in DialFork's own Gradio app
    assert "from dialfork_metrics.modules.space import launch" in app and "Path(__file__)" in app
    assert "launch_gradio_widget" not in app and "idiap/" not in app
    assert str(meta["sdk_version"]).split(".")[0] in ("5", "6")  # evaluate's Gradio 3 widget is not used
    reqs = (folder / "requirements.txt").read_text(encoding="utf-8")
    assert "evaluate" in reqs and "dialfork" in reqs
    script = (folder / f"{name}.py").read_text(encoding="utf-8")
    assert not re.search(r"^from \.", script, flags=re.M), (
        f"{name}: no relative imports (see docs/evaluate_modules.md)"
    )


@pytest.mark.parametrize("name", DISCOVERED)
def test_load_offline_and_doctests(name):
    module = dm.load(name)
    assert module.name == name
    assert "dialfork2026" in module.citation
    run_doctests(load_script(name)._KWARGS_DESCRIPTION, f"{name}._KWARGS_DESCRIPTION")


@pytest.mark.parametrize("name", OURS)
def test_readme_examples_run(name):
    readme = (Path(M.module_path(name)) / "README.md").read_text(encoding="utf-8")
    block = readme.split("### Examples", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    run_doctests(block, f"{name} README example")


# ------------------------------------------------------------------ behaviour of flowscore / flowdtw
@pytest.mark.parametrize("name", OURS)
def test_module_matches_core(name, enc):
    module = dm.load(name, encoder=enc)
    refs, preds = [REF, REF, FORK], [REF, FORK, OTHER]
    core = DLG.score_pairs(refs, preds, [name], enc)[name]
    out = module.compute(predictions=preds, references=refs)
    assert set(out) == {name, "scores", "encoder"} and out["encoder"] == enc.model_id
    assert not out["encoder"].startswith("/") and "site-packages" not in out["encoder"]  # portable (issue 31)
    np.testing.assert_allclose(out["scores"], core, atol=1e-12)
    assert out[name] == pytest.approx(float(core.mean()), abs=1e-12)
    assert out["scores"][0] == pytest.approx(0.0, abs=1e-7)
    # the {speaker, text} form gives the same numbers
    out2 = module.compute(predictions=[as_dicts(p) for p in preds], references=[as_dicts(r) for r in refs])
    np.testing.assert_allclose(out2["scores"], core, atol=1e-12)
    assert isinstance(out[name], float) and all(isinstance(s, float) for s in out["scores"])


@pytest.mark.parametrize("name", OURS)
def test_add_batch_loop_equals_one_compute(name, enc):
    module = dm.load(name, encoder=enc)
    refs = [REF, FORK, OTHER, REF, FORK]
    preds = [FORK, OTHER, REF, REF, FORK[::-1]]
    once = module.compute(predictions=preds, references=refs)
    for i in range(0, 5, 2):
        module.add_batch(predictions=preds[i : i + 2], references=refs[i : i + 2])
    looped = module.compute()
    assert looped["scores"] == once["scores"] and looped[name] == once[name]
    for p, r in zip(preds, refs):
        module.add(prediction=p, reference=r)
    assert module.compute()["scores"] == once["scores"]


def test_encoder_chosen_at_load_time(enc):
    assert dm.load("flowscore", encoder="MiniLM").encoder is enc  # shared instance per name
    assert dm.load("flowdtw", config_name="minilm").encoder is enc  # evaluate's config_name
    assert dm.load("flowscore").encoder is enc  # default
    custom = dm.Encoder(enc.name, model=enc.model)
    assert dm.load("flowdtw", encoder=custom).encoder is custom
    d2f = dm.load("flowscore", encoder="d2f")  # resolves now, downloads only when computing
    assert d2f.encoder.name == "sergioburdisso/dialog2flow-joint-bert-base" and d2f.encoder._model is None
    with pytest.raises(ValueError, match="unknown encoder 'nope'"):
        dm.load("flowscore", encoder="nope")


def test_evaluate_load_of_the_folder(enc):
    import evaluate

    for target in (M.module_path("flowscore"), str(Path(M.module_path("flowscore")) / "flowscore.py")):
        module = evaluate.load(target, encoder=enc)
        assert module.compute(predictions=[REF], references=[REF])["scores"] == [pytest.approx(0.0, abs=1e-7)]


@pytest.mark.parametrize("name", OURS)
def test_module_bad_input(name, enc):
    module = dm.load(name, encoder=enc)
    with pytest.raises(ValueError, match="turn 1 is empty"):
        module.compute(predictions=[["hello", ""]], references=[REF])
    with pytest.raises(ValueError, match="empty dialogue"):
        module.compute(predictions=[[]], references=[REF])
    with pytest.raises(ValueError, match="expected format"):
        module.compute(predictions=[[1, 2]], references=[REF])
