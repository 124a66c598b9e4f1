"""The README's layout section names every module of the package, every rule file and every
script a rule calls, and names nothing that is not in the tree."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def layout() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Layout\n"):]
    return section[:section.index("\n## ")]


def test_the_layout_names_every_module_rule_file_and_rule_script():
    text = layout()
    named = set(re.findall(r"[\w/-]+\.(?:py|smk)\b", text))
    modules = {p.name for p in (ROOT / "src/arrepro").glob("*.py") if p.name != "__init__.py"}
    rules = {p.name for p in (ROOT / "workflow/rules").glob("*.smk")}
    scripts = {f"scripts/{m}" for m in re.findall(r"scripts/(\w+\.py)", "\n".join(
        p.read_text() for p in (ROOT / "workflow/rules").glob("*.smk")))}
    missing = sorted((modules | rules | scripts) - {Path(n).name for n in named} - {n for n in named})
    assert not missing, f"README's Layout does not name {missing}"
    for n in named:  # and everything it names exists
        where = [ROOT / d / n for d in ("", "src/arrepro", "workflow/rules", "src/arrepro/models", "scripts")]
        assert any(p.exists() for p in where), f"README's Layout names {n}, which is not in the tree"
