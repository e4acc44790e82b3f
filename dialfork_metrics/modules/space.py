"""The Hugging Face Space of a DialFork ``evaluate`` module: a small Gradio app.

evaluate 0.4.6's ``launch_gradio_widget`` is written against Gradio 3 (``gr.inputs``), which
current Spaces do not run; each module folder's ``app.py`` calls :func:`launch` instead::

    from pathlib import Path
    from dialfork_metrics.modules.space import launch

    launch(Path(__file__).resolve().parent, example={"predictions": [...], "references": [...]})

The app loads the module script **beside** ``app.py`` by its own file name
(``evaluate.load(<folder>/<module>.py)``, not from the Hub, and not ``evaluate.load(<folder>)``,
which wants the folder named after the module: a Space's checkout is not), shows the metric card (the folder's ``README.md`` without its front matter),
and computes the metric on JSON inputs: ``predictions`` and ``references`` as JSON lists, in
the format of the card's *Inputs* section. Errors are shown in words, never as a traceback.
``python app.py`` in the folder starts it, as a Space does; ``GRADIO_SERVER_NAME`` and
``GRADIO_SERVER_PORT`` choose the address (a Space sets them).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dialfork_dataset.jsonl import json_error_text

logger = logging.getLogger(__name__)

_FRONT_MATTER = re.compile(r"^---\n.*?\n---\n", flags=re.S)


def module_script(folder: str | os.PathLike) -> Path:
    """The ``evaluate`` module script in a Space's ``folder``: its one ``.py`` file besides
    ``app.py`` (whatever the folder is called).

    Args:
        folder: The Space's folder (``app.py``, ``README.md``, ``<module>.py``).

    Returns:
        Path: The script, e.g. ``folder/flowscore.py``.

    Raises:
        FileNotFoundError: ``folder`` holds no module script, or more than one (they are named).
    """
    folder = Path(folder)
    scripts = sorted(p for p in folder.glob("*.py") if p.name not in ("app.py", "__init__.py"))
    if len(scripts) != 1:
        found = ", ".join(p.name for p in scripts) or "none"
        raise FileNotFoundError(
            f"{folder}: a Space folder holds app.py and one evaluate module script "
            f"(<module>.py); found {found}. Copy the whole module folder "
            "(e.g. dialfork_metrics/modules/flowscore) into the Space"
        )
    return scripts[0]


def card_text(folder: str | os.PathLike) -> str:
    """The metric card of ``folder/README.md`` without its Space YAML front matter.

    Args:
        folder: The module's folder.

    Returns:
        The card's Markdown, stripped.
    """
    text = (Path(folder) / "README.md").read_text(encoding="utf-8")
    return _FRONT_MATTER.sub("", text, count=1).strip()


def compute_json(module: Any, predictions: str, references: str) -> tuple[dict[str, Any] | None, str]:
    """``(result, message)``: ``module.compute`` on the JSON texts ``predictions`` and
    ``references``; on bad input ``(None, what is wrong)`` (JSON syntax, not lists, different
    lengths, or the module's own ``ValueError`` / ``TypeError`` message).

    Args:
        module: A loaded ``evaluate`` module.
        predictions: A JSON list, one item per example.
        references: A JSON list, one item per prediction.

    Returns:
        ``(result of compute, "ok")``; or ``(None, message)`` when either text is not a JSON list,
        the lists differ in length or are empty, or ``compute`` raises ``ValueError``,
        ``TypeError`` or ``KeyError``.
    """
    inputs: dict[str, Any] = {}
    for name, text in (("predictions", predictions), ("references", references)):
        try:
            value = json.loads(text or "")
        except json.JSONDecodeError as e:
            return None, f"{name} is not valid JSON ({json_error_text(e, line=True)})"
        except (RecursionError, ValueError):
            return None, f"{name} could not be read (nested too deeply or a number too long)"
        if not isinstance(value, list):
            return None, f"{name} must be a JSON list (one item per example)"
        inputs[name] = value
    if len(inputs["predictions"]) != len(inputs["references"]):
        return None, (
            f"predictions has {len(inputs['predictions'])} items but references has "
            f"{len(inputs['references'])}; give one reference per prediction"
        )
    if not inputs["predictions"]:
        return None, "give at least one prediction and its reference"
    try:
        result = module.compute(**inputs)
    except (ValueError, TypeError, KeyError) as e:
        return None, f"{type(e).__name__}: {e}"
    return result, "ok"


def build_demo(folder: str | os.PathLike, example: Mapping[str, Any] | None = None, module: Any = None):
    """The Gradio Blocks app of the module in ``folder`` (``module``: an already loaded one).

    Two JSON editors (predictions, references), a Compute button, the result and any error,
    then the metric card. An unexpected error in ``compute`` is logged, not shown.

    Args:
        folder: The module's folder (its script and ``README.md``).
        example: ``{"predictions": [...], "references": [...]}`` filled in at start; None: empty
            lists.
        module: The loaded module; None loads the folder's script with ``evaluate.load``.

    Returns:
        The ``gradio.Blocks`` app (not launched).
    """
    import gradio as gr

    folder = Path(folder).resolve()
    if module is None:
        import evaluate

        module = evaluate.load(str(module_script(folder)))
    example = dict(example or {})
    ex_pred = json.dumps(example.get("predictions", []), ensure_ascii=False, indent=1)
    ex_ref = json.dumps(example.get("references", []), ensure_ascii=False, indent=1)

    def run(predictions: str, references: str):
        try:
            result, msg = compute_json(module, predictions, references)
        except Exception:  # a bug, not an input error: log it, do not show a traceback
            logger.exception("%s: compute failed", folder.name)
            return None, "**Internal error** while computing; see the Space logs."
        if result is None:
            return None, "**Error**: " + msg.replace("*", "\\*").replace("_", "\\_")
        return result, ""

    with gr.Blocks(title=folder.name) as demo:
        with gr.Row():
            with gr.Column():
                predictions = gr.Code(
                    ex_pred, language="json", label="predictions (JSON list)", elem_id="predictions"
                )
                references = gr.Code(
                    ex_ref, language="json", label="references (JSON list)", elem_id="references"
                )
                button = gr.Button("Compute", variant="primary", elem_id="compute")
            with gr.Column():
                output = gr.JSON(label=f"{module.name} result", elem_id="result")
                error = gr.Markdown(elem_id="error")
        button.click(run, inputs=[predictions, references], outputs=[output, error])
        gr.Markdown(card_text(folder))
    return demo


def launch(folder: str | os.PathLike, example: Mapping[str, Any] | None = None, **launch_kwargs: Any) -> None:
    """Build the app of ``folder`` and serve it (what a module's ``app.py`` does).

    Turns off Gradio's analytics unless ``GRADIO_ANALYTICS_ENABLED`` is set, and blocks until the
    server stops.

    Args:
        folder: The module's folder.
        example: The example shown at start (see :func:`build_demo`).
        **launch_kwargs: Passed to ``Blocks.launch`` (``ssr_mode`` defaults to False).
    """
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    launch_kwargs.setdefault("ssr_mode", False)
    build_demo(folder, example).launch(**launch_kwargs)


__all__ = ["build_demo", "card_text", "compute_json", "launch", "module_script"]
