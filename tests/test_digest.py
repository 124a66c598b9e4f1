"""arrepro.digest: what the code does, wherever it lives. A comment, a docstring, formatting, or a
definition moved from one file of a rule to another (a refactor) leaves the digest alone; any
change to what a statement does changes it."""
import textwrap

from arrepro.digest import source_digest

A = '''
"""Module A."""
import math

from .b import helper

SCALE = 2


def area(r):
    """The area."""
    return math.pi * r * r * SCALE


def helper2(x):
    return x + 1
'''
B = '''
def helper(x):
    return x * 2
'''


def digest(tmp_path, **files):
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(text))
    return source_digest([f"{n}.py" for n in files], tmp_path)


def test_comments_docstrings_and_formatting_change_nothing(tmp_path):
    base = digest(tmp_path, a=A, b=B)
    edited = A.replace('"""The area."""', '"""The area of a circle."""').replace("math.pi * r * r", "math.pi*r*r")
    assert digest(tmp_path, a=edited + "\n# a comment\n", b=B) == base


def test_moving_a_definition_between_files_changes_nothing(tmp_path):
    base = digest(tmp_path, a=A, b=B)
    moved_a = A.replace("def helper2(x):\n    return x + 1\n", "").replace("from .b import helper",
                                                                         "from .b import helper, helper2")
    assert digest(tmp_path, a=moved_a, b=B + "\n\ndef helper2(x):\n    return x + 1\n") == base
    # split across a new third file of the list: still the same code
    assert digest(tmp_path, a=moved_a, b=B, c="def helper2(x):\n    return x + 1\n") == base


def test_what_the_code_does_changes_the_digest(tmp_path):
    base = digest(tmp_path, a=A, b=B)
    assert digest(tmp_path, a=A.replace("SCALE = 2", "SCALE = 3"), b=B) != base
    assert digest(tmp_path, a=A, b=B.replace("x * 2", "x * 3")) != base
    assert digest(tmp_path, a=A.replace("import math", "import cmath as math"), b=B) != base
    assert digest(tmp_path, a=A + "\nprint('side effect')\n", b=B) != base
    # a name bound twice: which one comes last decides
    twice = A + "\nSCALE = 3\n"
    swapped = A.replace("SCALE = 2", "SCALE = 3") + "\nSCALE = 2\n"
    assert digest(tmp_path, a=twice, b=B) != digest(tmp_path, a=swapped, b=B)


def test_a_name_defined_differently_in_two_files_keeps_its_file(tmp_path):
    """Which of two different ``helper``s runs is decided by an import (not in the digest): moving
    one of them is a change."""
    other = "def helper(x):\n    return x - 1\n"
    base = digest(tmp_path, a=A, b=B, c=other)
    assert digest(tmp_path, a=A, b=other, c=B) != base


def test_a_move_beside_a_name_defined_twice_changes_nothing(tmp_path):
    """Issue 32, round 6, 8: two files each defining their own ``helper`` were known by their whole
    text, so moving any other definition between them (``report/paper.py``'s ``grid_meta`` to
    ``report/fidelity.py``, both with such names) changed the digest. They are known by their
    definitions of the twice-defined names: an unrelated move changes nothing; moving one of the
    ``helper``s still does."""
    other = "def helper(x):\n    return x - 1\n"
    unrelated = "\n\ndef scale(x):\n    return 3 * x\n"
    base = digest(tmp_path, a=A, b=B + unrelated, c=other)
    assert digest(tmp_path, a=A, b=B, c=other + unrelated) == base
    assert digest(tmp_path, a=A, b=other + unrelated, c=B) != base


def test_a_module_moved_into_a_package_keeps_its_digest(tmp_path):
    """Issue 25: a module moved into a package and renamed, its imports rewritten (at the top and
    inside a function, relative to absolute), is the same code; a name defined in two files still
    counts which file its importer reads (a swap of the two is a change, also after the move)."""
    def tree(folder, files):
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(textwrap.dedent(text))
        return source_digest(list(files), folder)

    other = "def helper(x):\n    return x - 1\n"
    flat = {"src/arrepro/__init__.py": "", "src/arrepro/a.py": A.replace(
        "def helper2(x):", "def helper2(x):\n    from . import c\n"), "src/arrepro/b.py": B, "src/arrepro/c.py": other}
    moved = {"src/arrepro/__init__.py": "", "src/arrepro/stage/__init__.py": "",
             "src/arrepro/stage/area.py": flat["src/arrepro/a.py"].replace("from .b import helper", "from arrepro.b import helper")
             .replace("from . import c", "from arrepro.stage import c"),
             "src/arrepro/b.py": B, "src/arrepro/stage/c.py": other}
    base = tree(tmp_path / "flat", flat)
    assert tree(tmp_path / "moved", moved) == base
    swapped = {**moved, "src/arrepro/b.py": other, "src/arrepro/stage/c.py": B}
    assert tree(tmp_path / "swapped", swapped) != base
