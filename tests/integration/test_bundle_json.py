"""Deeply nested or oversized JSON in a bundle: refused with a reason on the run, never
a 500; and the archive holds a file exactly when the database holds its row."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from orchestrator.api.app import create_app
from orchestrator.errors import Conflict
from orchestrator.services import uploads
from orchestrator.services.context import Context
from orchestrator.services.ingest import ingest_pending
from orchestrator.store.tables import Run
from testbed_common import wire
from testbed_common.bundle import build_bundle
from tests.conftest import ManualClock, require
from tests.integration import influxd
from tests.integration.conftest import Api, make_settings

URL = wire.AGENT_PREFIX + "/runs/{}/bundle"
DEEP = b'{"format": "testbed.tat", "mean_bps": 5e6, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"


def _uploading_run(api: Api, token: str) -> str:
    run = api.submit("se-01")
    api.heartbeat(token)
    api.report(token, run["id"], "running")
    api.report(token, run["id"], "uploading")
    run_id: str = run["id"]
    return run_id


def _bundle(tmp: Path, run_id: str, *, tat: bytes, extra: dict[str, Any] | None = None) -> bytes:
    root = tmp / run_id
    (root / "results").mkdir(parents=True, exist_ok=True)
    (root / "results" / "tat.json").write_bytes(tat)
    return build_bundle(root, run_id=run_id, node_id="se-01", extra=extra)


def _with_manifest(bundle: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    """``bundle`` with its manifest.json text edited (what build_bundle cannot write)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(bundle)) as src, \
            tarfile.open(fileobj=out, mode="w:gz") as dst:
        for member in src:
            blob = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name == "manifest.json":
                blob = edit(blob.rstrip())
                member.size = len(blob)
            dst.addfile(member, io.BytesIO(blob))
    return out.getvalue()


def _send(api: Api, token: str, run_id: str, data: bytes) -> Any:
    api.client.post(URL.format(run_id), headers=api.node(token),
                    json={"size": len(data), "sha256": hashlib.sha256(data).hexdigest()})
    return api.client.patch(URL.format(run_id), content=data,
                            headers={**api.node(token), wire.UPLOAD_OFFSET_HEADER: "0"})


def _run(api: Api, run_id: str) -> dict[str, Any]:
    out: dict[str, Any] = api.client.get(f"/api/v1/runs/{run_id}", headers=api.admin).json()
    return out


def _archived(api: Api) -> list[Path]:
    return sorted(p for p in api.settings.archive_dir.rglob("*") if p.is_file())


def test_deeply_nested_manifest_is_refused_with_the_reason_on_the_run(
    api: Api, tmp_path: Path
) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = _uploading_run(api, token)
    data = _with_manifest(_bundle(tmp_path, run_id, tat=b"{}"), lambda m: m[:-1] + (
        b', "deep": ' + b"[" * 3000 + b"]" * 3000 + b"}"))  # RecursionError in json.loads
    for _attempt in range(2):  # the same answer on a retry, never a 500
        r = _send(api, token, run_id, data)
        assert r.status_code == 422, r.text
        assert "manifest.json is refused: JSON nested deeper than 64 levels" in r.json()["detail"]
    assert _archived(api) == []
    run = _run(api, run_id)
    assert run["state"] == "uploading" and run["bundle_sha256"] is None
    reasons = [e["reason"] for e in run["events"]]
    assert sum("nested deeper than 64 levels" in r for r in reasons) == 2, reasons


@pytest.fixture
def api_influx(tmp_path: Path, clock: ManualClock) -> Iterator[Api]:
    why = influxd.available()
    require(why is None, str(why))
    with influxd.running() as store:
        base = make_settings(tmp_path)
        settings = base.model_copy(update={
            "influx": store.settings("bundle_json", base.influx),
            "uploads": base.uploads.model_copy(update={"max_result_json_bytes": 1024**2}),
        })
        app = create_app(settings, clock=clock, reaper=False)
        with TestClient(app) as client:
            yield Api(client, clock, settings)
        app.state.ctx.db.engine.dispose()


