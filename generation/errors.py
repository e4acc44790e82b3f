"""The generator's errors, in a module of their own.

Everything in :mod:`generation` that reports bad input raises one of these; the backends import
them from here (never from the engine that drives them), and the command lines turn them into a
one-line message and exit code 2. Both derive from
:class:`dialfork_dataset.errors.CollectedErrors`, so ``errors`` lists every problem found.
"""

from __future__ import annotations

from dialfork_dataset.errors import CollectedErrors


class GenerationError(CollectedErrors):
    """Bad input to the generator; ``errors`` lists every problem found.

    Args:
        message: the exception's text (often a :func:`~dialfork_dataset.errors.summarize` of
            ``errors``).
        errors: every problem found, one ``"where: what"`` line each; defaults to ``[message]``.
    """


class UnknownBackendError(GenerationError):
    """A backend name that is not in the registry (:data:`generation.backends.BACKENDS`), or whose
    module cannot be imported (a missing optional dependency).

    Args:
        message: the exception's text: the unknown name and the registered ones, or the import
            failure.
        errors: every problem found, one line each; defaults to ``[message]``.
    """


class VariantError(GenerationError):
    """The variant file (the types' ``generation/types/<code>.yaml`` or ``--variants``) is malformed; ``errors`` lists
    every problem.

    Args:
        message: the exception's text (the file and its problems).
        errors: every problem, one ``"file: location: what"`` line each; defaults to ``[message]``.
    """


class PromptError(GenerationError):
    """A prompt template is missing, or a value for one of its placeholders is.

    Args:
        message: the exception's text (the template file and the missing placeholders).
        errors: every problem, one line each; defaults to ``[message]``.
    """


__all__ = ["GenerationError", "PromptError", "UnknownBackendError", "VariantError"]
