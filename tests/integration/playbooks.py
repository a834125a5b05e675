"""Running deploy/ansible's playbooks as an operator does (ansible-playbook from the
venv, the folder's ansible.cfg), and reading their recap."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, require

ANSIBLE_DIR = REPO / "deploy" / "ansible"
_RECAP = re.compile(r"^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                    re.MULTILINE)


def ansible_playbook() -> str:
    """The venv's ansible-playbook (pyproject's dev extras), else one on PATH."""
    here = Path(sys.executable).parent / "ansible-playbook"
    found = str(here) if here.exists() else shutil.which("ansible-playbook")
    require(found is not None, "needs ansible-playbook (pip install -e '.[dev]')")
    assert found is not None
    return found


@dataclass(frozen=True)
class Played:
    returncode: int
    output: str
    #: Per host: (ok, changed, unreachable, failed), from the PLAY RECAP.
    recap: dict[str, tuple[int, int, int, int]]

    def changed(self) -> dict[str, int]:
        return {host: counts[1] for host, counts in self.recap.items()}

    def changed_tasks(self) -> list[str]:
        """The tasks that reported a change, for an assertion's message."""
        tasks, current = [], ""
        for line in self.output.splitlines():
            if line.startswith(("TASK [", "RUNNING HANDLER [")):
                current = line.split("[", 1)[1].rsplit("]", 1)[0]
            elif line.startswith("changed:"):
                tasks.append(f"{current}: {line}")
        return tasks


def recap(output: str) -> dict[str, tuple[int, int, int, int]]:
    return {m[1]: (int(m[2]), int(m[3]), int(m[4]), int(m[5])) for m in _RECAP.finditer(output)}


def play(playbook: str, inventory: Path, *args: str, env: dict[str, str] | None = None,
         timeout: float = 1800) -> Played:
    proc = subprocess.run(
        [ansible_playbook(), "-i", str(inventory), playbook, *args],
        cwd=ANSIBLE_DIR, capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE_DIR / "ansible.cfg"),
             "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", **(env or {})},
    )
    out = proc.stdout + proc.stderr
    return Played(proc.returncode, out, recap(out))
