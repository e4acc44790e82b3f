"""Workflow files (a practitioner's own workflows, SPEC section 4): :mod:`.check` (the schema and every
check, collected, with file:line), :mod:`.files` (the corpus a file describes: tasks, steps, scenarios),
:mod:`.roles` (step roles and slots derived from the task graph) and :mod:`.export` (a source written
as a workflow file). The schema is ``workflow.schema.json``."""
