"""scripts/build-images.sh skips every check when nothing changed since its last run
(the warm `scripts/up`): what it compares is the checkout's files (scripts/lib.sh's
checkout_state) and the images' ids (image_ids). A changed source must be seen, a file
the builds themselves write must not, and an image retagged elsewhere must be."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import REPO


def _lib(command: str, *, path: str | None = None) -> str:
    env = {**os.environ, "PATH": path} if path else None
    return subprocess.run(["bash", "-c", f". {REPO}/scripts/lib.sh && {command}"],
                          capture_output=True, text=True, check=True, env=env).stdout


def _tree(root: Path) -> None:
    for name in ("orchestrator/app.py", "experiments/tat/tat.py", ".git/HEAD",
                 "build/wheels/x.whl", "tools/target/release/linkem", "tools/linkem/src/main.rs",
                 "deploy/.secrets/compose.env", "orchestrator/__pycache__/app.cpython-311.pyc"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)


def test_a_source_change_is_seen_and_build_outputs_are_not(tmp_path: Path) -> None:
    _tree(tmp_path)
    before = _lib(f"checkout_state {tmp_path}")
    assert "./orchestrator/app.py " in before and "./tools/linkem/src/main.rs " in before
    assert _lib(f"checkout_state {tmp_path}") == before
    # what the builds and scripts/up write, and git, leave it as it was
    for name in (".git/HEAD", "build/wheels/x.whl", "tools/target/release/linkem",
                 "deploy/.secrets/compose.env", "orchestrator/__pycache__/app.cpython-311.pyc"):
        (tmp_path / name).write_text("changed")
    (tmp_path / "build/logs").mkdir()
    (tmp_path / "build/logs/stamp").write_text("new")
    assert _lib(f"checkout_state {tmp_path}") == before
    # a source edited, touched, added or removed is seen
    (tmp_path / "experiments/tat/tat.py").write_text("edited")
    edited = _lib(f"checkout_state {tmp_path}")
    assert edited != before
    os.utime(tmp_path / "orchestrator/app.py", (1e9, 1e9))
    assert _lib(f"checkout_state {tmp_path}") != edited
    (tmp_path / "node-image").mkdir()
    (tmp_path / "node-image/Dockerfile").write_text("FROM x")
    assert "./node-image/Dockerfile " in _lib(f"checkout_state {tmp_path}")


def test_image_ids_names_each_tag_exactly_and_a_missing_one(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "docker").write_text(
        "#!/bin/sh\n"
        "printf '%s\\n' 'testbed/node:dev2 sha256:bbb' 'testbed/node:dev sha256:aaa'"
        " 'testbed/exp-tat:1 sha256:ccc' '<none>:<none> sha256:ddd'\n")
    (fake / "docker").chmod(0o755)
    out = _lib("image_ids testbed/node:dev testbed/exp-tat:1 testbed/server:dev",
               path=f"{fake}:{os.environ['PATH']}")
    assert out.splitlines() == ["testbed/node:dev sha256:aaa", "testbed/exp-tat:1 sha256:ccc",
                                "testbed/server:dev missing"]
