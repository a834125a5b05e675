"""Import-linter contract types for what its built-in ones cannot see (pyproject.toml,
``[tool.importlinter]``, ``contract_types``).

- ``experiment_folders``: an experiment is a folder (``experiments/<name>/``) whose
  scripts its image runs with the folder on the import path, not a package, and whose
  name is not a Python identifier (``abw-tat``), so import-linter's graph never holds
  it. This contract reads each script's imports itself: an experiment may import the
  modules of its own folder, the kit (``allowed_modules``), and anything that is not
  the project (standard library, third-party packages its image installs); not the
  orchestrator, the node agent, ``testbed_common`` or another experiment's modules.
- ``standard_library_only``: ``source_modules`` (the kit) import only each other and
  the standard library, as the bare ``python3`` of an experiment image offers.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


def _imports(path: Path) -> Iterator[tuple[int, str, int]]:
    """(line, module, level) of every import statement in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, 0
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, node.module or "", node.level


class _ListedViolations(Contract):
    """A contract whose check leaves its violations, one line each, in the metadata."""

    def render_broken_contract(self, check: ContractCheck) -> None:
        for violation in check.metadata["violations"]:
            output.print_error(violation, bold=False)
            output.new_line()


class ExperimentFoldersContract(_ListedViolations):
    """Every ``<folder>/<name>/*.py`` imports only its own folder's modules,
    ``allowed_modules`` and what is not the project."""

    folder = fields.StringField()
    allowed_modules = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        root = Path(self.folder)  # relative to the project's root, where lint-imports runs
        if not root.is_dir():
            return ContractCheck(kept=False, metadata={"violations": [
                f"{root}: no such folder (run lint-imports from the project's root)"]})
        allowed = set(self.allowed_modules)
        project = set(self.session_options["root_packages"]) - allowed
        scripts = {d: sorted(d.glob("*.py")) for d in sorted(root.iterdir()) if d.is_dir()}
        owner = {p.stem: d for d, files in scripts.items() for p in files}
        violations = []
        for files in scripts.values():
            own = {p.stem for p in files}
            for path in files:
                for line, module, level in _imports(path):
                    top = module.split(".")[0]
                    where = f"{path}:{line}"
                    if level:
                        violations.append(f"{where}: relative import (an experiment's "
                                          "scripts are not a package; import by name)")
                    elif top in own or top in allowed:
                        continue
                    elif top in project:
                        violations.append(f"{where}: imports {module}, of the project "
                                          f"outside the kit ({', '.join(sorted(allowed))})")
                    elif top in owner:
                        violations.append(f"{where}: imports {module}, a module of "
                                          f"{owner[top]} (shared code belongs in the kit)")
        return ContractCheck(kept=not violations, metadata={"violations": violations})



class StandardLibraryOnlyContract(_ListedViolations):
    """``source_modules`` and everything under them import only each other and the
    standard library (``sys.stdlib_module_names``)."""

    source_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        sources = {m.name for m in self.source_modules}
        modules = set(sources)
        for name in sources:
            modules |= graph.find_descendants(name)
        tops = {name.split(".")[0] for name in sources}
        violations = []
        for importer in sorted(modules):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                top = imported.split(".")[0]
                if top in tops or top in sys.stdlib_module_names:
                    continue
                lines = sorted(d["line_number"] for d in graph.get_import_details(
                    importer=importer, imported=imported))
                violations.append(f"{importer} imports {imported} (line "
                                  f"{', '.join(map(str, lines))}): not the standard library")
        return ContractCheck(kept=not violations, metadata={"violations": violations})
