"""The conda envs of the rules (envs/*.yaml, plus the train env's post-deploy script) pin every
package to an exact version, and a package pinned in two places has one version everywhere,
pyproject.toml included."""
import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ENVS = ROOT / "envs"
KINDS = ("data", "train", "plots", "paper")
# name==version, name[extras]==version; the version is a literal (no *, no range)
EXACT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]+\])?==(?P<version>[0-9][0-9A-Za-z.+!-]*)$")


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def env_specs(path: Path) -> list[tuple[str, str]]:
    """(where, requirement) of every package of an env file; pip's included."""
    env = yaml.safe_load(path.read_text())
    out = []
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            out += [(f"{path.name} pip", str(r)) for r in dep["pip"]]
        else:
            out.append((f"{path.name} conda", str(dep)))
    return out


def post_deploy_specs(path: Path) -> list[tuple[str, str]]:
    """Requirements that a post-deploy script installs with pip."""
    text = path.read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        if "pip install" in line:
            words = line.split("pip install", 1)[1].split()
            out += [(path.name, w) for w in words if not w.startswith("-")]
    return out


def all_specs() -> list[tuple[str, str]]:
    specs = []
    for f in sorted(ENVS.glob("*.yaml")):
        specs += env_specs(f)
    for f in sorted(ENVS.glob("*.post-deploy.sh")):
        specs += post_deploy_specs(f)
    return specs


def pyproject_specs() -> list[tuple[str, str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [("pyproject dependencies", r) for r in project.get("dependencies", [])]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        specs += [(f"pyproject [{extra}]", r) for r in reqs]
    return specs


def test_one_env_per_kind_of_rule():
    for kind in KINDS:
        assert (ENVS / f"{kind}.yaml").is_file(), f"envs/{kind}.yaml is missing"
        env = yaml.safe_load((ENVS / f"{kind}.yaml").read_text())
        assert env["channels"][0] == "conda-forge" and "defaults" not in env["channels"]


def test_every_rule_with_software_names_an_existing_env():
    rules = "".join(p.read_text() for p in sorted((ROOT / "workflow" / "rules").glob("*.smk")))
    named = re.findall(r'conda:\s*\n\s*"([^"]+)"', rules)
    assert named, "no rule has a conda: directive"
    for rel in named:
        assert (ROOT / "workflow" / "rules" / rel).resolve().is_file(), rel
    for rule in ("data", "train", "aggregate", "cells_table", "figure"):
        body = re.search(rf"^rule {rule}:\n(.*?)(?=^rule |\Z)", rules, re.S | re.M)
        assert body and "conda:" in body.group(1), f"rule {rule} has no conda env"


@pytest.mark.parametrize("where,req", all_specs() + pyproject_specs())
def test_pins_are_exact(where, req):
    assert EXACT.match(req), f"{where}: {req!r} is not pinned to one exact version (name==version)"


def test_each_package_has_one_version_everywhere():
    seen: dict[str, dict[str, list[str]]] = {}
    for where, req in all_specs() + pyproject_specs():
        m = EXACT.match(req)
        if m:
            seen.setdefault(norm(m["name"]), {}).setdefault(m["version"], []).append(where)
    clashes = {name: versions for name, versions in seen.items() if len(versions) > 1}
    assert not clashes, f"one package, several versions: {clashes}"


def test_the_envs_carry_what_pyproject_pins():
    """Every runtime package of pyproject.toml is in some env at the same version (the
    workflow's own tools, snakemake and its plugin, and the test runner stay on the host);
    the train env has every CUDA kernel of the [gpu] extra, and torch."""
    env = {}
    for where, req in all_specs():
        m = EXACT.match(req)
        if m:  # inexact pins are test_pins_are_exact's business
            env.setdefault(norm(m["name"]), {})[m["version"]] = where
    host_only = {"snakemake", "snakemake-executor-plugin-slurm", "pytest"}
    for where, req in pyproject_specs():
        m = EXACT.match(req)
        name = norm(re.split(r"[=\[<>~!]", req)[0])
        if name in host_only or not m:
            continue
        assert name in env, f"{where}: {req} is in no env under envs/"
        assert m["version"] in env[name], f"{where}: {req}, but envs/ have {env[name]}"
    train = {norm(re.split(r"[=\[<>~!]", r)[0])
             for _, r in env_specs(ENVS / "train.yaml") + post_deploy_specs(ENVS / "train.post-deploy.sh")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for req in project["optional-dependencies"]["gpu"] + ["torch==0"]:
        assert norm(re.split(r"[=\[<>]", req)[0]) in train, f"the train env lacks {req}"
