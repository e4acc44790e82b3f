"""Package data of the leaderboard (data); a package so that wheels ship it."""
