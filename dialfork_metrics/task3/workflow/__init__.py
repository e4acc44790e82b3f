"""The workflow-aware Task 3 detector ``wf`` and what else reads a dialogue against its workflow, as a
pipeline, bottom up:

* :mod:`.reader`: the learned reader: which step a system turn says, which slots a user turn gives;
* :mod:`.generic`: what any agent says (closings, thanks, fillers), a class every workflow shares;
* :mod:`.nodes`: node assignment with rejection (a system turn -> a step of its task, or none);
* :mod:`.state`: the dialogue state tracker and its step rules (skip-requires, skip-closing, repeat-slot);
* :mod:`.rules`: the graph rules (repeat, order) and the per-turn deviation;
* :mod:`.fit`: learning from labels, logs or the workflow alone; :mod:`.explain`: roles at fit time and
  why a turn alarms;
* :mod:`.detector`: the detector itself (``wf``);
* :mod:`.coverage`: step coverage (the agent audit) and :mod:`.conformance`: the check of generated
  conformant dialogues, both on the node assigner.
"""
