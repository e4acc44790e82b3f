"""The one base for errors that collect every problem of an input before raising.

DialFork validates at the boundary and reports *all* problems of a file at once: each error
class below carries ``.errors`` (a list of ``"where: what: how to fix"`` lines) and a message that
shows the first :data:`MAX_ERRORS_IN_MESSAGE` of them. ``RecordError``, ``StarError``,
``JsonlError``, ``GenerationError`` and ``PredictionError`` derive from :class:`CollectedErrors`, so
a caller (a CLI, the leaderboard) handles them all in one ``except`` and prints ``.errors``.

>>> e = CollectedErrors.from_errors(["a.jsonl:3: turns: must be a list", "a.jsonl:9: bad JSON"], "a.jsonl")
>>> e.errors
['a.jsonl:3: turns: must be a list', 'a.jsonl:9: bad JSON']
>>> print(e)
2 problem(s) in a.jsonl:
  a.jsonl:3: turns: must be a list
  a.jsonl:9: bad JSON
>>> isinstance(e, ValueError)
True
"""

from __future__ import annotations

from collections.abc import Iterable

#: How many problems an exception message lists before summarising (``.errors`` holds all).
MAX_ERRORS_IN_MESSAGE = 20


def summarize(errors: Iterable[str], what: str, limit: int = MAX_ERRORS_IN_MESSAGE) -> str:
    """``"N problem(s) in WHAT:"`` followed by the first ``limit`` problems, one per indented line.

    Args:
        errors: The problems, one line each.
        what: Where they were found (a file, a corpus).
        limit: How many problems to list; a last line says how many more there are.

    Returns:
        str: The summary text.
    """
    errors = list(errors)
    shown = errors[:limit]
    text = f"{len(errors)} problem(s) in {what}:\n  " + "\n  ".join(shown)
    if len(errors) > len(shown):
        text += f"\n  ... and {len(errors) - len(shown)} more (see the exception's .errors)"
    return text


class CollectedErrors(ValueError):
    """Bad input, with every problem found listed in ``errors`` (not only the first).

    Args:
        message: the exception's text.
        errors: every problem, one line each; defaults to ``[message]``.
    """

    def __init__(self, message: str, errors: Iterable[str] | None = None):
        super().__init__(message)
        self.errors: list[str] = list(errors) if errors else [message]

    @classmethod
    def from_errors(cls, errors: Iterable[str], what: str, limit: int = MAX_ERRORS_IN_MESSAGE):
        """An instance whose message summarises ``errors`` found in ``what`` (a file, a corpus).

        Args:
            errors: Every problem, one line each (all kept in ``.errors``).
            what: Where they were found.
            limit: How many problems the message lists (:func:`summarize`).

        Returns:
            CollectedErrors: An instance of ``cls`` (not raised).
        """
        errors = list(errors)
        return cls(summarize(errors, what, limit), errors)

    @classmethod
    def raise_if(cls, errors: Iterable[str], what: str, limit: int = MAX_ERRORS_IN_MESSAGE) -> None:
        """Raise :meth:`from_errors` when ``errors`` is not empty; return otherwise.

        Args:
            errors: Every problem, one line each.
            what: Where they were found.
            limit: How many problems the message lists.

        Raises:
            CollectedErrors: An instance of ``cls`` listing ``errors``, when there is any.
        """
        errors = list(errors)
        if errors:
            raise cls.from_errors(errors, what, limit)


class SourceError(CollectedErrors):
    """A workflow source is unusable; ``errors`` lists every problem found (``where: problem``).

    Defined here, below :mod:`dialfork_dataset.sources` (which raises it and names it in its API) and
    the workflow-file checks (:mod:`dialfork_dataset.workflow.check`, whose ``WorkflowError`` derives
    from it), so that neither imports the other for it.

    Args:
        message: The exception's text.
        errors: Every problem, one ``where: problem`` line each; defaults to ``[message]``.
    """


def cli_error_text(error: CollectedErrors, limit: int = 50) -> str:
    """What a command line prints for ``error``: ``"error: MESSAGE"`` for a single problem, else
    the message's header line followed by the first ``limit`` problems, one per line.

    Args:
        error: The collected errors.
        limit: How many problems to list; a last line says how many more there are.

    Returns:
        str: The text, without a trailing newline.
    """
    if error.errors == [str(error)]:  # one problem, the message itself
        return f"error: {error}"
    shown = error.errors[:limit]
    more = [f"... and {len(error.errors) - len(shown)} more"] if len(error.errors) > len(shown) else []
    return "\n".join([f"error: {str(error).splitlines()[0]}", *shown, *more])
