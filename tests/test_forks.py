import pytest

from dialfork_dataset import (
    fork_turns,
    position_to_system_turn,
    prefix_before_system_turn,
    system_turn_to_position,
)

# Hand-worked: t_k = 1 + round((k-1) T / 4), Python round = half to even.
#  T=4: 0,1,2,3 -> 1,2,3,4
#  T=5: 0,1.25,2.5,3.75 -> 0,1,2,4 -> 1,2,3,5
#  T=6: 0,1.5,3,4.5 -> 0,2,3,4 -> 1,3,4,5 (SPEC example)
#  T=7: 0,1.75,3.5,5.25 -> 0,2,4,5 -> 1,3,5,6
#  T=8: 0,2,4,6 -> 1,3,5,7
#  T=9: 0,2.25,4.5,6.75 -> 0,2,4,7 -> 1,3,5,8
#  T=10: 0,2.5,5,7.5 -> 0,2,5,8 -> 1,3,6,9
#  T=11: 0,2.75,5.5,8.25 -> 0,3,6,8 -> 1,4,7,9
#  T=12: 0,3,6,9 -> 1,4,7,10
HAND = {
    4: (1, 2, 3, 4),
    5: (1, 2, 3, 5),
    6: (1, 3, 4, 5),
    7: (1, 3, 5, 6),
    8: (1, 3, 5, 7),
    9: (1, 3, 5, 8),
    10: (1, 3, 6, 9),
    11: (1, 4, 7, 9),
    12: (1, 4, 7, 10),
}


@pytest.mark.parametrize("T", sorted(HAND))
def test_fork_turns_hand_worked(T):
    assert fork_turns(T) == HAND[T]


@pytest.mark.parametrize("T", [0, 1, 2, 3, -1])
def test_fork_turns_too_short(T):
    with pytest.raises(ValueError, match="T >= 4"):
        fork_turns(T)


def test_fork_turns_rejects_non_int():
    with pytest.raises(ValueError):
        fork_turns(6.0)
    with pytest.raises(ValueError):
        fork_turns(True)


def test_fork_turns_invariants():
    for T in range(4, 200):
        ts = fork_turns(T)
        assert ts[0] == 1 and list(ts) == sorted(set(ts)) and ts[-1] <= T


def test_position_maps():
    turns = [{"speaker": s, "text": "x"} for s in ["user", "system", "user", "system", "system", "user"]]
    assert [system_turn_to_position(turns, t) for t in (1, 2, 3)] == [1, 3, 4]
    assert [position_to_system_turn(turns, p) for p in range(6)] == [1, 1, 1, 2, 3, 3]
    for t in (1, 2, 3):
        assert position_to_system_turn(turns, system_turn_to_position(turns, t)) == t
    assert len(prefix_before_system_turn(turns, 2)) == 3
    with pytest.raises(ValueError):
        system_turn_to_position(turns, 4)
    with pytest.raises(ValueError):
        position_to_system_turn(turns, 6)
