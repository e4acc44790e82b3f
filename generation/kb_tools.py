"""Knowledge-base tools: a workflow source's API calls as OpenAI function-calling tools, and the one
executor that runs a call against the source's knowledge-base (KB) tables.

Used by the agent audit (``python -m dialfork_metrics.audit --kb-tools``) and meant for the LLM
generation backends (``--kb-tools``), so that a system agent's query steps get real outcomes.

Tools (:meth:`KBExecutor.tools`): one per task API (STAR's ``apis/apis/<name>.json``, a workflow
file's ``tasks[].api``), in OpenAI's ``tools`` shape::

    {"type": "function", "function": {"name": ..., "description": ..., "parameters": <JSON Schema>}}

The parameters are the API's input slots: ``Categorical``/``RequestType`` -> an ``enum`` string,
``CategoricalMultiple`` -> an array of them, ``Integer`` -> an integer within ``Min``/``Max``,
``Boolean`` -> a boolean, ``ShortString``/``LongString`` -> a string; ``required`` is the API's.
The tool's name is the API's ``function`` when no other API of the source shares it, else the API's
own name (STAR names five search APIs ``generic_sample``; their tools are ``weather``,
``restaurant_search``, ...).

Execution (:meth:`KBExecutor.execute`, deterministic: the same call gives the same rows):

* the arguments are checked against the schema (unknown or missing names, wrong types, values
  outside the categories or range, all reported at once); an invalid call, an unknown tool or
  arguments that are not a JSON object give ``{"error": "..."}`` as the tool result, never an
  exception, so the model can correct itself;
* a KB table with stored rows (a workflow file's ``kb.<table>.rows``): the rows whose fields equal
  every argument naming a field of the table (strings compared case- and space-insensitively).
  A call none of whose arguments names a table field is an action (file a claim, book a
  viewing), not a search: it gets one row, chosen by a hash of the arguments;
* a KB table given by its schema only (STAR ships its KBs' schemas, ``apis/dbs/<db>.json``, not
  their rows): rows drawn from the schema, consistent with the arguments (a field an argument
  names takes its value), seeded by the call. As in the template backend (whose query outcomes
  the reference corpora have), a happy scenario's look-up always finds something (1 to 3 rows)
  and an unhappy scenario's fails (no row) when a stable hash of the call is 0 mod 3
  (:data:`UNHAPPY_FAILURE_MODULUS`, ours);
* the result is ``{"count": N, "rows": [...]}``: at most ``max_rows`` rows (ours, default
  :data:`DEFAULT_MAX_ROWS`), each with the API's output fields (fields the table lacks are drawn
  from their schema, seeded by the call and the row).

:func:`tool_messages` turns an assistant message's ``tool_calls`` into the ``role: tool`` messages
to send back; :func:`run_tool_loop` is the whole request / tool calls / request cycle over message
dicts, for any chat-completion callable.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_MAX_ROWS = 5
"""Rows returned per call at most (ours)."""
MAX_ARGUMENT_CHARS = 16_384
"""Longest ``arguments`` string accepted (ours); longer calls get a tool error."""
UNHAPPY_FAILURE_MODULUS = 3
"""An unhappy scenario's schema-only look-up fails when the call's stable hash is 0 modulo this
(the template backend's rule: two of three unhappy look-ups succeed)."""
DEFAULT_MAX_TOOL_ROUNDS = 4
"""Model requests answered with tool calls per turn before :func:`run_tool_loop` gives up (ours)."""
_TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
_CATEGORICAL = ("Categorical", "RequestType")


class ToolSpecError(ValueError):
    """A source's API cannot be offered as a tool (its schema is unusable)."""


def _norm(v: Any) -> str:
    return " ".join(str(v).split()).casefold()


def field_schema(f: Mapping[str, Any]) -> dict[str, Any]:
    """JSON Schema of one STAR field (``{Name, Type, Categories|Min|Max, ReadableName}``).

    Args:
        f: the field; ``Type`` decides the schema (see the module doc), non-scalar categories are
            ignored.

    Returns:
        A JSON Schema dict (``type`` and, where the field gives them, ``enum``, ``items``,
            ``minimum``, ``maximum``) with a ``description`` (the readable name, else the name with
            spaces).
    """
    typ = f.get("Type")
    desc = f.get("ReadableName") or str(f.get("Name", "")).replace("_", " ")
    cats = [c for c in (f.get("Categories") or []) if isinstance(c, (str, int, float))]
    if typ in _CATEGORICAL and cats:
        out: dict[str, Any] = {"type": "string", "enum": [str(c) for c in cats]}
    elif typ == "CategoricalMultiple":
        out = {
            "type": "array",
            "items": {"type": "string", **({"enum": [str(c) for c in cats]} if cats else {})},
        }
    elif typ == "Integer":
        out = {"type": "integer"}
        if isinstance(f.get("Min"), int):
            out["minimum"] = f["Min"]
        if isinstance(f.get("Max"), int):
            out["maximum"] = f["Max"]
    elif typ == "Boolean":
        out = {"type": "boolean"}
    elif typ == "CategoricalList":
        out = {"type": "array", "items": {"type": "string"}}
    else:  # ShortString, LongString, Categorical without categories
        out = {"type": "string"}
    out["description"] = str(desc)
    return out


@dataclass(frozen=True)
class KBTool:
    """One task API as a tool.

    Attributes:
        name: the tool (function) name the model calls.
        task: the task the API belongs to.
        api: the API's name in the source.
        table: the KB table the API reads.
        inputs: the API's input fields (STAR field dicts).
        outputs: the API's output fields.
        table_fields: the KB table's schema fields.
        required: the names of the required inputs.
        description: the tool's description shown to the model.
        rows: the table's stored rows, or ``None`` for a schema-only table.
    """

    name: str
    """The tool (function) name the model calls."""
    task: str
    api: str
    table: str
    inputs: tuple[dict[str, Any], ...]
    outputs: tuple[dict[str, Any], ...]
    table_fields: tuple[dict[str, Any], ...]
    required: tuple[str, ...]
    description: str
    rows: tuple[dict[str, Any], ...] | None = None
    """The table's stored rows, or None for a schema-only table."""

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry.

        Returns:
            ``{"type": "function", "function": {"name", "description", "parameters"}}``; the
                parameters are a JSON Schema object of the inputs (:func:`field_schema`), their
                ``required`` list, and ``additionalProperties: false``.
        """
        props = {}
        for f in self.inputs:
            props.setdefault(str(f["Name"]), field_schema(f))
        params = {
            "type": "object",
            "properties": props,
            "required": [r for r in self.required if r in props],
            "additionalProperties": False,
        }
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


@dataclass(frozen=True)
class ToolResult:
    """What one tool call gave: ``content`` is the ``role: tool`` message's text (JSON).

    Attributes:
        name: the tool called (empty for a call without a function name).
        ok: whether the call was valid and ran.
        content: ``{"count", "rows"}`` or ``{"error"}`` as JSON text.
        error: the error message when not ``ok``, else ``None``.
        rows: the rows returned (at most ``max_rows``).
        arguments: the canonical arguments of a valid call (empty otherwise).
    """

    name: str
    ok: bool
    content: str
    error: str | None = None
    rows: tuple[dict[str, Any], ...] = ()
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A summary for records and logs (without the rows).

        Returns:
            ``{"name", "ok", "error", "count", "arguments"}``, ``count`` being the rows returned.
        """
        return {
            "name": self.name,
            "ok": self.ok,
            "error": self.error,
            "count": len(self.rows),
            "arguments": self.arguments,
        }


def _table_rows(source: Any, table: str) -> list[dict[str, Any]] | None:
    """The stored rows of KB table ``table``: a workflow file's ``kb.<table>.rows``; None when the
    source has only the table's schema (STAR)."""
    data = getattr(source, "data", None)
    if isinstance(data, Mapping):
        t = (data.get("kb") or {}).get(table)
        if isinstance(t, Mapping) and isinstance(t.get("rows"), list) and t["rows"]:
            return [dict(r) for r in t["rows"] if isinstance(r, Mapping)]
    return None


def build_tools(source: Any, tasks: Sequence[str] | None = None) -> dict[str, KBTool]:
    """Tool name -> :class:`KBTool` for every task of ``tasks`` (default: all) with an API.
    Tasks without an API are skipped (logged); an API whose KB table the source lacks is an error.

    Args:
        source: a workflow source object or spec (:func:`dialfork_dataset.sources.open_source`;
            ``None``: STAR at ``$DIALFORK_STAR_DIR``).
        tasks: the task names to build tools for; ``None`` (default) every task of the source.

    Returns:
        Tool name -> :class:`KBTool`.

    Raises:
        ToolSpecError: an API reads a KB table the source lacks, or two different APIs would get
            the same tool name (every problem is listed).
    """
    from dialfork_dataset.sources import open_source

    source = open_source(source)
    names = list(tasks) if tasks is not None else sorted(source.tasks)
    all_apis = [t.api for t in source.tasks.values() if getattr(t, "api", None) is not None]
    fn_count: dict[str, int] = {}
    for a in {(a.name, a.function) for a in all_apis}:
        fn_count[a[1]] = fn_count.get(a[1], 0) + 1
    dbs = source.dbs
    out: dict[str, KBTool] = {}
    errors = []
    for name in names:
        task = source.task(name)
        api = getattr(task, "api", None)
        if api is None:
            logger.info("task %s has no API: no tool", name)
            continue
        tool_name = api.function if fn_count.get(api.function, 0) == 1 else api.name
        tool_name = _TOOL_NAME.sub("_", tool_name)[:64]
        schema = dbs.get(api.db) if api.db else None
        if not isinstance(schema, list):
            errors.append(
                f"task {name}: its API {api.name!r} reads KB table {api.db!r}, which the source lacks"
            )
            continue
        if tool_name in out and out[tool_name].api != api.name:
            errors.append(
                f"task {name}: tool name {tool_name!r} is also the name of task {out[tool_name].task}'s tool"
            )
            continue
        desc = (
            f"Look up the {str(api.db).replace('_', ' ')} knowledge base for the {name.replace('_', ' ')} task "
            f"(API {api.name}). Returns {{count, rows}}; count 0 means nothing matches."
        )
        rows = _table_rows(source, api.db)
        out[tool_name] = KBTool(
            name=tool_name,
            task=name,
            api=api.name,
            table=api.db,
            inputs=tuple(dict(f) for f in api.inputs),
            outputs=tuple(dict(f) for f in api.outputs),
            table_fields=tuple(dict(f) for f in schema),
            required=tuple(api.required),
            description=desc,
            rows=None if rows is None else tuple(rows),
        )
    if errors:
        raise ToolSpecError("cannot build the KB tools:\n  " + "\n  ".join(errors))
    return out


def check_arguments(tool: KBTool, args: Any) -> tuple[dict[str, Any], list[str]]:
    """``(canonical arguments, problems)``: categories in their KB spelling, integers as ints.

    Args:
        tool: the tool called.
        args: the decoded arguments (anything the model sent).

    Returns:
        ``(canonical, problems)``: the valid arguments in canonical form (categories as the KB
            spells them, integer strings as ints, ``yes``/``no`` strings as booleans, other values as
            strings), and one message per problem (not a JSON object, unknown or missing names, a
            value of the wrong type, outside the categories or the ``Min``/``Max`` range, or a string
            over 1000 characters); valid when ``problems`` is empty.
    """
    if not isinstance(args, Mapping):
        return {}, [f"arguments must be a JSON object, got {type(args).__name__}"]
    spec = {str(f["Name"]): f for f in tool.inputs}
    errs: list[str] = []
    out: dict[str, Any] = {}
    unknown = sorted(str(k) for k in args if k not in spec)
    if unknown:
        errs.append(f"unknown argument(s) {unknown}; {tool.name} takes {sorted(spec)}")
    missing = [r for r in tool.required if r in spec and args.get(r) in (None, "")]
    if missing:
        errs.append(f"missing required argument(s) {missing}")
    for k, v in args.items():
        f = spec.get(k)
        if f is None or v is None:
            continue
        typ = f.get("Type")
        cats = [str(c) for c in (f.get("Categories") or []) if isinstance(c, (str, int, float))]
        if typ in _CATEGORICAL and cats:
            if not isinstance(v, str):
                errs.append(f"{k} must be one of {cats}, got {v!r}")
                continue
            hit = next((c for c in cats if _norm(c) == _norm(v)), None)
            if hit is None:
                errs.append(f"{k} must be one of {cats}, got {v!r}")
            else:
                out[k] = hit
        elif typ == "CategoricalMultiple":
            vals = v if isinstance(v, list) else [v]
            canon = []
            for x in vals:
                hit = (
                    next((c for c in cats if _norm(c) == _norm(x)), None)
                    if cats
                    else (x if isinstance(x, str) else None)
                )
                if hit is None:
                    errs.append(f"{k}: {x!r} is not one of {cats}")
                else:
                    canon.append(hit)
            out[k] = canon
        elif typ == "Integer":
            n = v if isinstance(v, int) and not isinstance(v, bool) else None
            if n is None and isinstance(v, str) and re.fullmatch(r"\s*-?\d{1,12}\s*", v):
                n = int(v)
            if n is None:
                errs.append(f"{k} must be an integer, got {v!r}")
                continue
            lo, hi = f.get("Min"), f.get("Max")
            if (isinstance(lo, int) and n < lo) or (isinstance(hi, int) and n > hi):
                errs.append(f"{k} must be between {lo} and {hi}, got {n}")
                continue
            out[k] = n
        elif typ == "Boolean":
            if isinstance(v, bool):
                out[k] = v
            elif isinstance(v, str) and _norm(v) in ("true", "false", "yes", "no"):
                out[k] = _norm(v) in ("true", "yes")
            else:
                errs.append(f"{k} must be true or false, got {v!r}")
        else:
            if not isinstance(v, (str, int, float)) or isinstance(v, bool):
                errs.append(f"{k} must be a string, got {type(v).__name__}")
            elif len(str(v)) > 1000:
                errs.append(f"{k} is longer than 1000 characters")
            else:
                out[k] = str(v)
    return out, errs


def _draw(f: Mapping[str, Any], rng: Any, k: int) -> Any:
    """A value of field ``f`` drawn from its schema (row ``k``)."""
    typ = f.get("Type")
    cats = [c for c in (f.get("Categories") or [])]
    if typ == "Integer":
        lo = f["Min"] if isinstance(f.get("Min"), int) else 0
        hi = f["Max"] if isinstance(f.get("Max"), int) else max(lo, 0) + 100
        return lo + rng.below(hi - lo + 1) if hi >= lo else lo
    if typ == "Boolean":
        return bool(rng.below(2))
    if typ == "CategoricalMultiple" and cats:
        return sorted({str(rng.choice(cats)) for _ in range(1 + rng.below(min(3, len(cats))))})
    if cats:
        return rng.choice(cats)
    readable = f.get("ReadableName") or str(f.get("Name", "value")).replace("_", " ")
    return f"{readable} {k + 1}"


def _matches(row: Mapping[str, Any], args: Mapping[str, Any]) -> bool:
    for k, v in args.items():
        if k not in row:
            continue
        r = row[k]
        if isinstance(v, list):
            have = {_norm(x) for x in (r if isinstance(r, list) else [r])}
            if not {_norm(x) for x in v} <= have:
                return False
        elif isinstance(v, bool) or isinstance(r, bool):
            if bool(v) != (r if isinstance(r, bool) else _norm(r) in ("true", "yes")):
                return False
        elif _norm(r) != _norm(v):
            return False
    return True


class KBExecutor:
    """The KB tools of a workflow source (``source``: a source object or spec, see
    :func:`dialfork_dataset.sources.open_source`) and the executor of their calls.

    Args:
        source: a workflow source object or spec; ``None`` (default): STAR at
            ``$DIALFORK_STAR_DIR``.
        tasks: the tasks to offer tools for; ``None`` (default) every task with an API.
        max_rows: the most rows a call returns, integer >= 1 (default :data:`DEFAULT_MAX_ROWS`).

    Raises:
        ValueError: ``max_rows`` is not an integer >= 1.
        ToolSpecError: the tools cannot be built (:func:`build_tools`).
    """

    def __init__(
        self, source: Any = None, tasks: Sequence[str] | None = None, *, max_rows: int = DEFAULT_MAX_ROWS
    ):
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be an integer >= 1, got {max_rows!r}")
        self.by_name = build_tools(source, tasks)
        self.max_rows = max_rows
        self.by_task = {t.task: t for t in self.by_name.values()}

    def tools(self, task: str | None = None) -> list[dict[str, Any]]:
        """The OpenAI ``tools`` list: the task's tool (``[]`` when it has no API), or every tool.

        Args:
            task: a task name; ``None`` (default) for every tool.

        Returns:
            A list of :meth:`KBTool.schema` entries.
        """
        if task is not None:
            t = self.by_task.get(task)
            return [t.schema()] if t is not None else []
        return [t.schema() for t in self.by_name.values()]

    def execute(self, name: str, arguments: Any, *, happy: bool = True, seed: int = 0) -> ToolResult:
        """Run one call; ``arguments``: the model's JSON string (or a dict). ``happy``/``seed``: the
        scenario's kind and the dialogue's seed (schema-only tables). Never raises on bad input.

        Args:
            name: the tool name the model called.
            arguments: the call's arguments: a JSON string (empty means ``{}``), bytes, or a dict.
            happy: whether the scenario is happy (a schema-only look-up then always finds rows);
                default ``True``.
            seed: the dialogue's seed (default 0); seeds schema-only rows and drawn output fields.

        Returns:
            A tool result: ``ok`` with ``{"count", "rows"}`` (``count`` is every matching
                row, ``rows`` at most ``max_rows`` of them with the API's output fields), or not ``ok``
                with ``{"error": ...}`` for an unknown tool, over-long or invalid JSON arguments, or
                invalid arguments (:func:`check_arguments`).
        """
        from generation.seeds import Rng, stable_seed

        tool = self.by_name.get(name) if isinstance(name, str) else None
        if tool is None:
            return self._error(str(name), f"unknown tool {name!r}; tools: {sorted(self.by_name)}")
        if isinstance(arguments, (str, bytes)):
            if len(arguments) > MAX_ARGUMENT_CHARS:
                return self._error(name, f"arguments longer than {MAX_ARGUMENT_CHARS} characters")
            try:
                arguments = (
                    json.loads(arguments)
                    if str(
                        arguments if isinstance(arguments, str) else arguments.decode("utf-8", "replace")
                    ).strip()
                    else {}
                )
            except (ValueError, RecursionError) as e:
                return self._error(name, f"arguments are not valid JSON ({type(e).__name__}: {e})")
        args, errs = check_arguments(tool, arguments)
        if errs:
            return self._error(name, "; ".join(errs))
        canon = json.dumps(args, sort_keys=True, ensure_ascii=False)
        fields = {str(f["Name"]) for f in tool.table_fields}
        outputs = list(tool.outputs) or list(tool.table_fields)
        if tool.rows is not None:
            if any(k in fields for k in args):
                rows = [r for r in tool.rows if _matches(r, args)]
            else:  # an action: one row, chosen by the call
                rows = [tool.rows[stable_seed("kb-action", tool.name, canon) % len(tool.rows)]]
        else:
            h = stable_seed("kb", tool.name, canon, int(seed))
            if not happy and h % UNHAPPY_FAILURE_MODULUS == 0:
                n = 0
            else:
                n = 1 + Rng(h, 1).below(min(3, self.max_rows))
            rows, seen = [], set()
            for k in range(n):
                rng = Rng(h, 10 + k)
                row = {
                    str(f["Name"]): args[str(f["Name"])] if str(f["Name"]) in args else _draw(f, rng, k)
                    for f in tool.table_fields
                }
                key = json.dumps(row, sort_keys=True)
                if key not in seen:  # a fully constrained look-up finds its one row once
                    seen.add(key)
                    rows.append(row)
        # an output field the row lacks: the argument of that name, else drawn from the table's
        # schema of the field (its ranges), else from the API's
        schema_of = {str(f["Name"]): f for f in tool.table_fields}
        shown = []
        for k, r in enumerate(rows[: self.max_rows]):
            rng = Rng(stable_seed("kb-out", tool.name, canon, int(seed)), k)
            row = {}
            for f in outputs:
                n = str(f["Name"])
                row[n] = r[n] if n in r else args[n] if n in args else _draw(schema_of.get(n, f), rng, k)
            shown.append(row)
        content = json.dumps({"count": len(rows), "rows": shown}, ensure_ascii=False)
        return ToolResult(name, True, content, None, tuple(shown), args)

    @staticmethod
    def _error(name: str, message: str) -> ToolResult:
        return ToolResult(name, False, json.dumps({"error": message}, ensure_ascii=False), message)


def tool_messages(
    executor: KBExecutor, tool_calls: Any, *, happy: bool = True, seed: int = 0
) -> tuple[list[dict[str, Any]], list[ToolResult]]:
    """The ``role: tool`` messages answering an assistant message's ``tool_calls`` (one per call, in
    order, with its ``tool_call_id``), and the results. Malformed calls get an error result.

    Args:
        executor: the executor of the calls.
        tool_calls: the assistant message's ``tool_calls`` (anything that is not a list counts as
            none).
        happy: the scenario's kind, passed to :meth:`KBExecutor.execute` (default ``True``).
        seed: the dialogue's seed, passed to :meth:`KBExecutor.execute` (default 0).

    Returns:
        ``(messages, results)``: one ``{"role": "tool", "tool_call_id", "content"}`` message and one
            :class:`ToolResult` per call; a call without a string id gets ``call_<i>``.
    """
    msgs: list[dict[str, Any]] = []
    results: list[ToolResult] = []
    if not isinstance(tool_calls, list):
        tool_calls = []
    for i, call in enumerate(tool_calls):
        cid = call.get("id") if isinstance(call, Mapping) else None
        cid = cid if isinstance(cid, str) and cid else f"call_{i}"
        fn = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
            res = KBExecutor._error("", f"tool call {i} has no function name")
        else:
            res = executor.execute(
                fn["name"],
                fn.get("arguments") if fn.get("arguments") is not None else "{}",
                happy=happy,
                seed=seed,
            )
        results.append(res)
        msgs.append({"role": "tool", "tool_call_id": cid, "content": res.content})
    return msgs, results


def run_tool_loop(
    complete: Callable[[list[dict[str, Any]], list[dict[str, Any]]], Mapping[str, Any]],
    messages: list[dict[str, Any]],
    executor: KBExecutor,
    task: str,
    *,
    happy: bool = True,
    seed: int = 0,
    max_rounds: int = DEFAULT_MAX_TOOL_ROUNDS,
) -> tuple[Mapping[str, Any], list[ToolResult]]:
    """Ask the model until it answers with text: ``complete(messages, tools)`` returns the assistant
    message (a dict with ``content`` and maybe ``tool_calls``); each tool-call message and its
    ``role: tool`` answers are appended to ``messages`` (in place). Returns the final assistant
    message and every tool result. After ``max_rounds`` rounds of tool calls the model is asked once
    more without tools.

    Args:
        complete: ``complete(messages, tools)`` sends one chat request and returns the assistant
            message (``tools`` is empty for the last, tool-less request).
        messages: the tool traffic so far; appended to in place.
        executor: the executor of the calls.
        task: the task whose tool is offered (:meth:`KBExecutor.tools`).
        happy: the scenario's kind (default ``True``).
        seed: the dialogue's seed (default 0).
        max_rounds: requests answered with tool calls before the model is asked without tools
            (default :data:`DEFAULT_MAX_TOOL_ROUNDS`).

    Returns:
        ``(message, results)``: the final assistant message (its tool calls, if any, were not
            run) and every :class:`ToolResult`, in call order.

    Raises:
        AssertionError: never in practice (the loop always returns at its last round).
    """
    tools = executor.tools(task)
    results: list[ToolResult] = []
    for rnd in range(max_rounds + 1):
        msg = complete(messages, tools if rnd < max_rounds else [])
        calls = msg.get("tool_calls") if isinstance(msg, Mapping) else None
        if not calls or rnd == max_rounds:  # a call the model was not offered tools for is not run
            return msg, results
        messages.append({"role": "assistant", "content": msg.get("content"), "tool_calls": list(calls)})
        tmsgs, res = tool_messages(executor, calls, happy=happy, seed=seed)
        messages.extend(tmsgs)
        results.extend(res)
    raise AssertionError("unreachable")


__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MAX_TOOL_ROUNDS",
    "KBExecutor",
    "KBTool",
    "MAX_ARGUMENT_CHARS",
    "ToolResult",
    "ToolSpecError",
    "UNHAPPY_FAILURE_MODULUS",
    "build_tools",
    "check_arguments",
    "field_schema",
    "run_tool_loop",
    "tool_messages",
]
