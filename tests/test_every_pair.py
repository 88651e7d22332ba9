"""Chapter 2's shipped every-pair capacities: the grid is whole and one entry recomputes."""
import pytest

from lib.experiments.memory_capacity import shipped_every_pair, trained_capacity

pytestmark = pytest.mark.slow   # two trained capacity searches


def test_the_shipped_every_pair_grid_is_whole_and_recomputes():
    ship = shipped_every_pair()
    assert sorted(int(d) for d in ship["n"]) == [32, 48, 64, 96, 128]
    assert all(len(v) == 6 and all(n > int(d) for n in v) for d, v in ship["n"].items())
    steps, lr = ship["provenance"]["steps"], ship["provenance"]["lr"]
    for s in (0, 3):
        assert trained_capacity(32, 1.0, seeds=1, first_seed=s, steps=steps, lr=lr) == ship["n"]["32"][s]
