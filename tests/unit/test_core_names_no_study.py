"""The core names no experiment and no result format (issue 33, done-means 1): the
experiments' names and formats come from experiments/*/experiment.yaml, and no string
in the core packages' code (docstrings and comments aside: prose may cite a study) is
an experiment's name or holds a result format. Studies live in studies/, found by
entry point; the import contracts (pyproject.toml) keep them out of the core.

:data:`NOT_YET_MOVED` lists, file by file, what still names a study: nothing since the
tat and abw-tat studies and the ABw proxy moved whole (docs/architecture.md, "Studies").
The test holds the list exactly, so a new name fails it.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import yaml

from tests.conftest import REPO

CORE = ("api", "services", "scheduling", "store", "timeseries", "pages", "dataset",
        "model", "quotas", "metrics", "catalogue", "cli")

#: file -> the study names its code still holds (with repeats), until they move.
NOT_YET_MOVED: dict[str, list[str]] = {}


def _studies() -> tuple[set[str], set[str]]:
    names, formats = set(), set()
    for path in sorted((REPO / "experiments").glob("*/experiment.yaml")):
        doc = yaml.safe_load(path.read_text())
        names.add(doc["name"])
        formats.add(doc["result"]["format"])
    return names, formats


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """Every string constant of the module's code, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and id(node) not in docs]


def test_the_catalogue_names_the_studies_this_test_looks_for() -> None:
    names, formats = _studies()
    assert {"tat", "abw-tat", "short-flows", "goodput-sequence", "cca-compare",
            "abw-tools"} <= names
    assert "testbed.cca-compare" in formats


def test_no_experiment_name_or_result_format_in_the_core_but_those_not_yet_moved() -> None:
    names, formats = _studies()
    found: dict[str, list[str]] = defaultdict(list)
    where: list[str] = []
    for package in CORE:
        for path in sorted((REPO / "orchestrator" / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for line, text in _code_strings(path):
                if text in names or any(f in text for f in formats):
                    found[rel].append(text)
                    where.append(f"{rel}:{line}: {text!r}")
    assert dict(found) == NOT_YET_MOVED, "\n".join(where)


def test_the_moved_studies_are_gone_from_the_core() -> None:
    """The four studies moved whole: no module of theirs is left in the core."""
    for gone in ("timeseries/shortflows.py", "timeseries/ccacompare.py", "pages/goodput.py",
                 "pages/cca.py", "pages/abwtools.py", "pages/shortflows.py",
                 "analysis/cca.py", "analysis/shortflows.py"):
        assert not (REPO / "orchestrator" / gone).exists(), gone
    for folder in ("goodput_sequence", "short_flows", "cca_compare", "abw_tools"):
        assert (REPO / "studies" / folder / "__init__.py").exists(), folder


#: The kit's modules that define a result format (testbed_kit/<module>.py with FORMAT).
FORMAT_MODULES = frozenset(
    f"testbed_kit.{p.stem}" for p in sorted((REPO / "common/testbed_kit").glob("*.py"))
    if "\nFORMAT = " in p.read_text())
#: Core modules that still import one (none: every format is read by its study).
FORMAT_IMPORTS_NOT_YET_MOVED: dict[str, list[str]] = {}


def test_no_core_module_imports_a_result_formats_module_but_those_not_yet_moved() -> None:
    """A format named through the kit's constant is named all the same."""
    assert {"testbed_kit.tat_result", "testbed_kit.goodput"} <= FORMAT_MODULES
    found: dict[str, list[str]] = defaultdict(list)
    for package in CORE:
        for path in sorted((REPO / "orchestrator" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module:
                    modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
                elif isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                else:
                    continue
                found[path.relative_to(REPO).as_posix()] += [
                    m for m in modules if m in FORMAT_MODULES]
    assert {k: v for k, v in found.items() if v} == FORMAT_IMPORTS_NOT_YET_MOVED


def test_tat_abw_tat_and_the_abw_proxy_are_their_studies_whole() -> None:
    """Their pages, queries, release tables and the proxy's planning moved too: the core
    keeps no module of theirs, and serves none of their pages itself."""
    for gone in ("pages/abwproxy.py", "timeseries/proxyrows.py", "services/proxy.py"):
        assert not (REPO / "orchestrator" / gone).exists(), gone
    for folder in ("tat", "abw_tat", "abw_proxy"):
        assert (REPO / "studies" / folder / "page.py").exists(), folder
    from orchestrator.pages.views import CORE_PAGES
    assert [e.slug for e in CORE_PAGES] == ["campaigns", "fleet"]
