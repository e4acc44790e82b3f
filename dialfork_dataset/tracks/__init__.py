"""Task 3 tracks of real dialogues edited at a known turn: :mod:`.engine` (the forks, split, records and
folder of any track), :mod:`.star_human` (STAR's human role-plays) and :mod:`.sgd` (SGD's dialogues
that follow a hand-written workflow file)."""
