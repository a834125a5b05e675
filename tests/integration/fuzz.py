"""Schemathesis against a real orchestrator (uvicorn, SQLite file): the CI test and
the longer bench run share this. Each credential (the admin token, a registered node's
token, no token) gets its own run over the whole OpenAPI document, with the checks that
say the server is sound: no 5xx (``not_a_server_error``), every response as documented
(``response_schema_conformance``, ``status_code_conformance``,
``content_type_conformance``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.integration.live import Live

CHECKS = ("not_a_server_error,response_schema_conformance,status_code_conformance,"
          "content_type_conformance")
#: Failure kinds schemathesis reports for each check above.
SERVER_ERROR = "ServerError"
SCHEMA_VIOLATION = "JsonSchemaError"


@dataclass(frozen=True)
class Outcome:
    credential: str
    cases: int
    server_errors: int
    schema_violations: int
    other_failures: list[str]
    seconds: float
    output: str

    @property
    def clean(self) -> bool:
        return not (self.server_errors or self.schema_violations or self.other_failures)


def node_token(live: Live, node_id: str = "fz-01") -> str:
    """A provisioned and registered node, so the agent routes get past authentication."""
    token = live.add_node(node_id)
    r = httpx.post(f"{live.url}/api/v1/agent/register", timeout=30,
                   headers={"Authorization": f"Bearer {token}"},
                   json={"agent_version": "fuzz", "interfaces": [
                       {"name": "op0", "operator": {"mcc_mnc": "240-01", "name": "Telia"}}]})
    r.raise_for_status()
    return token


def credentials(live: Live) -> dict[str, str | None]:
    return {"admin": live.admin["Authorization"].removeprefix("Bearer "),
            "node": node_token(live), "none": None}


def run(live: Live, *, credential: str, token: str | None, seconds: int, workdir: Path,
        max_examples: int | None = None, seed: int | None = None) -> Outcome:
    """One schemathesis run with one credential, for at most ``seconds``."""
    report = workdir / f"schemathesis-{credential}.json"
    command = [
        str(Path(sys.executable).with_name("schemathesis")), "run", f"{live.url}/openapi.json",
        "--checks", CHECKS, "--max-time", str(seconds), "--workers", "1", "--no-shrink",
        "--request-timeout", "30", "--report", "json", "--report-json-path", str(report),
        "--warnings", "off",
    ]
    if token is not None:
        command += ["-H", f"Authorization: Bearer {token}"]
    if max_examples is not None:
        command += ["--max-examples", str(max_examples)]
    if seed is not None:
        command += ["--seed", str(seed)]
    started = time.monotonic()
    done = subprocess.run(command, cwd=workdir, capture_output=True, text=True, check=False,
                          env={**os.environ, "NO_COLOR": "1"}, timeout=seconds + 300)
    elapsed = time.monotonic() - started
    if not report.exists():
        raise RuntimeError(f"schemathesis wrote no report:\n{done.stdout}\n{done.stderr}")
    doc = json.loads(report.read_text())
    by_type: dict[str, int] = {}
    for failure in doc.get("failures", []):
        by_type[failure["type"]] = by_type.get(failure["type"], 0) + failure["count"]
    others = [f"{t}: {n}" for t, n in by_type.items() if t not in (SERVER_ERROR,
                                                                  SCHEMA_VIOLATION)]
    others += [f"error: {e}" for e in doc.get("errors", [])]
    return Outcome(
        credential=credential,
        cases=int(doc["test_cases"]["generated"]),
        server_errors=by_type.get(SERVER_ERROR, 0),
        schema_violations=by_type.get(SCHEMA_VIOLATION, 0),
        other_failures=others,
        seconds=elapsed,
        output=done.stdout[-20000:],
    )
