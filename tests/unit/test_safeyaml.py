"""YAML read anywhere never expands aliases beyond a small bound: one loader
(testbed_common.safeyaml) for the whole project, refusing alias bombs, cycles, many
aliases and deep nesting quickly and in little memory; every reader of YAML uses it,
and a new call site that reads YAML any other way fails this test."""

from __future__ import annotations

import ast
import resource
import time
import tracemalloc
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from orchestrator.catalogue.manifest import ManifestError, parse_manifest
from orchestrator.cli import main as cli_main
from orchestrator.services.fleetfile import fleet_nodes
from testbed_common import safeyaml
from testbed_common.safeyaml import YamlLimits, YamlRefused
from tests.conftest import REPO

#: Where the project's code lives (scripts/ run on machines without the package).
CODE = ("orchestrator", "node-image", "common")
#: The one module that may call PyYAML's loaders.
LOADER = REPO / "common/testbed_common/safeyaml.py"
#: PyYAML's names that read YAML (its dumpers are free to use).
READERS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all",
           "full_load_all", "unsafe_load_all", "compose", "compose_all", "parse", "scan",
           "Loader", "SafeLoader", "FullLoader", "UnsafeLoader", "BaseLoader", "CLoader",
           "CSafeLoader", "CFullLoader", "CUnsafeLoader", "CBaseLoader"}


