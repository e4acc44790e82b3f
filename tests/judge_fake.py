"""A fake OpenAI-compatible chat server on 127.0.0.1 (port 0) that answers the LLM judge's
three prompts by reading the dialogue: the first assistant turn saying a type's example line (the
line ``annotation.simulate`` writes from t_k on; :data:`DEVIANT` is GR's) is where the deviation
starts."""

from __future__ import annotations

import contextlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from dialfork_dataset import taxonomy
from dialfork_dataset.taxonomy import type_specs

DEVIANT = taxonomy.get("GR").example_line


def deviant_lines() -> set[str]:
    """The example lines of the registered types (read when a prompt is answered)."""
    return {s.example_line for s in type_specs()}


def fake_reply(prompt: str) -> str:
    sys_turns = re.findall(r"^(?:>> )?Assistant \[turn (\d+)\]: (.*)$", prompt, flags=re.M)
    lines = deviant_lines()
    dev = [int(k) for k, text in sys_turns if text in lines]
    T = len(sys_turns)
    if "How well does it?" in prompt:
        return f"Answer: {round(100 * (dev[0] - 1) / T) if dev else 97}"
    if "Does that happen" in prompt:
        return f"Answer: yes, turn {dev[0]}" if dev else "Answer: no"
    if "Before the marked part" in prompt:
        return "Answer: mostly"
    return "?"


class FakeJudgeHandler(BaseHTTPRequestHandler):
    bodies: list = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        reply = {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": fake_reply(body["messages"][-1]["content"])},
                    "finish_reason": "stop",
                }
            ],
            "model": body["model"],
            "object": "chat.completion",
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextlib.contextmanager
def serve_fake_judge():
    """Yields the API root (``http://127.0.0.1:PORT/v1``); the server stops on exit."""
    FakeJudgeHandler.bodies = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), FakeJudgeHandler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()
        th.join(10)
