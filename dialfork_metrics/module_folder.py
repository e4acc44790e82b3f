"""A metric's ``evaluate`` module folder, written from its registry entry (``python -m dialfork_metrics
new-module NAME``), so that a built-in metric is its entry and its function.

The folder follows the packaging convention of ``docs/evaluate_modules.md`` (what
``tests/test_evaluate_modules.py`` checks of every packaged module): ``<module>/<module>.py`` (one
``evaluate.Metric`` whose snake-cased class name is the folder's name, a thin wrapper that reads
the registry), ``README.md`` (the Space's YAML front matter and the metric card, with DialFork's
citation), ``app.py`` (the Space's entry point) and ``requirements.txt``. ``<module>`` is the
entry's ``module`` (default its name). A pair metric's script scores each (reference, prediction)
row with :func:`~dialfork_metrics.dialogue.score_pairs`; a set metric's calls the entry's ``fn``
on each (reference set, target set) row. Texts come from the entry (label, direction, needs);
edit the card afterwards to say more.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from dialfork_dataset.atomic import write_text_atomic
from dialfork_dataset.citation import CITATION as DIALFORK_BIBTEX

from . import registry

#: The packaged modules' folder (``dialfork_metrics.modules.MODULES_DIR``; not imported from there,
#: whose :func:`~dialfork_metrics.modules.load` writes a registered metric's folder with this module).
MODULES_DIR = Path(__file__).resolve().parent / "modules"

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
#: The Gradio version the Spaces declare (as the packaged modules' cards).
SDK_VERSION = "6.31.0"
REQUIREMENTS = "evaluate>=0.4.3,<0.5\ndialfork @ git+https://github.com/idiap/dialfork\n"

_REF = ["I need to book a doctor appointment.", "Sure. What is your name?", "Mark.", "Booked for Mark."]
_FORK = ["I need to book a doctor appointment.", "Would you like to try co-living instead?", "What?", "No."]
_REF2 = ["Weather in Paris tomorrow?", "Which day?", "Tomorrow.", "Sunny in Paris tomorrow."]
_FORK2 = ["Weather in Paris tomorrow?", "Can I interest you in our loyalty plan?", "No.", "Sign up today!"]

_SCRIPT = '''"""{label}: DialFork's registered Task {task} metric ``{name}``, as an ``evaluate`` module.

Written by ``python -m dialfork_metrics new-module {name}`` from the metric registry's entry: a thin
``evaluate.Metric`` over {over}; the math and the input validation live in the ``dialfork`` library.
"""

import evaluate

{imports}

_METHOD = "{name}"

_DESCRIPTION = """\\
{description}
"""

_KWARGS_DESCRIPTION = """
{kwargs_doc}
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class {cls}(RejectEmpty, evaluate.Metric):
    """{label} per {row}, and its mean."""

    _module, _row = "{module}", "{row}"

{init}    def _info(self):
        return metric_info(_DESCRIPTION, _KWARGS_DESCRIPTION, {features}())

    def _compute(self, predictions, references):
        if len(predictions) == 0:
            raise ValueError("{module}: no {row} to score")
{compute}
        return {{{result}}}
