"""The images' shared layers (docs/architecture.md, "Images"): Docker's classic builder
reuses a layer only when the image's instructions up to it are the same, so the
Dockerfiles must begin with the same lines in the same order. One edited line in one
Dockerfile silently builds that layer (an apt install, the venv with every wheel) twice
on a fresh machine; these tests say which file drifted."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = {
    "orchestrator": REPO / "orchestrator/Dockerfile",
    "node": REPO / "node-image/Dockerfile",
    "server": REPO / "server-image/Dockerfile",
    "influxdb": REPO / "deploy/influxdb/Dockerfile",
    "postgres": REPO / "deploy/postgres/Dockerfile",
    "front": REPO / "deploy/front/Dockerfile",
    "prometheus": REPO / "deploy/prometheus/Dockerfile",
    "alertmanager": REPO / "deploy/alertmanager/Dockerfile",
    "tat": REPO / "experiments/tat/Dockerfile",
    "abw-tat": REPO / "experiments/abw-tat/Dockerfile",
    "short-flows": REPO / "experiments/short-flows/Dockerfile",
    "cca-compare": REPO / "experiments/cca-compare/Dockerfile",
    "abw-tools": REPO / "experiments/abw-tools/Dockerfile",
    "goodput-sequence": REPO / "experiments/goodput-sequence/Dockerfile",
}
#: Every Dockerfile of an image scripts/build-images.sh builds is listed above.
BUILT = {REPO / "orchestrator/Dockerfile", REPO / "node-image/Dockerfile",
         REPO / "server-image/Dockerfile", *REPO.glob("deploy/*/Dockerfile"),
         *REPO.glob("experiments/*/Dockerfile")}
#: Images of third-party services (Debian's packages), which need no network tools.
SERVICES = {"influxdb", "postgres", "front", "prometheus", "alertmanager"}


def instructions(path: Path) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped,
    whitespace normalised: what the builder's cache compares."""
    out: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
            continue
        out.append(" ".join((pending + line).split()))
        pending = ""
    return out


def test_every_built_image_is_checked() -> None:
    assert set(IMAGES.values()) == BUILT


def test_every_image_shares_the_base_and_python_runtime() -> None:
    first = instructions(IMAGES["orchestrator"])[:3]
    assert first[0] == "FROM debian:bookworm-slim"
    for name, path in IMAGES.items():
        assert instructions(path)[:3] == first, f"{name}: its first three lines differ"


def test_network_tools_are_one_layer_for_all_but_the_services() -> None:
    layer = instructions(IMAGES["orchestrator"])[3]
    assert "iperf3" in layer and "nftables" in layer
    for name, path in IMAGES.items():
        if name not in SERVICES:
            assert instructions(path)[3] == layer, f"{name}: its network-tools line differs"


def test_orchestrator_and_node_share_the_dependency_venv() -> None:
    shared = instructions(IMAGES["orchestrator"])[:6]
    assert any("requirements-orchestrator.txt" in i and "requirements-agent.txt" in i
               for i in shared)
    assert instructions(IMAGES["node"])[:6] == shared