def laughs(levels: int, fan: int = 10) -> str:
    """The 'billion laughs': each level ``fan`` aliases of the one before."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * fan) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fan) + "]"
              for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


BOMBS = {
    "billion laughs (90 aliases, 10^9 values)": (laughs(8), "aliases"),
    "a million laughs within the alias count (50 aliases)": (laughs(5), "expand"),
    "fan-out of one anchor (2,000 aliases)": (
        "a: &a [" + ", ".join(["x"] * 50) + "]\nb: [" + ", ".join(["*a"] * 2000) + "]\n",
        "aliases"),
    "a cycle": ("a: &a [1, *a]\n", "cycle"),
    "a mapping cycle": ("a: &a {k: *a}\n", "cycle"),
    "deep flow nesting": ("[" * 5_000 + "]" * 5_000, "deeper"),
    "deep block nesting": ("".join(" " * i + f"k{i}:\n" for i in range(1000)) + " " * 1000
                           + "v\n", "deeper"),
    "merge keys past the bound": (
        "base: &b {" + ", ".join(f"k{i}: {i}" for i in range(200)) + "}\n"
        + "".join(f"m{i}: {{<<: *b}}\n" for i in range(60)), "expand"),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_bombs_are_refused_cheaply_with_the_bound_named(name: str) -> None:
    text, needle = BOMBS[name]
    started = time.process_time()
    with pytest.raises(YamlRefused, match=needle) as refused:
        safeyaml.load(text, what="spec.yaml")
    cpu = time.process_time() - started
    assert "spec.yaml" in str(refused.value)
    tracemalloc.start()  # apart: tracing slows every allocation
    with pytest.raises(YamlRefused):
        safeyaml.load(text, what="spec.yaml")
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # a small multiple of the text (PyYAML's nodes cost ~1 kB per value, hence the
    # per-byte figure; a floor for the loader's own imports and tables)
    assert peak < 2_000 * len(text) + 8 * 1024**2, (peak, len(text))
    assert cpu < 0.5 + len(text) / 100_000, cpu  # 10 us a byte


def test_a_document_over_the_byte_limit_is_refused_before_parsing() -> None:
    with pytest.raises(YamlRefused, match="over the 100-byte limit"):
        safeyaml.load("a: " + "x" * 200, what="f", limits=YamlLimits(max_bytes=100))


def test_invalid_yaml_and_invalid_utf8_name_the_document() -> None:
    with pytest.raises(YamlRefused, match="f.yaml is not valid YAML"):
        safeyaml.load("a: [", what="f.yaml")
    with pytest.raises(YamlRefused, match="f.yaml is not UTF-8"):
        safeyaml.load(b"a: \xff", what="f.yaml")


def repo_yaml() -> list[Path]:
    return sorted(p for pattern in ("experiments/*/experiment.yaml", "deploy/**/*.yaml",
                                    "deploy/**/*.yml", "docker-compose.yml")
                  for p in REPO.glob(pattern) if ".venv" not in p.parts)


def test_every_yaml_document_of_the_repository_reads_as_before() -> None:
    paths = repo_yaml()
    assert len(paths) > 20
    for path in paths:
        text = path.read_text()
        if text.count("\n---") or (text.startswith("---\n") and "\n---" in text[4:]):
            continue  # several documents in one file (Kubernetes): not read by the code
        assert safeyaml.load(text, what=str(path)) == yaml.safe_load(text), path


def test_a_few_aliases_and_merge_keys_still_work() -> None:
    text = "base: &b {rate: 10, dir: up}\nsteps:\n  - {<<: *b, dir: down}\n  - *b\n"
    assert safeyaml.load(text, what="f") == yaml.safe_load(text)


def _reads_yaml(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id == "yaml" and node.attr in READERS:
            found.append(f"yaml.{node.attr} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] == "yaml":
            found += [f"from {node.module} import {a.name} (line {node.lineno})"
                      for a in node.names if a.name in READERS or node.module != "yaml"]
        if isinstance(node, ast.Import):
            found += [f"import {a.name} (line {node.lineno})" for a in node.names
                      if a.name.startswith("yaml.") or a.name == "ruamel.yaml"]
    return found


def test_no_code_reads_yaml_but_through_the_one_loader() -> None:
    sources = [p for folder in CODE for p in (REPO / folder).rglob("*.py")
               if p != LOADER and ".venv" not in p.parts]
    assert len(sources) > 100
    bypass = {str(p.relative_to(REPO)): hits for p in sources
              if (hits := _reads_yaml(ast.parse(p.read_text(), str(p))))}
    assert not bypass, f"read YAML with testbed_common.safeyaml.load instead: {bypass}"
    # the scan finds what it looks for
    assert _reads_yaml(ast.parse("import yaml\nyaml.safe_load('a')\n"))
    assert _reads_yaml(ast.parse("from yaml import CSafeLoader\n"))
    assert not _reads_yaml(ast.parse("import yaml\nyaml.safe_dump({})\n"))


BOMB = laughs(8)


def test_every_reader_refuses_the_bomb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest, the fleet file, the CLI's campaign spec and parameter values, and
    the agent's config: each says the document is refused, quickly."""
    started = time.process_time()
    with pytest.raises(ManifestError, match="experiment.yaml is refused"):
        parse_manifest(BOMB, source="bomb/experiment.yaml")
    with pytest.raises(ValueError, match="fleet file is refused"):
        fleet_nodes(BOMB, {})
    spec = tmp_path / "campaign.yaml"
    spec.write_text(BOMB)
    out = CliRunner().invoke(cli_main.cli, ["--url", "http://127.0.0.1:9", "campaign",
                                            "submit", str(spec)])
    assert out.exit_code == 2 and "is refused" in out.output, out.output
    out = CliRunner().invoke(cli_main.cli, ["--url", "http://127.0.0.1:9", "run", "submit",
                                            "tat", "--node", "se-01", "--interface", "op0",
                                            "--param", "x=" + "[" * 5000])
    assert out.exit_code == 2 and "x is refused" in out.output, out.output
    from node_agent.config import load_config
    from node_agent.errors import ConfigError
    config = tmp_path / "agent.yaml"
    config.write_text(BOMB)
    with pytest.raises(ConfigError, match="agent config .* is refused"):
        load_config({"TESTBED_AGENT_CONFIG": str(config)})
    assert time.process_time() - started < 5
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 2 * 1024**2  # KiB: < 2 GiB