'''

_INIT_ENCODED = """\
    def __init__(self, encoder=None, batch_size=64, device=None, embedding_cache_dir=None, **kwargs):
        # set before super().__init__, which calls _info(); unknown aliases fail here
        self.encoder = module_encoder(
            encoder, kwargs.get("config_name"), batch_size, device, embedding_cache_dir
        )
        super().__init__(**kwargs)
"""

_PAIR_COMPUTE = """\
        scores = score_pairs(references, predictions, [_METHOD], {encoder})[_METHOD]
        scores = [float(s) for s in scores]"""

_SET_COMPUTE = """\
        fn = registry.get(_METHOD, "set").fn_callable()
        scores = []
        for i, (ref, tgt) in enumerate(zip(references, predictions)):
            try:
                scores.append(float(fn(ref, tgt{args})))
            except ValueError as e:
                raise ValueError(f"{{_METHOD}} row {{i}}: {{e}}") from e"""


def _py(value: Any, indent: int = 0) -> str:
    """A list of strings (or of lists of strings) as ``ruff format`` writes it (double quotes, one
    item per line when the one-line form is longer than 110 characters)."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    one = "[" + ", ".join(_py(v) for v in value) + "]"
    if indent + len(one) <= 104 and not any(isinstance(v, list) for v in value):
        return one
    pad = " " * (indent + 4)
    return "[\n" + "".join(f"{pad}{_py(v, indent + 4)},\n" for v in value) + " " * indent + "]"


def _imports(pair: bool, encoded: bool) -> str:
    lines = ["from dialfork_metrics.dialogue import score_pairs  # From: dialfork"] if pair else []
    if not pair:
        lines.append("from dialfork_metrics import registry  # From: dialfork")
    names = ["RejectEmpty", pair and "dialogue_features" or "dialogue_set_features"]
    names += ["encoder_id", "metric_info", "module_encoder"] if encoded else ["metric_info"]
    lines.append(
        "from dialfork_metrics.modules import (  # From: dialfork\n"
        + "".join(f"    {n},\n" for n in names)
        + ")"
    )
    return "\n".join(sorted(lines, key=lambda x: x.split()[1]))


_APP = '''"""Hugging Face Space entry point of the {label} metric: ``python app.py`` in this folder.

Loads ``{module}.py`` beside this file (not from the Hub) into a small Gradio app
(``dialfork_metrics.modules.space``; evaluate's own widget needs Gradio 3).
"""

from pathlib import Path

from dialfork_metrics.modules.space import launch

REF = {ref_py}
FORK = {fork_py}

if __name__ == "__main__":
    launch(Path(__file__).resolve().parent, example={{"predictions": [{pred}], "references": [{refs}]}})
