"""Hugging Face Space entry point of the DialFork leaderboard (``python app.py``).

Everything is configured through the Space's variables and secrets (see README.md); the app
itself is ``leaderboard.app`` from the ``dialfork`` package, with Hugging Face OAuth login.
"""

from leaderboard.app import main

if __name__ == "__main__":
    raise SystemExit(main([]))
