"""Package data of the leaderboard (templates); a package so that wheels ship it."""
