"""A thin HTTP client for the CLI; turns API errors into one readable line."""

from __future__ import annotations

from typing import Any

import click
import httpx


class ApiClient:
    def __init__(self, url: str, token: str | None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)
        self.url = url

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            resp = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise click.ClickException(
                f"cannot reach the orchestrator at {self.url}: {e}; is it running? "
                "(set TESTBED_URL)"
            ) from e
        if resp.status_code >= 400:
            try:
                detail = resp.json().get("detail", resp.text)
            except ValueError:
                detail = resp.text
            if isinstance(detail, list):  # FastAPI validation errors
                detail = "; ".join(
                    f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}" for d in detail
                )
            raise click.ClickException(f"{resp.status_code}: {detail}")
        if resp.status_code == 204 or not resp.content:
            return None
        if resp.headers.get("content-type", "").startswith("application/json"):
            return resp.json()
        return resp.content


def api(ctx: click.Context) -> ApiClient:
    """The client for the URL and token given to ``testbed`` (``--url``, ``--token``)."""
    return ApiClient(ctx.obj["url"], ctx.obj["token"])
