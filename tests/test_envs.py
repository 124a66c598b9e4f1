"""The conda envs of the rules (envs/*.yaml, plus the train env's post-deploy script) and the CPU
kernel-test venv (envs/kernels-cpu.txt) pin every package to an exact version, and a package
pinned in two places has one version everywhere, pyproject.toml included, except torch: the GPU
env pins the CUDA build for which the kernel packages publish wheels, the local CPU setup another.
The GPU env's combination is one for which every kernel package has a prebuilt wheel."""
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
    """Requirements that a post-deploy script installs: every name==version word of its code."""
    code = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return [(path.name, w) for w in re.findall(r"[A-Za-z0-9][A-Za-z0-9._\[\]-]*==[^\s\"')]+", code)]


def requirements_specs(path: Path) -> list[tuple[str, str]]:
    """Requirements of a pip requirements file (comments and blank lines skipped)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [(path.name, line) for line in lines if line]


def all_specs() -> list[tuple[str, str]]:
    specs = []
    for f in sorted(ENVS.glob("*.yaml")):
        specs += env_specs(f)
    for f in sorted(ENVS.glob("*.post-deploy.sh")):
        specs += post_deploy_specs(f)
    for f in sorted(ENVS.glob("*.txt")):
        specs += requirements_specs(f)
    return specs


def pins(specs) -> dict[str, str]:
    return {norm(m["name"]): m["version"] for m in (EXACT.match(r) for _, r in specs) if m}


# torch may differ between the GPU env (CUDA build with kernel wheels) and the CPU setup
TWO_TORCHES = {"torch"}


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
    train = {w for w, _ in train_specs()}
    for name in TWO_TORCHES & set(clashes):  # one version in the train env, one elsewhere
        places = [{w in train for w in where} for where in clashes[name].values()]
        if len(places) == 2 and sorted(map(sorted, places)) == [[False], [True]]:
            del clashes[name]
    assert not clashes, f"one package, several versions: {clashes}"


def train_specs() -> list[tuple[str, str]]:
    return env_specs(ENVS / "train.yaml") + post_deploy_specs(ENVS / "train.post-deploy.sh")


def test_the_envs_carry_what_pyproject_pins():
    """Every runtime package of pyproject.toml is in some env at the same version (the
    workflow's own tools, snakemake and its plugin, and the test runner and its 2-process plugin
    stay on the host; torch
    is the GPU env's own, see TWO_TORCHES)."""
    env = {}
    for where, req in all_specs():
        m = EXACT.match(req)
        if m:  # inexact pins are test_pins_are_exact's business
            env.setdefault(norm(m["name"]), {})[m["version"]] = where
    host_only = {"snakemake", "snakemake-executor-plugin-slurm", "pytest", "pytest-xdist", "execnet"} | TWO_TORCHES
    for where, req in pyproject_specs():
        m = EXACT.match(req)
        name = norm(re.split(r"[=\[<>~!]", req)[0])
        if name in host_only or not m:
            continue
        assert name in env, f"{where}: {req} is in no env under envs/"
        assert m["version"] in env[name], f"{where}: {req}, but envs/ have {env[name]}"


def kernel_packages() -> list[tuple[str, ...]]:
    """For each kernel function the mixers can call (arrepro.models.kernels.KERNELS), the pip
    distributions that provide it (any one will do)."""
    from arrepro.models.kernels import KERNELS

    assert KERNELS, "no kernel functions in arrepro.models.kernels"
    return [tuple(norm(d) for d in k.dists) for k in KERNELS.values()]


def test_the_train_env_has_every_kernel_package_and_torch():
    train = pins(train_specs())
    for dists in kernel_packages() + [("torch",), ("triton",)]:
        assert any(d in train for d in dists), f"the train env lacks {' or '.join(dists)}"


# Prebuilt wheels of the compiled kernel packages, from each release's build matrix (the
# release workflow at that tag) and issue threads: version -> (torch minor versions, CUDA majors,
# CPython versions). Linux x86_64; the torch >= 2.7 PyPI builds use the C++11 ABI (TRUE wheels).
PREBUILT = {
    ("flash-attn", "2.8.3"): ({"2.4", "2.5", "2.6", "2.7", "2.8"}, {"12"}, {"39", "310", "311", "312", "313"}),
    ("mamba-ssm", "2.3.1"): ({"2.6", "2.7", "2.8", "2.9", "2.10"}, {"11", "12", "13"}, {"310", "311", "312", "313"}),
    ("causal-conv1d", "1.6.0"): ({"2.5", "2.6", "2.7", "2.8", "2.9"}, {"11", "12"}, {"310", "311", "312", "313"}),
}


def test_every_compiled_kernel_has_a_prebuilt_wheel_for_the_train_env():
    """The wheel each setup.py asks for (cu{CUDA major}torch{major.minor}...-cp{py}) exists for the
    pinned versions: a bump of torch, CUDA or Python past the packages' wheels would mean source
    builds for every GPU architecture (hours) on the cluster."""
    train = pins(train_specs())
    conda = dict(r.split("==") for w, r in env_specs(ENVS / "train.yaml") if w.endswith("conda"))
    torch_minor = ".".join(train["torch"].split(".")[:2])
    cuda_major = train["nvidia-cuda-runtime-cu12"].split(".")[0]
    py = "".join(conda["python"].split(".")[:2])
    for name in ("flash-attn", "mamba-ssm", "causal-conv1d"):
        assert (name, train[name]) in PREBUILT, f"{name}=={train[name]}: no known prebuilt wheels"
        torches, cudas, pythons = PREBUILT[name, train[name]]
        tag = f"cu{cuda_major}torch{torch_minor}-cp{py}"
        assert torch_minor in torches and cuda_major in cudas and py in pythons, \
            f"{name}=={train[name]} publishes no {tag} wheel"


def test_post_deploy_installs_without_isolation_or_dependencies():
    """The kernels build against the env's torch (no build isolation) and pull nothing unpinned
    (no dependency resolution: mamba-ssm would otherwise bring tilelang & co.)."""
    text = (ENVS / "train.post-deploy.sh").read_text().replace("\\\n", " ")
    installs = [line for line in text.splitlines() if "pip install" in line]
    assert installs
    for line in installs:
        assert "--no-build-isolation" in line and "--no-deps" in line, line


def rule_scripts() -> list[tuple[str, str, Path]]:
    """(rule, its script, its env file) of every rule or checkpoint that runs a script in a conda env."""
    out = []
    for smk in sorted((ROOT / "workflow" / "rules").glob("*.smk")):
        text = smk.read_text()
        for m in re.finditer(r"^(?:rule|checkpoint) (\w+):\n(.*?)(?=^\S|\Z)", text, re.S | re.M):
            env = re.search(r'conda:\s*\n\s*"([^"]+)"', m.group(2))
            script = re.search(r'script:\s*\n\s*"([^"]+)"', m.group(2))
            if env and script:
                out.append((m.group(1), str((smk.parent / script.group(1)).resolve().relative_to(ROOT)),
                            (smk.parent / env.group(1)).resolve()))
    return out


def imported_packages(paths) -> set[str]:
    """The packages that files import, when they load or inside a function (arrepro.digest.imports)."""
    from arrepro.digest import imports

    return {module.split(".")[0] for p in paths for level, module, _ in imports(ROOT / p) if level == 0 and module}


def test_scipy_is_in_the_env_of_every_rule_whose_code_imports_it():
    """The claims' interval takes its t quantile from scipy.stats (arrepro.report.interval, which
    imports it where the interval is computed, not when it loads): every rule whose script's
    package modules import scipy runs in an env that pins it (the table and paper_numbers rules,
    through arrepro.report.verdicts)."""
    from arrepro.config.catalogue import script_sources

    needing = [(rule, env) for rule, script, env in rule_scripts()
               if "scipy" in imported_packages(script_sources(script, ROOT))]
    assert {"table", "paper_numbers"} <= {rule for rule, _ in needing}, needing
    for rule, env in needing:
        assert "scipy" in pins(env_specs(env)), f"rule {rule} imports scipy; {env.name} does not pin it"
