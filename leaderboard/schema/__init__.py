"""Package data of the leaderboard (schema); a package so that wheels ship it."""
