"""The suite's order (tests/conftest.py): the files it starts first exist, and go first."""
from pathlib import Path

import conftest

HERE = Path(__file__).resolve().parent


def test_the_files_started_first_exist():
    missing = [name for name in conftest.SLOW_FIRST if not (HERE / name).is_file()]
    assert not missing, f"conftest.SLOW_FIRST names files that are not in tests/: {missing}"


def test_the_slow_files_are_collected_first(request):
    items = request.session.items
    if len(items) < 2 or not any(i.path.name == conftest.SLOW_FIRST[0] for i in items):
        return  # a selection without them: nothing to order
    ranks = [conftest.SLOW_FIRST.index(i.path.name) if i.path.name in conftest.SLOW_FIRST else len(conftest.SLOW_FIRST)
             for i in items]
    assert ranks == sorted(ranks)
