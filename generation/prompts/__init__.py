"""Prompt templates of the two agents (files beside this module) and their rendering.

Every template is plain text with ``{name}`` placeholders; :func:`render` fills them and
refuses to leave one unfilled (a typo in a template is an error, not a silent gap).

Message layout (what an LLM backend receives in ``TurnRequest.messages``):

* system agent: ``[{"role": "system", content: system_agent.txt}]`` then the dialogue so far,
  the user's turns as ``"user"`` and the agent's own turns as ``"assistant"``. A fork's
  hallucination instruction (``injection.txt``) is one more ``"system"`` message placed right
  after the last turn before system turn t_k, so it is the last message of the request for
  system turn t_k and stays in place for every later request. The wrap-up (``wrap_up.txt``) is
  a ``"system"`` message placed where the length budget was reached.
* user agent: ``[{"role": "system", content: user_agent.txt}, {"role": "user", content:
  user_opening.txt}]`` then the system's turns as ``"user"`` and its own turns as
  ``"assistant"``; the wrap-up is added the same way.

An agent ends the conversation by ending its message with :data:`END_TOKEN`; the engine strips
it from the recorded text.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from ..errors import PromptError

PROMPT_DIR = Path(__file__).resolve().parent
END_TOKEN = "[END]"
_FIELD = re.compile(r"\{([a-z_]+)\}")


@cache
def load_template(name: str) -> str:
    p = PROMPT_DIR / f"{name}.txt"
    if not p.is_file():
        raise PromptError(f"prompt template {p} not found")
    return p.read_text(encoding="utf-8").strip("\n")


def render(name: str, **values: object) -> str:
    """Fill template ``name`` (``prompts/<name>.txt``); every placeholder must be given.

    Args:
        name: The template's name, without ``.txt``.
        **values: One value per ``{placeholder}`` (converted with ``str``); ``end_token``
            defaults to :data:`END_TOKEN`. Extra values are ignored.

    Returns:
        The filled text.

    Raises:
        PromptError: A placeholder of the template has no value, or the template file does not
            exist.
    """
    text = load_template(name)
    values.setdefault("end_token", END_TOKEN)
    missing = sorted({m for m in _FIELD.findall(text) if m not in values})
    if missing:
        raise PromptError(f"prompt template {name}.txt: no value for placeholder(s) {missing}")
    return _FIELD.sub(lambda m: str(values[m.group(1)]), text)


def user_guide_block(user_guide: tuple[str, ...] | list[str]) -> str:
    """The user agent's guide lines as a numbered block (template ``user_guide.txt``).

    Args:
        user_guide: The scenario's guide lines; blank ones are dropped, the rest stripped.

    Returns:
        The rendered block, or ``""`` when no line is left.
    """
    items = [g.strip() for g in user_guide if g and g.strip()]
    if not items:
        return ""
    return render("user_guide", items="\n".join(f"{i}. {g}" for i, g in enumerate(items, 1)))