def test_deeply_nested_result_is_archived_and_ingest_notes_why_it_was_not_read(
    api_influx: Api, tmp_path: Path
) -> None:
    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    ctx.timeseries.create_database()  # type: ignore[union-attr]
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = _uploading_run(api, token)
    big = tmp_path / run_id / "results" / "big.jsonl"
    big.parent.mkdir(parents=True)
    big.write_bytes(b"{}\n" * 600_000)  # 1.8 MB, over the 1 MiB cap: never read whole
    r = _send(api, token, run_id, _bundle(tmp_path, run_id, tat=DEEP))
    assert r.status_code == 200 and r.json()["complete"], r.text  # the raw record is kept
    assert _run(api, run_id)["state"] == "done"
    with ctx.db.session() as s:
        run = s.get(Run, run_id)
        assert run is not None and run.measured_rate_bps is None
    page = api.client.get(f"/api/v1/runs/{run_id}/result", headers=api.admin)
    assert page.status_code == 422 and "nested deeper" in page.json()["detail"]

    assert ingest_pending(ctx, ctx.timeseries).written_runs == 1  # type: ignore[arg-type]
    note = _run(api, run_id)["ingest_note"]
    assert "results/tat.json is refused: JSON nested deeper than 64 levels" in note
    assert "results/big.jsonl: 1800000 bytes, over the 1048576-byte cap for ingest" in note
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 0  # type: ignore[arg-type]


def test_a_failure_after_the_archive_write_leaves_no_file_without_its_row(
    api: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    run_id = _uploading_run(api, token)
    data = _bundle(tmp_path, run_id, tat=json.dumps({"format": "testbed.tat"}).encode())

    def fail(*_: Any, **__: Any) -> None:
        raise Conflict("the database went away after the archive write")

    with monkeypatch.context() as m:
        m.setattr(uploads, "transition", fail)
        r = _send(api, token, run_id, data)
    assert r.status_code == 409, r.text
    assert _archived(api) == []  # stored, then removed when the row was rolled back
    assert _run(api, run_id)["bundle_sha256"] is None

    r = _send(api, token, run_id, data)  # the agent retries: stored once, with its row
    assert r.status_code == 200 and r.json()["complete"], r.text
    assert [p.name for p in _archived(api)] == ["bundle.sha256", "bundle.tar.gz",
                                                "manifest.json"]
    assert _run(api, run_id)["bundle_sha256"] == hashlib.sha256(data).hexdigest()
    assert not api.settings.upload_dir.joinpath(f"{run_id}.part").exists()


def test_a_bundle_that_breaks_conversion_is_noted_and_does_not_block_the_others(
    api_influx: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.services import ingest

    api = api_influx
    ctx: Context = api.client.app.state.ctx  # type: ignore[attr-defined]
    ctx.timeseries.create_database()  # type: ignore[union-attr]
    token = api.add_node("se-01", [("op0", "240-01", "Telia")])
    first = _uploading_run(api, token)
    assert _send(api, token, first, _bundle(tmp_path, first, tat=b"{}")).json()["complete"]
    second = _uploading_run(api, token)
    assert _send(api, token, second, _bundle(tmp_path, second, tat=b"{}")).json()["complete"]
    real = ingest.bundle_points

    def broken_for_first(files: Any, run: Any, **kw: Any) -> Any:
        if run.run == first:
            raise IndexError("a defect in a converter")
        return real(files, run, **kw)

    monkeypatch.setattr(ingest, "bundle_points", broken_for_first)
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 2  # type: ignore[arg-type]
    assert "conversion to points failed: IndexError" in _run(api, first)["ingest_note"]
    assert "failed" not in (_run(api, second)["ingest_note"] or "")
    assert ingest_pending(ctx, ctx.timeseries).written_runs == 0  # type: ignore[arg-type]
