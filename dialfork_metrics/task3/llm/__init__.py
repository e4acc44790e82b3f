"""Zero-shot LLM detectors of Task 3: :mod:`.detector` (the prompts in ``prompts/``, the backends) and
:mod:`.parsing` (reading a turn number out of the model's answer)."""
