"""A deterministic OpenAI-compatible upstream for tests, benchmarks and the docs: it plays the
system side of recorded dialogues.

A request's reply is the next system turn of the dialogue whose opening turns match the request's
turns (user/assistant messages, as the proxy reads them): same speakers in the same order and the
same user texts (the assistant texts are whatever the client was shown, e.g. a guard's fallback). The ``X-Fake-Dialogue: <dialogue_id>``
header picks the dialogue (forks share their opening with their conformant source); without it,
the first matching dialogue in file order answers. A history that matches nothing gets
:data:`UNKNOWN_REPLY` and the header ``X-Fake-Matched: false``. ``stream: true`` answers in SSE
chunks (a role chunk, one chunk per word, a finish chunk, ``[DONE]``), like OpenAI's API.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import Request  # resolved by FastAPI from this module's globals

from .proxy import BadRequest, parse_turns
from .store import prefix_hashes

UNKNOWN_REPLY = "Sorry, could you say that again?"


class ReplayBook:
    """Index of the recorded dialogues: (prefix hash) -> next system turn.

    Only the speakers and the user texts of a prefix count (assistant texts are whatever the client
    was shown).

    Args:
        dialogues: The recorded dialogues (records with ``dialogue_id`` and ``turns``, or turn
            lists, then keyed by their index).

    Attributes:
        by_id: Dialogue id -> its ``(speaker, text)`` turns.
        first: Prefix hash -> the next system turn of the first dialogue (in file order) with that
            prefix.
    """

    def __init__(self, dialogues: Sequence[Any]):
        from dialfork_dataset.turns import as_turns

        self.by_id: dict[str, list[tuple[str, str]]] = {}
        self.first: dict[str, str] = {}
        for i, d in enumerate(dialogues):
            did = str(d.get("dialogue_id", i)) if isinstance(d, Mapping) else str(i)
            turns = [(t["speaker"], t["text"]) for t in as_turns(d, where=f"dialogue {did}")]
            self.by_id[did] = turns
            hashes = [""] + prefix_hashes(_key(turns))
            for k, (sp, text) in enumerate(turns):
                if sp == "system":
                    self.first.setdefault(hashes[k], text)

    def reply(self, turns: Sequence[tuple[str, str]], dialogue_id: str | None) -> str | None:
        """The recorded system turn that follows ``turns``.

        Args:
            turns: The conversation so far, ``(speaker, text)`` pairs.
            dialogue_id: The dialogue to follow (the ``X-Fake-Dialogue`` header); None: the first
                dialogue whose opening matches.

        Returns:
            The next system turn's text, or None when no dialogue matches (or the named one does not
            match, or its next turn is not a system turn).
        """
        if dialogue_id is not None:
            ref = self.by_id.get(dialogue_id)
            k = len(turns)
            if ref is None or k >= len(ref) or _key(ref[:k]) != _key(turns) or ref[k][0] != "system":
                return None
            return ref[k][1]
        return self.first.get(prefix_hashes(_key(turns))[-1] if turns else "")


def _key(turns: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    return [(sp, text if sp == "user" else "") for sp, text in turns]


def create_fake_upstream(dialogues: Sequence[Any], delay_s: float = 0.0, model: str = "dialfork-replay"):
    """The fake upstream as a FastAPI app (see the module's docstring).

    Routes: ``POST /v1/chat/completions`` (a reply, or SSE chunks with ``stream: true``; 400 for
    an unreadable body), ``GET /v1/models`` and ``GET /healthz``.

    Args:
        dialogues: The recorded dialogues it replays (:class:`ReplayBook`).
        delay_s: Seconds to wait before each reply (default 0).
        model: The model name it reports when a request names none.

    Returns:
        The ``fastapi.FastAPI`` app.
    """
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    book = ReplayBook(dialogues)
    app = FastAPI(title="DialFork fake upstream", docs_url=None, redoc_url=None, openapi_url=None)
    counter = {"n": 0}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        try:
            body = json.loads(await request.body())
            turns = parse_turns(body)
        except (ValueError, BadRequest) as e:
            return JSONResponse(
                {"error": {"message": getattr(e, "message", str(e)), "type": "invalid_request_error"}},
                status_code=400,
            )
        if delay_s:
            await asyncio.sleep(delay_s)
        text = book.reply(turns, request.headers.get("x-fake-dialogue"))
        matched = text is not None
        text = text if matched else UNKNOWN_REPLY
        counter["n"] += 1
        cid, created = f"chatcmpl-fake-{counter['n']}", int(time.time())
        headers = {"X-Fake-Matched": str(matched).lower()}
        if not body.get("stream"):
            return JSONResponse(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": body.get("model", model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 0, "completion_tokens": len(text.split()), "total_tokens": 0},
                },
                headers=headers,
            )

        async def events():
            base = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", model),
            }
            yield _sse(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                    ],
                }
            )
            words = text.split(" ")
            for j, w in enumerate(words):
                yield _sse(
                    {
                        **base,
                        "choices": [
                            {
                                "index": 0,
                                "delta": {"content": w if j == 0 else " " + w},
                                "finish_reason": None,
                            }
                        ],
                    }
                )
            yield _sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers=headers)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "dialfork"}]}

    @app.get("/healthz")
    async def healthz():
        return {"status": "ok", "dialogues": len(book.by_id)}

    return app


def _sse(obj: Mapping[str, Any]) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()
