"""config.yaml and ``--config`` read before Snakemake reads them, and their refusals in one line
naming the file or the command line and the key (the Snakefile's first checks, and its
errors; the rest of the checks before any job: arrepro.cluster.preflight):

* ``check_config_file``: config.yaml's size, YAML aliases that expand without end, keys given twice;
* ``command_line_config``: ``--config`` mappings read as YAML (Snakemake reads their numbers as strings);
* ``config_error``: a ConfigError of the config checks (arrepro.config.checks), naming where its
  key's value came from (``config_source``: config.yaml or ``--config``);
* ``config_problem``: a config.yaml that fails the schema, in one line naming the key and where it
  came from (Snakemake's own ``validate`` message prints the whole config and schema after it).
"""
from __future__ import annotations

import re
from pathlib import Path

CONFIG_MAX_BYTES = 1 << 20  # config.yaml is 27 KB
CONFIG_MAX_VALUES = 200_000  # values after YAML's aliases are expanded (config.yaml: about 5,000)
COMMAND_LINE = "--config"  # how a refusal names a value given on the command line


class ConfigFileError(ValueError):
    """A config file refused before Snakemake reads it; the message is one line naming it."""


def check_config_file(path: str | Path) -> None:
    """Refuse, in one line naming the file (and the line), a config file that Snakemake would
    read wrongly or never finish reading: over ``CONFIG_MAX_BYTES``; not YAML; a key given twice
    in one mapping (YAML keeps the last silently); aliases that expand to more than
    ``CONFIG_MAX_VALUES`` values (an "alias bomb": a few lines that expand to 10^9 values hang
    every reader). Reads the YAML node graph only: nothing is expanded."""
    import yaml

    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        return  # (Snakemake names a missing config file)
    if size > CONFIG_MAX_BYTES:
        raise ConfigFileError(f"{path}: {size:,} bytes, more than the {CONFIG_MAX_BYTES:,} a config may have")
    try:
        root = yaml.compose(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # libyaml's: 6x faster
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ConfigFileError(f"{path}: not valid YAML: {' '.join(str(e).split())}") from None
    if root is None:
        return
    sizes: dict[int, int] = {}

    def expanded(node) -> int:  # values once every alias is expanded, each node counted once
        if id(node) in sizes:
            return sizes[id(node)]
        sizes[id(node)] = 1  # (a recursive alias counts once)
        if isinstance(node, yaml.MappingNode):
            n = 1 + sum(expanded(k) + expanded(v) for k, v in node.value)
        elif isinstance(node, yaml.SequenceNode):
            n = 1 + sum(expanded(v) for v in node.value)
        else:
            n = 1
        sizes[id(node)] = min(n, CONFIG_MAX_VALUES + 1)
        return sizes[id(node)]

    if expanded(root) > CONFIG_MAX_VALUES:
        raise ConfigFileError(f"{path}: its aliases (*name) expand to more than {CONFIG_MAX_VALUES:,} values (an alias "
                              "bomb?); write the values out, or use fewer nested aliases")
    seen_maps: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen_maps or not isinstance(node, (yaml.MappingNode, yaml.SequenceNode)):
            continue
        seen_maps.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            todo += node.value
            continue
        first: dict = {}
        for k, v in node.value:
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                if k.value in first:
                    raise ConfigFileError(f"{path}: line {k.start_mark.line + 1}: key {k.value!r} given twice in one "
                                          f"mapping (first at line {first[k.value] + 1}); YAML would keep the last "
                                          "silently: remove one")
                first[k.value] = k.start_mark.line
            todo += [k, v]


def command_line_config(config_args) -> dict:
    """The ``--config key=value`` arguments (Snakemake's raw ``config_args``) as a dict, every value
    that is a YAML mapping or list (``lr_searches={tiny: {rounds: 1}}``) read as YAML: Snakemake
    reads those with YAML's BaseLoader, every number a string. Scalars as Snakemake reads them."""
    import yaml
    from snakemake.cli import parse_config

    out = {}
    for arg in config_args or ():
        key, sep, value = str(arg).partition("=")
        if not sep or not value.lstrip().startswith(("{", "[")):
            out.update(parse_config([arg]))
            continue
        if len(value) > CONFIG_MAX_BYTES:
            raise ConfigFileError(f"{COMMAND_LINE} {key}=...: {len(value):,} characters, more than a config may have")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as e:
            raise ConfigFileError(f"{COMMAND_LINE} {key}={value}: not valid YAML: {' '.join(str(e).split())}") from None
    return out


def config_source(path: str, overrides) -> str:
    """Where the config value at ``path`` (dotted, as config_problem writes it) came from: the
    command line (``--config``) if ``overrides`` (command_line_config) gave it, else config.yaml."""
    parts = [p for p in re.split(r"[.\[\]]", path) if p]
    node = overrides or {}
    if not parts or not node:
        return "config.yaml"
    for part in parts:
        if not isinstance(node, dict):  # a list or a value given on the command line holds it
            return COMMAND_LINE
        if part not in node:
            return "config.yaml"
        node = node[part]
    return COMMAND_LINE


def config_error(err: Exception, overrides=None) -> str:
    """One line for a ConfigError (its message starts with the key), naming where the value came
    from: config.yaml, or the command line (``overrides``: command_line_config)."""
    return f"{config_source(str(err).split(':', 1)[0], overrides)}: {err}"


def config_problem(err: Exception, source: str = "config.yaml", overrides=None) -> str:
    """One line for a config that Snakemake's ``validate`` refused: where (the key's path) and
    what, with the allowed keys for an unknown one. ``err``: validate's WorkflowError, raised while
    handling jsonschema's ValidationError (its context). ``overrides``: the command line's
    ``--config`` values; a refused value there is named as coming from the command line."""
    from jsonschema.exceptions import ValidationError, best_match

    e = err
    while e is not None and not isinstance(e, ValidationError):  # validate raises WorkflowError(..., e)
        e = e.__cause__ or e.__context__
    if e is None:
        return f"{source}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    if e.context:  # oneOf/anyOf: the alternative of the value's own type, else the most relevant error
        e = best_match(e.context, key=_same_type_first(e.instance))
    path = e.json_path.removeprefix("$").lstrip(".")
    if overrides:
        source = config_source(path, overrides)
    where = f"at {path}" if path else "at the top level"
    if e.validator == "additionalProperties" and isinstance(e.instance, dict):
        known = e.schema.get("properties", {})
        unknown = [k for k in e.instance if k not in known]
        allowed = ", ".join(sorted(known)) or "none"
        return (f"{source}: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} {where} "
                f"(allowed there: {allowed})")
    if e.validator == "maxLength" and isinstance(e.instance, str):
        message = f"a text of {len(e.instance):,} characters; at most {e.validator_value:,}"
    elif e.validator == "minProperties" and isinstance(e.instance, dict):
        n = e.validator_value
        message = f"{len(e.instance) or 'no'} entr{'y' if len(e.instance) == 1 else 'ies'}; at least {n} needed"
    else:
        message = e.message if len(e.message) <= 300 else e.message[:300] + " ..."
    return f"{source}: {where}: {message}"


def _same_type_first(instance):
    """best_match's key preferring the errors of an alternative written for the value's own JSON
    type (a list of learning rates is told what is wrong with the list, not that it is no name)."""
    from jsonschema.exceptions import relevance

    kinds = {dict: "object", list: "array", str: "string", bool: "boolean"}
    kind = next((v for k, v in kinds.items() if isinstance(instance, k)), "number")

    def key(error):
        types = error.schema.get("type") if isinstance(error.schema, dict) else None
        types = [types] if isinstance(types, str) else types or []
        mismatched = error.validator == "type" or (types and kind not in types and not (kind == "number" and "integer" in types))
        return (not mismatched, *relevance(error))

    return key
