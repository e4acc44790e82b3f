"""The calibrated LLM judge of the human study (paper, Appendix N, Table 11).

An LLM answers the annotators' three questions on each conversation, in the same order and
with the same information as people get (each step is a separate prompt, so nothing of a later
step can leak into an earlier answer):

1. **rating**: the task's workflow and the dialogue; "How well does the assistant follow the
   steps?", an integer from 0 (ignores them) to 100 (follows them);
2. **cued check**: the same, plus the step-2 cue (the injected instruction's description, or a
   foil); ``yes`` / ``partly`` / ``no`` and, with yes or partly, the first assistant turn where
   it starts;
3. **prefix check** (forks with t_k > 1 only): the fork region marked, the injected instruction
   shown next to the judge's own step-2 answer; ``yes`` / ``mostly`` / ``no``.

**Calibration** (ours; the paper names a calibrated judge but not the method): an LLM's raw
0-100 ratings use the scale differently from people, so they are mapped onto the people's scale
by an increasing isotonic regression (scikit-learn) from the judge's raw rating to the mean
slider of the people who judged the same conversation (:func:`fit_calibration`). On the
study's own conversations the map is cross-fitted (:func:`cross_fit`: ``n_folds`` folds grouped
by source dialogue, each conversation calibrated by a map fitted without its source), so the
judge's study column is out of sample; on the rest of the corpus the map fitted on every study
conversation is applied. The categorical answers (steps 2 and 3) are used as the model gives
them. ``calibration="none"`` keeps the raw ratings.

Backends are the project's: ``"transformers"`` (:class:`dialfork_metrics.task3.llm.detector.TransformersChat`,
batched greedy decoding with the tokenizer's chat template), ``"openai"`` (any OpenAI-compatible
server through :class:`generation.llm.client.OpenAICompatClient`, temperature 0), or
any object with ``chat(batch) -> list[str]`` passed as ``client=``.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

BACKENDS = ("transformers", "openai")
CALIBRATIONS = ("isotonic", "none")
CUE_ANSWERS = ("yes", "partly", "no")
PREFIX_ANSWERS = ("yes", "mostly", "no")

_INTRO = (
    "You are checking whether a customer-service assistant follows the steps of its workflow. "
    "Only the assistant is judged; the exact wording of its turns does not matter, only the steps it "
    "performs.\n\nTask: {task}\n\nWorkflow (the steps the assistant was told to follow):\n{workflow}\n\n"
    "Conversation (assistant turns are numbered 1 to {num_system_turns}):\n{dialogue}\n\n"
)
PROMPTS: dict[int, str] = {
    1: _INTRO
    + (
        "The assistant was told to follow the steps of the workflow. How well does it? Answer with one "
        "integer from 0 (it ignores them) to 100 (it follows them), as 'Answer: N'."
    ),
    2: _INTRO
    + (
        "At some point, the assistant was given an extra instruction. From then on, it was meant to:\n"
        "\"{cue}\"\nDoes that happen in this conversation? Answer 'Answer: yes', 'Answer: partly' or "
        "'Answer: no'. With yes or partly, add the first assistant turn where it starts to happen, as "
        "'Answer: yes, turn N'."
    ),
    3: _INTRO
    + (
        "The extra instruction was given before assistant turn {fork_turn}; the turns from there on are "
        "marked with '>>'. The instruction actually given was:\n\"{instruction}\"\nYour earlier answer "
        "was: {step2}.\nBefore the marked part, did the assistant follow the steps? Answer 'Answer: yes', "
        "'Answer: mostly' or 'Answer: no'."
    ),
}


def render_marked_dialogue(turns: Sequence[Mapping[str, str]], fork_turn: int | None = None) -> str:
    """Dialogue lines as in the Task 3 prompts, turns from system turn ``fork_turn`` on marked ``>>``.

    Args:
        turns: The dialogue's ``{"speaker", "text"}`` turns.
        fork_turn: The 1-based system turn from which lines are marked; None: no mark.

    Returns:
        The dialogue as text, one line per turn.
    """
    lines, k, marked = [], 0, False
    for t in turns:
        if t["speaker"] == "system":
            k += 1
            marked = marked or (fork_turn is not None and k >= fork_turn)
            line = f"Assistant [turn {k}]: {t['text']}"
        else:
            line = f"User: {t['text']}"
        lines.append((">> " if marked else "") + line)
    return "\n".join(lines)


def _answer_part(text: str | None) -> str:
    text = re.sub(r"<think>.*?(</think>|$)", " ", str(text or ""), flags=re.S | re.I)
    parts = re.split(r"answer\s*[:：]", text, flags=re.I)
    return (parts[-1] if len(parts) > 1 else text).strip()


def parse_rating(text: str | None) -> int | None:
    """The 0-100 rating in a reply: the first integer after the last ``Answer:``, else the last
    integer of the reply.

    Args:
        text: The judge's reply (None: no reply).

    Returns:
        The rating, or ``None`` when there is none or it is outside 0..100.
    """
    part = _answer_part(text)
    nums = re.findall(r"(?<![\d.])\d{1,3}(?![\d.])", part)
    if not nums:
        return None
    v = int(nums[0] if re.search(r"answer\s*[:：]", str(text or ""), re.I) else nums[-1])
    return v if 0 <= v <= 100 else None


def parse_choice(text: str | None, options: Sequence[str]) -> str | None:
    """The first of ``options`` (whole word, case-insensitive) in the reply's answer part.

    Args:
        text: The judge's reply (None: no reply).
        options: The allowed answers, lower case.

    Returns:
        The option found, or ``None``.
    """
    part = _answer_part(text).lower()
    best = None
    for o in options:
        m = re.search(rf"\b{re.escape(o)}\b", part)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), o)
    return best[1] if best else None


def parse_cue_answer(text: str | None, num_system_turns: int) -> tuple[str | None, int | None, str]:
    """``(answer, onset turn, status)`` of a step-2 reply.

    Args:
        text: The judge's reply (None: no reply).
        num_system_turns: ``T``, the dialogue's number of system turns.

    Returns:
        ``(answer, onset, status)``: ``status`` is ``"ok"``, ``"unparsable"`` (no yes/partly/no)
        or ``"no_onset"`` (yes/partly without a turn in 1..T; the answer is kept, the onset is
        ``None``).
    """
    from .task3.llm.parsing import check_range, parse_turn_answer

    ans = parse_choice(text, CUE_ANSWERS)
    if ans is None:
        return None, None, "unparsable"
    if ans == "no":
        return ans, None, "ok"
    turn = check_range(parse_turn_answer(_answer_part(text)), int(num_system_turns))
    if turn.status != "turn":
        return ans, None, "no_onset"
    return ans, int(turn.value), "ok"


# ----------------------------------------------------------------------------------- calibration


def fit_calibration(raw: Sequence[float], target: Sequence[float]):
    """An increasing isotonic map from raw judge ratings to people's ratings (0..100, clipped
    outside the fitted range).

    Args:
        raw: The judge's ratings.
        target: People's ratings of the same items.

    Returns:
        A fitted ``sklearn.isotonic.IsotonicRegression``.

    Raises:
        ValueError: The two are not matching 1-D arrays of at least 2 ratings.
    """
    from sklearn.isotonic import IsotonicRegression

    x, y = np.asarray(raw, dtype=float), np.asarray(target, dtype=float)
    if x.shape != y.shape or x.ndim != 1 or len(x) < 2:
        raise ValueError(
            f"calibration needs matching 1-d arrays of at least 2 ratings, got {x.shape} and {y.shape}"
        )
    return IsotonicRegression(y_min=0.0, y_max=100.0, increasing=True, out_of_bounds="clip").fit(x, y)


def cross_fit(
    raw: Sequence[float], target: Sequence[float], groups: Sequence[Any], n_folds: int = 5, seed: int = 0
) -> np.ndarray:
    """Out-of-fold calibrated ratings: each item is mapped by an isotonic map fitted on the
    other folds (``GroupKFold``-style folds over ``groups``, assigned at random with ``seed``),
    so that no conversation, nor any other of its source, calibrates itself.

    Args:
        raw: The judge's ratings.
        target: People's ratings of the same items.
        groups: Each item's group (its source): a group never calibrates itself.
        n_folds: The number of folds (at most the number of groups).
        seed: Seed of the assignment of groups to folds.

    Returns:
        The calibrated ratings, one per item.

    Raises:
        ValueError: Fewer than 2 groups, or a fold's calibration data is too small.
    """
    x, y = np.asarray(raw, dtype=float), np.asarray(target, dtype=float)
    g = np.asarray([str(v) for v in groups])
    uniq = np.unique(g)
    k = min(int(n_folds), len(uniq))
    if k < 2:
        raise ValueError(f"cross-fitting needs at least 2 source groups, got {len(uniq)}")
    perm = np.random.default_rng(seed).permutation(len(uniq))
    fold_of = {u: int(perm[i] % k) for i, u in enumerate(uniq)}
    folds = np.array([fold_of[v] for v in g])
    out = np.empty(len(x))
    for f in range(k):
        test = folds == f
        out[test] = fit_calibration(x[~test], y[~test]).predict(x[test])
    return out


# ----------------------------------------------------------------------------------- the judge


class LLMJudge:
    """The judge (see the module doc).

    Args:
        model: Model id/path (transformers) or served model name (openai).
        backend: ``"transformers"`` or ``"openai"`` (ignored when ``client`` is given).
        star_dir: Workflow source for the workflow text: a STAR folder or any source spec
            (``workflow:PATH``, ``KIND:PATH``: :func:`dialfork_dataset.sources.open_source`; default
            ``$DIALFORK_STAR_DIR``).
        workflows: ``{task: workflow text}`` overriding STAR.
        base_url: Endpoint of the openai backend.
        api_key: Key of the openai backend.
        batch_size: Conversations per generation batch.
        max_new_tokens: Tokens generated per answer.
        device: Device of the transformers backend (None: automatic).
        dtype: Dtype of the transformers backend.
        prompts: ``{step: template}`` overriding :data:`PROMPTS` (``str.format`` fields ``task``,
            ``workflow``, ``dialogue``, ``num_system_turns``, ``cue``, ``fork_turn``,
            ``instruction``, ``step2``).
        client: Any object with ``chat(batch, **sampling) -> list[str]``.
        show_progress: Show progress bars.
        gguf_file: The transformers backend's GGUF file inside the folder ``model`` (None:
            ``model`` alone names it: a model folder or Hub id, a registry name such as
            ``"smollm2"``, a ``.gguf`` path); see :class:`~dialfork_metrics.task3.llm.detector.TransformersChat`.
    """

    def __init__(
        self,
        model: str | None = None,
        backend: str = "transformers",
        star_dir: str | os.PathLike | None = None,
        workflows: Mapping[str, str] | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 8,
        max_new_tokens: int = 32,
        device: str | None = None,
        dtype: str = "auto",
        prompts: Mapping[int, str] | None = None,
        client: Any = None,
        show_progress: bool = False,
        gguf_file: str | None = None,
    ):
        if client is None:
            if backend not in BACKENDS:
                raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
            if not model:
                raise ValueError(
                    "LLMJudge needs model= (a local chat model id/path, or the served model name)"
                )
            if backend == "openai" and not base_url:
                raise ValueError("the openai backend needs base_url= (e.g. http://127.0.0.1:8000/v1)")
        self.model = model
        self.gguf_file = gguf_file
        self.backend = backend if client is None else "custom"
        self.star_dir = star_dir
        self.workflows = dict(workflows or {})
        self.max_new_tokens = int(max_new_tokens)
        self.prompts = {**PROMPTS, **dict(prompts or {})}
        if client is not None:
            self.client = client
        elif backend == "transformers":
            from .task3.llm.detector import TransformersChat

            self.client = TransformersChat(
                model,
                device=device,
                dtype=dtype,
                batch_size=batch_size,
                max_new_tokens=max_new_tokens,
                show_progress=show_progress,
                gguf_file=gguf_file,
            )
        else:
            from generation.api import OpenAICompatClient

            self.client = OpenAICompatClient(base_url, model, api_key=api_key, concurrency=batch_size)
        self.last_report: dict[str, Any] | None = None
        self._star = None

    def __repr__(self) -> str:
        return f"LLMJudge(model={self.model!r}, backend={self.backend!r})"

    def config(self) -> dict[str, Any]:
        """The judge's settings, as reports record them.

        Returns:
            ``{"judge", "model", "backend", "max_new_tokens"}`` (and ``gguf_file`` when set).
        """
        return {
            "judge": "llm",
            "model": self.model,
            "backend": self.backend,
            "max_new_tokens": self.max_new_tokens,
            **({"gguf_file": self.gguf_file} if self.gguf_file else {}),
        }

    def workflow_for(self, task: str) -> str:
        """The workflow text shown to the judge for ``task`` (``workflows`` first, else STAR's, read once).

        Args:
            task: The STAR task.

        Returns:
            The workflow's steps as text.
        """
        if task not in self.workflows:
            from dialfork_dataset.sources import open_source

            if self._star is None:  # any source spec (dialfork_dataset.sources); None: $DIALFORK_STAR_DIR
                self._star = open_source(self.star_dir)
            self.workflows[task] = self._star.task(task).render_steps(with_templates=False)
        return self.workflows[task]

    def _fields(self, item: Mapping[str, Any]) -> dict[str, Any]:
        turns = item["turns"]
        T = sum(1 for t in turns if t["speaker"] == "system")
        return {
            "task": item.get("task", ""),
            "workflow": self.workflow_for(item["task"]),
            "dialogue": render_marked_dialogue(turns),
            "num_system_turns": T,
            "cue": item.get("cue", ""),
            "fork_turn": item.get("fork_turn"),
            "instruction": item.get("injected_instruction") or "",
            "step2": "",
        }

    def _chat(self, prompts: list[str]) -> list[str]:
        if not prompts:
            return []
        batch = [[{"role": "user", "content": p}] for p in prompts]
        if self.backend == "openai":
            out = self.client.chat(batch, temperature=0.0, max_tokens=self.max_new_tokens)
        else:
            out = self.client.chat(batch)
        if len(out) != len(batch):
            raise RuntimeError(f"the LLM backend returned {len(out)} replies for {len(batch)} prompts")
        too_long = getattr(self.client, "last_too_long", set())
        return ["" if i in too_long else str(a) for i, a in enumerate(out)]

    def _key(self, item: Mapping[str, Any]) -> str:
        """Cache key of one item: the model, the prompts and everything the judge is shown."""
        import hashlib
        import json

        blob = json.dumps(
            [
                self.config(),
                self.prompts,
                item["dialogue_id"],
                item["task"],
                item["turns"],
                item["cue"],
                item.get("fork_turn"),
                bool(item.get("step3")),
                item.get("injected_instruction"),
            ],
            sort_keys=True,
            ensure_ascii=False,
            default=str,
        )
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def judge(
        self,
        items: Sequence[Mapping[str, Any]],
        cache: str | os.PathLike | None = None,
        chunk_size: int = 256,
    ) -> list[dict[str, Any]]:
        """Answers to the three steps for each item. :attr:`last_report` counts unusable answers.

        Args:
            items: Mappings with ``dialogue_id``, ``task``, ``turns``, ``cue`` (the step-2 text),
                ``fork_turn``, ``step3`` (whether step 3 is asked: forks with t_k > 1) and
                ``injected_instruction`` (shown in step 3).
            cache: A JSONL file; items are judged in chunks of ``chunk_size`` and each chunk's
                answers are appended (fsync'd) as it completes, so a killed run resumes where it
                stopped (an item is reused only when the model, the prompts and what it is shown are
                unchanged). None: no cache.
            chunk_size: Items per chunk (>= 1).

        Returns:
            One dict per item: ``dialogue_id``, ``slider_raw`` (0..100 or ``None``), ``cue_answer``,
            ``onset_turn``, ``status`` (of the step-2 reply, see :func:`parse_cue_answer`),
            ``prefix_answer`` (``None`` when not asked or unparsable) and ``replies`` (the raw texts).

        Raises:
            ValueError: Invalid items (each named), or ``chunk_size`` is not an integer >= 1.
        """
        items = list(items)
        errs = [
            f"item {i}: missing {k!r}"
            for i, it in enumerate(items)
            for k in ("dialogue_id", "task", "turns", "cue")
            if k not in it
        ]
        errs += [
            f"item {i} ({it['dialogue_id']!r}): step 3 needs fork_turn >= 2"
            for i, it in enumerate(items)
            if it.get("step3") and not (isinstance(it.get("fork_turn"), int) and it["fork_turn"] >= 2)
        ]
        if errs:
            raise ValueError(f"{len(errs)} invalid judge item(s):\n  " + "\n  ".join(errs[:20]))
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"chunk_size must be an integer >= 1, got {chunk_size!r}")
        from tqdm.auto import tqdm

        from dialfork_dataset.jsonl import JsonlAppender, iter_jsonl

        keys = [self._key(it) for it in items]
        done: dict[str, dict[str, Any]] = {}
        if cache is not None and os.path.exists(cache):
            for _, row in iter_jsonl(cache):
                if isinstance(row, dict) and "key" in row and "answer" in row:
                    done[row["key"]] = row["answer"]
        todo = [i for i, k in enumerate(keys) if k not in done]
        if done:
            logger.info(
                "LLM judge: %d of %d items from the cache %s", len(items) - len(todo), len(items), cache
            )
        out_by_index: dict[int, dict[str, Any]] = {i: done[k] for i, k in enumerate(keys) if k in done}
        appender = JsonlAppender(cache) if cache is not None else None
        try:
            starts = range(0, len(todo), chunk_size)
            for s0 in tqdm(starts, desc="LLM judge", unit="chunk", disable=len(starts) < 2):
                idx = todo[s0 : s0 + chunk_size]
                answers = self._judge_chunk([items[i] for i in idx])
                out_by_index.update(zip(idx, answers))
                if appender is not None:
                    appender.extend(
                        {"key": keys[i], "dialogue_id": items[i]["dialogue_id"], "answer": a}
                        for i, a in zip(idx, answers)
                    )
        finally:
            if appender is not None:
                appender.close()
        out = [out_by_index[i] for i in range(len(items))]
        status: Counter[str] = Counter()
        for o in out:
            status["rating_unparsable"] += o["slider_raw"] is None
            status[f"cue_{o['status']}"] += 1
            status["prefix_unparsable"] += len(o["replies"]) == 3 and o["prefix_answer"] is None
        self.last_report = {
            "n": len(items),
            "from_cache": len(items) - len(todo),
            "step3_asked": sum(len(o["replies"]) == 3 for o in out),
            **{k: int(v) for k, v in sorted(status.items())},
            **self.config(),
        }
        bad = status["rating_unparsable"] + status["cue_unparsable"]
        if bad:
            logger.warning(
                "LLM judge: %d of %d conversations have an unusable rating or step-2 answer; see last_report",
                bad,
                len(items),
            )
        return out

    def _judge_chunk(self, items: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
        fields = [self._fields(it) for it in items]
        replies = self._chat(
            [self.prompts[1].format(**f) for f in fields] + [self.prompts[2].format(**f) for f in fields]
        )
        r1, r2 = replies[: len(items)], replies[len(items) :]
        out: list[dict[str, Any]] = []
        for it, f, a1, a2 in zip(items, fields, r1, r2):
            ans, onset, st = parse_cue_answer(a2, f["num_system_turns"])
            out.append(
                {
                    "dialogue_id": it["dialogue_id"],
                    "slider_raw": parse_rating(a1),
                    "cue_answer": ans,
                    "onset_turn": onset,
                    "status": st,
                    "prefix_answer": None,
                    "replies": [a1, a2],
                }
            )
        idx3 = [i for i, it in enumerate(items) if it.get("step3") and out[i]["cue_answer"] is not None]
        p3 = []
        for i in idx3:
            f = dict(fields[i], dialogue=render_marked_dialogue(items[i]["turns"], items[i]["fork_turn"]))
            o = out[i]
            f["step2"] = o["cue_answer"] + (
                f" (from assistant turn {o['onset_turn']})" if o["onset_turn"] else ""
            )
            p3.append(self.prompts[3].format(**f))
        for i, a3 in zip(idx3, self._chat(p3)):
            out[i]["prefix_answer"] = parse_choice(a3, PREFIX_ANSWERS)
            out[i]["replies"].append(a3)
        return out


__all__ = [
    "BACKENDS",
    "CALIBRATIONS",
    "LLMJudge",
    "PROMPTS",
    "cross_fit",
    "fit_calibration",
    "parse_choice",
    "parse_cue_answer",
    "parse_rating",
    "render_marked_dialogue",
]
