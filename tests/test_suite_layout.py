"""The suite's own layout: pytest imports test modules by basename (no __init__.py in tests/), so two
test_x.py in different folders stop the whole suite's collection, though each folder passes alone."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent


def test_every_test_module_has_a_basename_of_its_own():
    where = defaultdict(list)
    for path in TESTS.rglob("*.py"):
        where[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1 and name != "conftest.py"}
    assert not clashes, f"rename one of each: {clashes}"
