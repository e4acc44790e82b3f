"""Hugging Face Space entry point of the DialFork leaderboard (``python app.py``).

Everything is configured through the Space's variables and secrets (see README.md); the app
itself is ``leaderboard.app`` from the ``dialfork`` package, with Hugging Face OAuth login.
Run locally, the options of ``python -m leaderboard.app --help`` apply (the local mode without
login, ``--blind``, ``--gold``, ``--results``): the command line is passed on, not dropped.
"""

import sys

from leaderboard.app import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