'''

_README = """---
title: {label}
emoji: 📏
colorFrom: blue
colorTo: green
sdk: gradio
sdk_version: {sdk}
app_file: app.py
pinned: false
license: apache-2.0
tags:
- evaluate
- metric
- dialogue
description: >-
  {label}, DialFork's Task {task} metric `{name}` ({direction}).
---

# Metric Card for {label}

## Metric Description

{description}

Part of [DialFork](https://github.com/idiap/dialfork), a benchmark for procedural hallucination in
conversational agents: a conformant dialogue is forked at a controlled turn and a hallucination
is injected; earlier forks should be further from the conformant dialogue.

## How to Use

```python
import dialfork_metrics  # pip install dialfork

module = dialfork_metrics.load("{module}")
results = module.compute(predictions={pred_arg}, references={ref_arg})
```

`evaluate.load("path/to/{module}")` loads a local copy of this folder, offline.

### Inputs

{inputs}

### Output Values

{outputs}

### Examples

```python
{example}
```

## Limitations and Bias

- {limits}

## Citation

```bibtex
{bibtex}
```

## Further References

- DialFork code and data: https://github.com/idiap/dialfork
"""


def _words(spec: registry.MetricSpec) -> dict[str, Any]:
    """The texts the templates need, from the entry."""
    pair = spec.level == "pair"
    encoded = bool({"encoder", "pair_encoder"} & set(spec.needs))
    direction = "a higher value is closer" if spec.direction == "higher" else "a lower value is closer"
    unit = "pair of dialogues" if pair else "pair of sets of dialogues"
    description = (
        f"{spec.label} ({'a Task 2 metric: a value per (reference, candidate) pair' if pair else 'a Task 1 metric: a value per (reference set, target set) pair'}"
        f" of DialFork's metric registry, `{spec.name}`); {direction}."
        + (" Each turn is embedded with a sentence encoder." if encoded else "")
    )
    row = "(reference, prediction) pair of dialogues" if pair else "(reference set, target set) row"
    dialogue = (
        "A dialogue is a list of turn strings (speakers alternate, starting with the user) or a "
        'list of `{"speaker": "user"|"system", "text": str}` dicts.'
    )
    load_opts = (
        "Load-time options: encoder (an alias, default `minilm`, packaged, offline; a local folder; a Hub"
        " id; or a `dialfork_metrics.Encoder`; evaluate's `config_name` is read as the encoder too),"
        " batch_size (`int`, default 64), device (`str`), embedding_cache_dir (`str`)."
        if encoded
        else "No load-time options (the metric reads the turns' texts)."
    )
    keys = sorted([spec.name, "scores", *(["encoder"] if encoded else [])])
    ref, fork = (_REF, _FORK) if pair else ([_REF, _REF2], [_FORK, _FORK2])
    example = [
        ">>> import dialfork_metrics",
        f'>>> module = dialfork_metrics.load("{spec.module or spec.name}")',
        f">>> ref = {_py(ref)}" if pair else f">>> ref = [{_py(ref[0])},\n...        {_py(ref[1])}]",
        f">>> fork = {_py(fork)}" if pair else f">>> fork = [{_py(fork[0])},\n...         {_py(fork[1])}]",
        ">>> results = module.compute(predictions=[ref, fork], references=[ref, ref])",
        ">>> sorted(results)",
        repr(keys),
        '>>> len(results["scores"])',
        "2",
    ]
    inputs = (
        f"- **predictions** (`list`): the {'candidate dialogues' if pair else 'target sets of dialogues'}, one per row.\n"
        f"- **references** (`list`): the {'reference dialogues' if pair else 'reference sets (at least 2 dialogues each)'}, as many.\n\n"
        f"{dialogue} A malformed dialogue raises `ValueError` naming the row."
    )
    outputs = (
        f"- **{spec.name}** (`float`): the mean over the rows.\n- **scores** (`list` of `float`): the value of each row."
        + ("\n- **encoder** (`str`): the encoder's portable model id." if encoded else "")
    )
    kwargs_doc = "\n".join(
        [
            "Args:",
            f"    predictions (`list`): the {'candidate dialogues' if pair else 'target sets'}, one per row.",
            f"    references (`list`): the {'reference dialogues' if pair else 'reference sets'}, same length.",
            f"    {dialogue}",
            f"    {load_opts}",
            "Returns:",
            f"    {spec.name} (`float`): mean over the rows.",
            "    scores (`list` of `float`): the value of each row.",
            *(["    encoder (`str`): the encoder's portable model id."] if encoded else []),
            "Examples:",
            *("    " + line for line in "\n".join(example).splitlines()),
        ]
    )
    return {
        "name": spec.name,
        "module": spec.module or spec.name,
        "label": spec.label,
        "task": 2 if pair else 1,
        "direction": direction,
        "description": description,
        "row": row,
        "unit": unit,
        "encoded": encoded,
        "features": "dialogue_features" if pair else "dialogue_set_features",
        "over": ":func:`dialfork_metrics.dialogue.score_pairs`" if pair else "the entry's ``fn``",
        "imports": _imports(pair, encoded),
        "init": _INIT_ENCODED + "\n" if encoded else "",
        "compute": (_PAIR_COMPUTE if pair else _SET_COMPUTE).format(
            encoder="self.encoder" if encoded else "None", args=", self.encoder" if encoded else ""
        ),
        "result": '_METHOD: sum(scores) / len(scores), "scores": scores'
        + (', "encoder": encoder_id(self.encoder)' if encoded else ""),
        "kwargs_doc": kwargs_doc,
        "inputs": inputs,
        "outputs": outputs,
        "example": "\n".join(example),
        "ref_py": _py(ref),
        "fork_py": _py(fork),
        "limits": "Values depend on the encoder; compare scores computed with the same encoder only."
        if encoded
        else "The metric reads the turns' texts only.",
    }


def class_name(module: str) -> str:
    """The ``evaluate.Metric`` class name of a module folder: evaluate names a module by its class
    (``camelcase_to_snakecase``), which must give the folder's name back.

    Args:
        module: The folder's name (``^[a-z][a-z0-9_]*$``).

    Returns:
        The CamelCase name (``flowscore`` -> ``Flowscore``, ``turn_count`` -> ``TurnCount``).

    Raises:
        ValueError: The name is not a lower-case identifier, or no class name maps back to it.
    """
    from evaluate.naming import camelcase_to_snakecase

    if not _NAME_RE.match(module or ""):
        raise ValueError(
            f"evaluate module name {module!r}: lower case letters, digits and '_', starting with a letter "
            "(set the entry's module= to such a name)"
        )
    cls = "".join(p[:1].upper() + p[1:] for p in module.split("_"))
    if camelcase_to_snakecase(cls) != module:
        raise ValueError(
            f"evaluate module name {module!r}: evaluate would name class {cls} {camelcase_to_snakecase(cls)!r}; "
            "pick a name without '__', a trailing '_' or a digit after '_' (the entry's module=)"
        )
    return cls


def module_files(name: str, level: str = "pair") -> dict[str, str]:
    """The files of a registered metric's ``evaluate`` module folder (nothing is written).

    Args:
        name: The metric's name.
        level: ``"pair"`` (Task 2) or ``"set"`` (Task 1).

    Returns:
        ``{file name: text}`` of ``<module>.py``, ``README.md``, ``app.py`` and ``requirements.txt``.

    Raises:
        RegistryError: No such metric (a ``ValueError``; the message lists the registered ones).
        ValueError: The metric computes nothing from the dialogues (a seeded control; a set metric
            without ``fn``), or its module name is not one evaluate can load.
    """
    spec = registry.get(name, level)
    if level == "pair" and spec.core is None:
        raise ValueError(f"pair metric {name!r}: its values are drawn from a seed; it has no evaluate module")
    if level == "set" and spec.fn is None:
        raise ValueError(
            f"set metric {name!r}: its entry names no fn (the function over two sets of dialogues) for the "
            "module to call; give the MetricSpec an fn"
        )
    w = _words(spec)
    cls = class_name(w["module"])
    pred, refs = ("REF, FORK", "REF, REF") if level == "pair" else ("FORK", "REF")
    pred_arg, ref_arg = (
        ("candidate_dialogues", "reference_dialogues")
        if level == "pair"
        else ("[target_set]", "[reference_set]")
    )
    return {
        f"{w['module']}.py": _SCRIPT.format(cls=cls, **w),
        "README.md": _README.format(
            sdk=SDK_VERSION, bibtex=DIALFORK_BIBTEX.strip(), pred_arg=pred_arg, ref_arg=ref_arg, **w
        ),
        "app.py": _APP.format(pred=pred, refs=refs, **w),
        "requirements.txt": REQUIREMENTS,
    }


def write_module_folder(
    name: str, level: str = "pair", out: str | os.PathLike | None = None, *, overwrite: bool = False
) -> Path:
    """Write a registered metric's ``evaluate`` module folder (:func:`module_files`).

    Args:
        name: The metric's name.
        level: ``"pair"`` or ``"set"``.
        out: The folder to write ``<module>/`` in; default the packaged modules' folder
            (``dialfork_metrics/modules``, where :func:`dialfork_metrics.load` finds it).
        overwrite: Replace the files of an existing folder (else that is an error).

    Returns:
        The module folder.

    Raises:
        FileExistsError: The folder exists and ``overwrite`` is false.
        RegistryError: No such metric (a ``ValueError``).
        ValueError: As :func:`module_files`.
    """
    files = module_files(name, level)
    spec = registry.get(name, level)
    folder = Path(out if out is not None else MODULES_DIR) / (spec.module or spec.name)
    if folder.exists() and not overwrite:
        raise FileExistsError(
            f"{folder} exists; pass --force (overwrite=True) to replace its files, or --out another folder"
        )
    folder.mkdir(parents=True, exist_ok=True)
    for fname, text in files.items():
        write_text_atomic(folder / fname, text)
    return folder


__all__ = ["REQUIREMENTS", "SDK_VERSION", "class_name", "module_files", "write_module_folder"]
