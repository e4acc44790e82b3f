"""The built-in hallucination types, one module each (issue 52): ``<code>.py`` holds the type's
registry entry (``TYPE``, a :class:`~dialfork_dataset.taxonomy.HallucinationType`), its template
planner (``PLANNER``) and the check of its variants' ``template`` material (``check_variants``);
``<code>.yaml`` next to it holds its variants.

:data:`dialfork_dataset.taxonomy.BUILTIN_TYPES` names each entry as ``"generation.types.<code>:TYPE"``:
the registry imports them on its first use (``dialfork_dataset`` never imports ``generation``), in
that order, which is each type's seed index. Adding a built-in type is a module and its variants
file here, and one more name at the end of ``BUILTIN_TYPES`` (``docs/extending.md``).

A variants file::

    version: 1          # bump it whenever a text of the file changes (the pool's version sums them)
    variants:
      - id: ...         # unique over the whole pool, recorded in each fork's record
        description: ...  # short
        instruction: ...  # injected as a system message before system turn t_k (LLM backends)
        cue: ...          # one sentence shown to human annotators
        template: {...}   # optional: what the type's planner reads (the template backend)

Placeholders in instructions: ``{substitute_task}`` (a type with ``substitute``), ``{service}`` (a
readable name of the task). Placeholders in template lines: ``{name}`` (the user's name or
"there"), ``{item}`` (what the user asked for), ``{alt}`` (an alternative value of the same kind),
``{service}``, ``{other_service}`` (the substitute task), ``{domain}``.
"""
