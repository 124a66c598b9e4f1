"""arrepro.digest: what the code does, wherever it lives. A comment, a docstring, formatting, or a
definition moved from one file of a rule to another (a refactor) leaves the digest alone; any
change to what a statement does changes it."""
import json
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
    # (a script that runs them: in the package, a function counts where code that runs names it)
    flat = {"src/arrepro/__init__.py": "", "src/arrepro/a.py": A.replace(
        "def helper2(x):", "def helper2(x):\n    from . import c\n"), "src/arrepro/b.py": B, "src/arrepro/c.py": other,
        "scripts/run.py": "from arrepro.a import area, helper, helper2\nprint(area(1), helper(2), helper2(3))\n"}
    moved = {"src/arrepro/__init__.py": "", "src/arrepro/stage/__init__.py": "",
             "src/arrepro/stage/area.py": flat["src/arrepro/a.py"].replace("from .b import helper", "from arrepro.b import helper")
             .replace("from . import c", "from arrepro.stage import c"),
             "src/arrepro/b.py": B, "src/arrepro/stage/c.py": other,
             "scripts/run.py": flat["scripts/run.py"].replace("arrepro.a", "arrepro.stage.area")}
    base = tree(tmp_path / "flat", flat)
    assert tree(tmp_path / "moved", moved) == base
    swapped = {**moved, "src/arrepro/b.py": other, "src/arrepro/stage/c.py": B}
    assert tree(tmp_path / "swapped", swapped) != base


TEX = """
def fmt_count(n):
    return f"{n:,}"


def lr_label(x):
    return f"{x:.3g}"


def tex_lr(x):
    return f"${x:.3g}$"
"""
PLOTS = """
from .tex import fmt_count, lr_label


def ticks(xs):
    return [lr_label(x) for x in xs], fmt_count(len(xs))
"""


def test_a_name_imported_under_another_name_counts(tmp_path):
    """Issue 38: ``from arrepro.report.tex import fmt_count, lr_label`` edited to ``..., tex_lr as
    lr_label`` changed no digest (imports of the package were left out whole): ``lr_label`` runs
    another function. The binding is kept, without the module, with every statement that reads
    it: at the top of a file, inside a function, and where another file binds the same name the
    same way (a set of bindings would hide the edit of one of them)."""
    base = digest(tmp_path, tex=TEX, plots=PLOTS, other=PLOTS)
    renamed = PLOTS.replace("import fmt_count, lr_label", "import fmt_count, tex_lr as lr_label")
    assert digest(tmp_path, tex=TEX, plots=renamed, other=PLOTS) != base
    both = digest(tmp_path, tex=TEX, plots=renamed, other=renamed)
    assert digest(tmp_path, tex=TEX, plots=renamed, other=PLOTS) != both
    inner = PLOTS.replace("def ticks(xs):\n", "def ticks(xs):\n    from .tex import tex_lr as lr_label\n")
    assert digest(tmp_path, tex=TEX, plots=inner, other=PLOTS) != base
    # the module it comes from is where code lives: a rename of the module changes nothing
    moved = renamed.replace("from .tex import", "from .fmt import")
    assert digest(tmp_path, fmt=TEX, plots=moved, other=PLOTS) == digest(tmp_path, tex=TEX, plots=renamed, other=PLOTS)


def package(folder, files: dict) -> str:
    """``source_digest`` of files laid out as the repository (``src/arrepro/...``, ``scripts/...``)."""
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(textwrap.dedent(text))
    return source_digest(list(files), folder)


RUN = "from arrepro.plots import ticks\nprint(ticks([1e-3]))\n"
TABLES = """
from .tex import fmt_count


def _pm(mean, std):
    return f"{mean} +- {std}"


def row(r):
    return _pm(r[0], r[1]), fmt_count(r[2])
"""


