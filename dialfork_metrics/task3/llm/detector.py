"""Zero-shot LLM detectors for Task 3 (SPEC section 8): the offline regimes, without and with
the ground-truth workflow in the prompt.

The model is asked for the first assistant (system) turn where the dialogue deviates from the
intended workflow, or NONE. Prompts are the template files ``prompts/without_workflow.txt`` and
``prompts/with_workflow.txt`` (``str.format`` fields ``{dialogue}``, ``{num_system_turns}``,
``{task}``, ``{workflow}``); a custom template file or text can be passed instead.

Backends:

* ``"transformers"``: any local chat model (Hub id or path): batched greedy generation with
  left padding and the tokenizer's chat template (:class:`TransformersChat`);
* ``"openai"``: any OpenAI-compatible endpoint (vLLM, ollama, ...) through the project's shared
  :class:`generation.llm.client.OpenAICompatClient` (temperature 0);
* or any object with ``chat(batch) -> list[str]`` passed as ``client=``.

Every reply is parsed by :func:`~dialfork_metrics.task3.llm.parsing.parse_turn_answer`; an
unparsable reply or a turn outside ``1..T`` counts as ``None`` (no deviation) and is reported:
:attr:`LLMDetector.last_report` holds the counts and examples, and a warning is logged.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from importlib import resources
from numbers import Integral
from pathlib import Path
from typing import Any

from sklearn.base import BaseEstimator
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from dialfork_dataset.forks import system_turn_positions
from dialfork_dataset.turns import as_turns

from .parsing import ParsedAnswer, check_range, parse_turn_answer

logger = logging.getLogger(__name__)

PROMPT_FILES = {False: "without_workflow.txt", True: "with_workflow.txt"}
BACKENDS = ("transformers", "openai")
#: Answer statuses that count as null and are reported.
UNUSABLE = ("unparsable", "out_of_range", "too_long")
USER_LABEL = "User"
SYSTEM_LABEL = "Assistant"


def load_prompt(with_workflow: bool = False, prompt: str | os.PathLike | None = None) -> str:
    """The prompt template: the packaged one, or ``prompt`` (a file path or the template text).

    Args:
        with_workflow: Take the packaged with-workflow template (else the without-workflow one);
            used only when ``prompt`` is None.
        prompt: A template file path, or template text containing ``{dialogue}``; None: packaged.

    Returns:
        The template text (``str.format`` fields, see the module doc).

    Raises:
        ValueError: ``prompt`` is neither an existing file nor text containing ``{dialogue}``.
    """
    if prompt is None:
        return (
            resources.files(__package__)
            .joinpath("prompts", PROMPT_FILES[bool(with_workflow)])
            .read_text("utf-8")
        )
    p = Path(prompt) if not isinstance(prompt, str) or "\n" not in prompt else None
    if p is not None and p.is_file():
        return p.read_text(encoding="utf-8")
    if isinstance(prompt, str) and "{dialogue}" in prompt:
        return prompt
    raise ValueError(
        f"prompt must be a template file or text containing '{{dialogue}}', got {str(prompt)[:60]!r}"
    )


def render_dialogue(turns: Sequence[Mapping[str, str]]) -> str:
    """``User: ...`` / ``Assistant [turn k]: ...`` lines, system turns numbered 1..T.

    Args:
        turns: ``{"speaker", "text"}`` dicts; any speaker other than ``system`` is rendered as User.

    Returns:
        The transcript, one line per turn.
    """
    lines, k = [], 0
    for t in turns:
        if t["speaker"] == "system":
            k += 1
            lines.append(f"{SYSTEM_LABEL} [turn {k}]: {t['text']}")
        else:
            lines.append(f"{USER_LABEL}: {t['text']}")
    return "\n".join(lines)


def build_prompt(
    template: str, turns: Sequence[Mapping[str, str]], task: str | None = None, workflow: str | None = None
) -> str:
    """The prompt of one dialogue: ``template`` with its fields filled.

    Args:
        template: A :func:`load_prompt` template.
        turns: The dialogue's ``{"speaker", "text"}`` turns.
        task: The task name (``{task}``); None: empty.
        workflow: The rendered workflow (``{workflow}``); None: empty.

    Returns:
        The prompt text.

    Raises:
        ValueError: The template has a field other than ``dialogue``, ``num_system_turns``,
            ``task`` and ``workflow``.
    """
    T = len(system_turn_positions(turns))
    fields = {
        "dialogue": render_dialogue(turns),
        "num_system_turns": T,
        "task": task or "",
        "workflow": workflow or "",
    }
    try:
        return template.format(**fields)
    except (KeyError, IndexError) as e:
        raise ValueError(f"prompt template has an unknown field {e}; known: {sorted(fields)}") from None


class TransformersChat:
    """Batched greedy chat generation with a local ``transformers`` causal LM.

    Conversations are sorted by length into batches of ``batch_size`` (less padding), padded on
    the left, decoded greedily for at most ``max_new_tokens``; replies come back in input order.
    ``device``: ``None`` (CUDA if available, else CPU), a torch device, or ``"auto"``
    (``device_map="auto"``: spread a large model over the visible GPUs, via accelerate).
    ``dtype``: ``"auto"`` (bfloat16 on CUDA, float32 on the CPU) or a dtype name. Loading is
    :mod:`generation.llm.loader`'s (the generator's loader): a model without a chat template, a
    missing folder or an unknown Hub id raise errors naming the model and the fix.
    A prompt longer than the model's context window (``max_position_embeddings`` minus
    ``max_new_tokens``) is not generated: its reply is ``""`` and its index is in
    :attr:`last_too_long` (the detector reports it).

    Args:
        model: Hub id or local folder of a chat model (loaded on first :meth:`chat`).
        device: None, a torch device, or ``"auto"`` (see above).
        dtype: ``"auto"`` or a torch dtype name.
        batch_size: Conversations per generation batch, >= 1.
        max_new_tokens: Most tokens generated per reply, >= 1.
        trust_remote_code: Allow the model's own code from the Hub (``transformers``'s option).
        show_progress: Show a progress bar over the batches.
        gguf_file: A GGUF file inside the folder or Hub repository ``model`` (None: ``model`` is an
            ordinary model, a registry name such as ``"smollm2"`` or a ``.gguf`` path); converted
            once and cached by :func:`generation.llm.gguf.resolve_model`.
        gguf_cache: Folder of converted GGUF models (None: ``$DIALFORK_GGUF_CACHE``, else
            ``~/.cache/dialfork/gguf``).

    Raises:
        ValueError: ``batch_size`` or ``max_new_tokens`` is not an int >= 1, or ``dtype`` is unknown.
    """

    def __init__(
        self,
        model: str,
        device: str | None = None,
        dtype: str = "auto",
        batch_size: int = 8,
        max_new_tokens: int = 16,
        trust_remote_code: bool = False,
        show_progress: bool = False,
        gguf_file: str | None = None,
        gguf_cache: str | os.PathLike | None = None,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        from generation.api import dtype_errors

        if dtype_errors(dtype):
            raise ValueError(dtype_errors(dtype)[0])
        self.model_name = str(model)
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.trust_remote_code = trust_remote_code
        self.show_progress = show_progress
        self.gguf_file = gguf_file
        self.gguf_cache = gguf_cache
        self._model = None
        self._tok = None
        self.last_too_long: set[int] = set()

    def _load(self):
        if self._model is not None:
            return
        from generation.api import context_window, load_chat_model, load_chat_tokenizer, resolve_model

        path = resolve_model(
            self.model_name,
            self.gguf_file,
            dtype=self.dtype,
            device="auto" if self.device in (None, "auto") else self.device,
            cache_dir=self.gguf_cache,
        ).path
        tok = load_chat_tokenizer(path, trust_remote_code=self.trust_remote_code)
        tok.padding_side = "left"
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        # device None: CUDA when available, else the CPU; "auto": spread over the GPUs (device_map)
        model, device = load_chat_model(
            path,
            device="auto" if self.device in (None, "auto") else self.device,
            dtype=self.dtype,
            device_map="auto" if self.device == "auto" else None,
            trust_remote_code=self.trust_remote_code,
        )
        self._window = context_window(model.config, tok)
        if model.generation_config.pad_token_id is None:
            model.generation_config.pad_token_id = tok.pad_token_id
        self._model, self._tok, self._device = model, tok, device

    def chat(self, batch: Sequence[Sequence[Mapping[str, str]]], **_: Any) -> list[str]:
        """Greedy replies to a batch of conversations (the model loads on the first call).

        Args:
            batch: Conversations, each a list of ``{"role", "content"}`` messages.
            **_: Ignored (sampling options of other backends).

        Returns:
            One reply per conversation, in input order; ``""`` for a prompt too long for the
            model's context window (its index is in :attr:`last_too_long`).

        Raises:
            ValueError: The model cannot be loaded (missing folder, unknown Hub id, no chat
                template), from :mod:`generation.llm.loader`.
        """
        import torch
        from tqdm.auto import tqdm

        self._load()
        tok, model = self._tok, self._model
        texts = [
            tok.apply_chat_template([dict(m) for m in conv], tokenize=False, add_generation_prompt=True)
            for conv in batch
        ]
        lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
        self.last_too_long = set()
        if self._window:
            self.last_too_long = {i for i, n in enumerate(lengths) if n + self.max_new_tokens > self._window}
        order = sorted(
            (i for i in range(len(texts)) if i not in self.last_too_long), key=lambda i: -lengths[i]
        )
        out: list[str] = [""] * len(texts)
        starts = range(0, len(order), self.batch_size)
        for s in tqdm(
            starts, desc=f"LLM {Path(self.model_name).name}", disable=not self.show_progress, unit="batch"
        ):
            idx = order[s : s + self.batch_size]
            enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(self._device) for k, v in enc.items()}
            with torch.inference_mode():
                gen = model.generate(
                    **enc,
                    do_sample=False,
                    max_new_tokens=self.max_new_tokens,
                    pad_token_id=tok.pad_token_id,
                    temperature=None,
                    top_p=None,
                    top_k=None,
                )
            new = gen[:, enc["input_ids"].shape[1] :]
            for i, row in zip(idx, new):
                out[i] = tok.decode(row, skip_special_tokens=True)
        return out


class LLMDetector(BaseEstimator):
    """Zero-shot LLM detector (see the module doc).

    A scikit-learn estimator (``BaseEstimator``): the constructor only stores its parameters;
    :meth:`fit` checks them and builds what it runs with, the fitted ``client_`` (the chat
    backend: ``client``, else a :class:`TransformersChat` or an OpenAI-compatible client) and
    ``template_`` (the prompt template). Being zero-shot it learns nothing, and predicting before
    :meth:`fit` fits it first.

    Args:
        model: Model id/path (transformers) or served model name (openai); required unless
            ``client`` is given.
        backend: ``"transformers"`` or ``"openai"`` (ignored when ``client`` is given).
        with_workflow: Put the task's workflow in the prompt (needs each dialogue's ``task``).
        star_dir: Workflow source for rendering workflows: a STAR folder, ``star:PATH`` or
            ``workflow:PATH`` (default ``$DIALFORK_STAR_DIR``).
        workflows: ``{task: workflow text}`` overriding the STAR rendering.
        base_url: API root of the openai backend (required with it), e.g. ``http://127.0.0.1:8000/v1``.
        api_key: API key of the openai backend; None: none.
        batch_size: Conversations per generation batch (transformers) or requests in flight (openai).
        max_new_tokens: Most tokens per reply.
        device: Torch device of the transformers backend (:class:`TransformersChat`).
        dtype: Torch dtype of the transformers backend.
        prompt: Custom template (file path or text) instead of the packaged one.
        client: Any object with ``chat(batch, **sampling) -> list[str]``, used instead of a backend.
        max_examples: How many unusable replies the report keeps verbatim.
        show_progress: Show a progress bar over the generation batches (transformers).
        gguf_file: The transformers backend's GGUF file inside the folder ``model`` (see
            :class:`TransformersChat`); None: ``model`` alone names the model.
    """

    name = "llm"
    _parameter_constraints: dict = {
        "model": [str, os.PathLike, None],
        "backend": [StrOptions(set(BACKENDS))],
        "with_workflow": ["boolean"],
        "star_dir": [str, os.PathLike, None],
        "workflows": [Mapping, None],
        "base_url": [str, None],
        "api_key": [str, None],
        "batch_size": [Interval(Integral, 1, None, closed="left")],
        "max_new_tokens": [Interval(Integral, 1, None, closed="left")],
        "device": "no_validation",  # None, a torch device or "auto" (TransformersChat)
        "dtype": [str],
        "prompt": [str, os.PathLike, None],
        "client": [None, HasMethods(["chat"])],
        "max_examples": [Interval(Integral, 0, None, closed="left")],
        "show_progress": ["boolean"],
        "gguf_file": [str, None],
    }
    #: The report of the last :meth:`predict_many` (None before the first).
    last_report: dict[str, Any] | None = None
    #: The raw replies of the last :meth:`predict_many` (rebound by each call, never mutated).
    last_answers: list[str] = []

    def __init__(
        self,
        model: str | None = None,
        backend: str = "transformers",
        with_workflow: bool = False,
        star_dir: str | os.PathLike | None = None,
        workflows: Mapping[str, str] | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 8,
        max_new_tokens: int = 16,
        device: str | None = None,
        dtype: str = "auto",
        prompt: str | os.PathLike | None = None,
        client: Any = None,
        max_examples: int = 20,
        show_progress: bool = False,
        gguf_file: str | None = None,
    ):
        self.model = model
        self.backend = backend
        self.with_workflow = with_workflow
        self.star_dir = star_dir
        self.workflows = workflows
        self.base_url = base_url
        self.api_key = api_key
        self.batch_size = batch_size
        self.max_new_tokens = max_new_tokens
        self.device = device
        self.dtype = dtype
        self.prompt = prompt
        self.client = client
        self.max_examples = max_examples
        self.show_progress = show_progress
        self.gguf_file = gguf_file
        self._star = None
        self._rendered: dict[str, str] = {}  # task -> its workflow rendered from the source

    def __repr__(self) -> str:
        backend, wf = self._backend, self.with_workflow
        return f"LLMDetector(model={self.model!r}, backend={backend!r}, with_workflow={wf})"

    @property
    def _backend(self) -> str:
        return "custom" if self.client is not None else self.backend

    def fit(self, dialogues: Any = None, embeddings: Any = None, **_: Any) -> LLMDetector:
        """Check the parameters and build the chat client (``client_``) and the prompt template
        (``template_``); zero-shot, so nothing is learnt from the dialogues.

        Args:
            dialogues: Ignored.
            embeddings: Ignored.

        Returns:
            The detector itself.

        Raises:
            InvalidParameterError: A parameter breaks ``_parameter_constraints`` (a ``ValueError``).
            ValueError: Without ``client``: no ``model``, or the openai backend without
                ``base_url``; also a bad ``prompt`` or generation setting.
        """
        self._validate_params()
        if self.client is None:
            if not self.model:
                raise ValueError(
                    "LLMDetector needs model= (a local chat model id/path, or the served model name)"
                )
            if self.backend == "openai" and not self.base_url:
                raise ValueError("the openai backend needs base_url= (e.g. http://127.0.0.1:8000/v1)")
        self.template_ = load_prompt(self.with_workflow, self.prompt)
        if self.client is not None:
            self.client_ = self.client
        elif self.backend == "transformers":
            self.client_ = TransformersChat(
                self.model,
                device=self.device,
                dtype=self.dtype,
                batch_size=self.batch_size,
                max_new_tokens=self.max_new_tokens,
                show_progress=self.show_progress,
                gguf_file=self.gguf_file,
            )
        else:
            from generation.api import OpenAICompatClient

            self.client_ = OpenAICompatClient(
                self.base_url, self.model, api_key=self.api_key, concurrency=self.batch_size
            )
        return self

    def config(self) -> dict[str, Any]:
        """The detector's settings.

        Returns:
            A dict with ``detector``, ``model``, ``backend``, ``with_workflow``, ``max_new_tokens``.
        """
        return {
            "detector": self.name,
            "model": self.model,
            "backend": self._backend,
            "with_workflow": self.with_workflow,
            "max_new_tokens": self.max_new_tokens,
            **({"gguf_file": self.gguf_file} if self.gguf_file else {}),
        }

    # -- prompts -----------------------------------------------------------------------------
    def workflow_for(self, task: str) -> str:
        """The rendered workflow of a task (from ``workflows``, else the workflow source, rendered once).

        Args:
            task: The task name.

        Returns:
            The workflow's steps with their response templates, as text.

        Raises:
            StarError: The workflow source cannot be opened or has no such task (or its
                ``SourceError`` for a ``workflow:PATH`` source).
        """
        if self.workflows and task in self.workflows:
            return self.workflows[task]
        if task in self._rendered:
            return self._rendered[task]
        if self._star is None:  # a STAR folder, star:PATH or workflow:PATH (dialfork_dataset.sources)
            from dialfork_dataset.sources import open_source

            self._star = open_source(self.star_dir)
        text = self._star.task(task).render_steps(with_templates=True)
        self._rendered[task] = text
        return text

    def prompts(self, dialogues: Sequence[Any]) -> list[str]:
        """The prompt of each dialogue.

        Args:
            dialogues: Records, lists of ``{"speaker", "text"}`` dicts or of turn strings (records
                with ``task`` for the with-workflow prompt).

        Returns:
            One prompt per dialogue, in order.

        Raises:
            ValueError: A dialogue is malformed, or lacks ``task`` under the with-workflow prompt
                (every such dialogue listed); or, not fitted yet, as :meth:`fit`.
        """
        if "template_" not in self.__dict__:
            self.fit()  # zero-shot: fitting only checks the parameters and builds the client
        out, errs = [], []
        for i, d in enumerate(dialogues):
            did = d.get("dialogue_id") if isinstance(d, Mapping) else None
            where = f"dialogue {did!r}" if did else f"dialogue #{i}"
            turns = as_turns(d, where=where)
            task = d.get("task") if isinstance(d, Mapping) else None
            workflow = None
            if self.with_workflow:
                if not task:
                    errs.append(
                        f"{where}: the with-workflow prompt needs the dialogue's 'task' (blind dialogues "
                        "have none; use the without-workflow prompt)"
                    )
                    continue
                workflow = self.workflow_for(task)
            out.append(build_prompt(self.template_, turns, task, workflow))
        if errs:
            raise ValueError(f"{len(errs)} dialogue(s) cannot be prompted:\n  " + "\n  ".join(errs[:20]))
        return out

    # -- prediction --------------------------------------------------------------------------
    def predict(self, dialogue: Any, embeddings: Any = None) -> int | None:
        """:meth:`predict_many` of one dialogue.

        Args:
            dialogue: The dialogue.
            embeddings: Ignored.

        Returns:
            The predicted first deviating system turn (1-based), or None.
        """
        return self.predict_many([dialogue])[0]

    def predict_many(
        self, dialogues: Sequence[Any], embeddings: Any = None, show_progress: bool | None = None
    ) -> list[int | None]:
        """Ask the model about every dialogue; unusable answers count as None and are reported in
        :attr:`last_report` (the raw answers in :attr:`last_answers`).

        Args:
            dialogues: The dialogues (see :meth:`prompts`).
            embeddings: Ignored.
            show_progress: Ignored (the constructor's ``show_progress`` applies).

        Returns:
            One prediction per dialogue: a system turn in ``1..T``, or None (NONE answered, or the
            answer unparsable, out of range or its prompt too long).

        Raises:
            ValueError: As :meth:`prompts` (which fits the detector first if need be).
            RuntimeError: The backend returned another number of replies than prompts.
        """
        dialogues = list(dialogues)
        prompts = self.prompts(dialogues)
        batch = [[{"role": "user", "content": p}] for p in prompts]
        if self._backend == "openai":
            answers = self.client_.chat(batch, temperature=0.0, max_tokens=self.max_new_tokens)
        else:
            answers = self.client_.chat(batch)
        if len(answers) != len(batch):
            raise RuntimeError(f"the LLM backend returned {len(answers)} replies for {len(batch)} prompts")
        too_long = getattr(self.client_, "last_too_long", set())
        parsed: list[ParsedAnswer] = []
        for i, (d, a) in enumerate(zip(dialogues, answers)):
            if i in too_long:
                parsed.append(ParsedAnswer(None, "too_long", a))
                continue
            T = len(system_turn_positions(as_turns(d)))
            parsed.append(check_range(parse_turn_answer(a), T))
        self.last_answers = list(answers)
        self.last_report = self._report(dialogues, parsed)
        rep = self.last_report
        bad = rep["unparsable"] + rep["out_of_range"] + rep["too_long"]
        if bad:
            logger.warning(
                "%d of %d LLM answers could not be used (%d unparsable, %d out of range, %d prompts too "
                "long for the model) and count as no deviation (null); see last_report",
                bad,
                len(parsed),
                rep["unparsable"],
                rep["out_of_range"],
                rep["too_long"],
            )
        return [p.value for p in parsed]

    def _report(self, dialogues: Sequence[Any], parsed: Sequence[ParsedAnswer]) -> dict[str, Any]:
        counts = Counter(p.status for p in parsed)
        examples = []
        for i, (d, p) in enumerate(zip(dialogues, parsed)):
            if p.status in UNUSABLE and len(examples) < self.max_examples:
                did = d.get("dialogue_id") if isinstance(d, Mapping) else None
                examples.append(
                    {"dialogue_id": did if did else f"#{i}", "status": p.status, "answer": p.raw[:300]}
                )
        return {
            "n": len(parsed),
            "turn": counts.get("turn", 0),
            "none": counts.get("none", 0),
            "unparsable": counts.get("unparsable", 0),
            "out_of_range": counts.get("out_of_range", 0),
            "too_long": counts.get("too_long", 0),
            "examples": examples,
            **self.config(),
        }