def test_only_what_a_job_can_run_counts(tmp_path):
    """Issue 38: moving ``_pm`` from report/tables.py to report/tex.py reran the figures, which
    load tex.py and never call ``_pm``. In the package, a function or class counts only where
    code that counts names it; a statement that runs on import counts always; so does a
    definition whose decorator may register it, and every statement of the rule's script."""
    files = {"src/arrepro/__init__.py": "", "src/arrepro/tex.py": TEX, "src/arrepro/plots.py": PLOTS, "scripts/run.py": RUN}
    base = package(tmp_path / "a", files)
    moved = {**files, "src/arrepro/tex.py": TEX + TABLES.split("\n\n\n")[1]}  # _pm moved in: nothing names it
    assert package(tmp_path / "b", moved) == base
    edited = {**files, "src/arrepro/tex.py": TEX.replace("${x:.3g}$", "${x:.2g}$")}  # tex_lr: nothing names it
    assert package(tmp_path / "c", edited) == base
    # ... but lr_label does (ticks, which the script calls): an edit of it counts
    assert package(tmp_path / "d", {**files, "src/arrepro/tex.py": TEX.replace('f"{x:.3g}"', 'f"{x:.2g}"')}) != base
    # a statement that runs on import counts, named or not; a decorator that may register, too
    assert package(tmp_path / "e", {**files, "src/arrepro/tex.py": TEX + "\nSCALE = 2\n"}) != base
    registered = TEX + "\n\n@register('x')\ndef hidden():\n    return 1\n"
    assert package(tmp_path / "f", {**files, "src/arrepro/tex.py": registered}) \
        != package(tmp_path / "g", {**files, "src/arrepro/tex.py": registered.replace("return 1", "return 2")})
    cached = TEX + "\n\n@functools.lru_cache(maxsize=None)\ndef hidden():\n    return 1\n"
    assert package(tmp_path / "h", {**files, "src/arrepro/tex.py": cached}) \
        == package(tmp_path / "i", {**files, "src/arrepro/tex.py": cached.replace("return 1", "return 2")})
    # a function the script defines counts though nothing calls it (a script counts whole)
    assert package(tmp_path / "j", {**files, "scripts/run.py": RUN + "\n\ndef unused():\n    return 1\n"}) != base



# --------------------------------------------------------------------------- the parses' disk cache
def test_a_cached_parse_is_the_parse_of_every_file_of_the_package(tmp_path, monkeypatch):
    """arrepro.parsecache stores each file's parse as JSON: read back, it is the very parse (every
    module and script of this repository), and the digests from a warm cache are those from none."""
    from pathlib import Path

    from arrepro import digest, parsecache

    root = Path(__file__).resolve().parents[1]
    files = sorted((root / "src").rglob("*.py")) + sorted((root / "scripts").glob("*.py")) + [root / "Snakefile"]
    types = {"Unit": digest.Unit, "Parsed": digest.Parsed}
    for f in files:
        p = digest._read(f, f.read_bytes())
        assert parsecache.decode(json.loads(json.dumps(parsecache.encode(p))), types) == p, f
    monkeypatch.setenv("ARREPRO_CACHE_DIR", str(tmp_path / "cache"))
    digest._parsed.cache_clear()
    cold = source_digest(files)
    assert len(list((tmp_path / "cache" / "digest").glob("*.json"))) == len(files)
    digest._parsed.cache_clear()
    assert source_digest(files) == cold


def test_an_edit_or_a_damaged_entry_is_a_miss(tmp_path, monkeypatch):
    """The key is the file's name and bytes (and the parser's source, and the Python): an edit
    parses afresh; an entry that does not read back is parsed afresh and rewritten; a cache that
    cannot be written changes no digest."""
    from arrepro import digest

    monkeypatch.setenv("ARREPRO_CACHE_DIR", str(tmp_path / "cache"))
    f = tmp_path / "m.py"
    f.write_text("def f():\n    return 1\n")
    digest._parsed.cache_clear()
    one = source_digest([f])
    (entry,) = (tmp_path / "cache" / "digest").glob("*.json")
    f.write_text("def f():\n    return 2\n")
    digest._parsed.cache_clear()
    two = source_digest([f])
    assert two != one and len(list(entry.parent.glob("*.json"))) == 2
    f.write_text("def f():\n    return 1\n")
    entry.write_text('{"@": "Parsed", "units": [')  # damaged
    digest._parsed.cache_clear()
    assert source_digest([f]) == one and json.loads(entry.read_text())["@"] == "Parsed"
    monkeypatch.setenv("ARREPRO_CACHE_DIR", str(f))  # a file, not a folder: nothing can be written there
    digest._parsed.cache_clear()
    assert source_digest([f]) == one
