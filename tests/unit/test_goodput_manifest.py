"""goodput-sequence's manifest and campaign example: bounds that refuse bad parameters
with their names (422 at submission), forecasts that reserve what a run moves, and
the campaign of the reference's nine sizes."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.catalogue.loader import load_catalogue
from orchestrator.scheduling.spec import parse_campaign
from tests.conftest import REPO

MANIFEST = load_catalogue(REPO / "experiments")["goodput-sequence"]


@pytest.mark.parametrize(("given", "named"), [
    ({"size_bytes": 100}, "size_bytes"), ({"size_bytes": 32 * 1024**2}, "size_bytes"),
    ({"transfers": 6}, "transfers"), ({"transfers": 5000}, "transfers"),
    ({"idle_gap_s": -1}, "idle_gap_s"), ({"direction": "sideways"}, "direction"),
    ({"sizes": [4096]}, "unknown parameter"),
])
def test_bad_parameters_are_named(given: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        MANIFEST.resolve_parameters(given)


def test_defaults_are_the_references() -> None:
    p = MANIFEST.resolve_parameters({})
    assert p == {"size_bytes": 65536, "transfers": 101, "idle_gap_s": 15,
                 "direction": "downlink"}


def test_forecasts_cover_the_payload_and_the_gap() -> None:
    p = MANIFEST.resolve_parameters({"size_bytes": 1048576})
    slot_s, volume = MANIFEST.forecast(p, rate_bps=8e6)
    payload = 101 * 1048576
    assert payload < volume < 1.2 * payload
    assert slot_s > 15 + payload * 8 / 8e6  # the gap and the bytes at the link's rate
    # the largest run passes the fleet's 2 GB default cap: the quota ledger refuses it
    big = MANIFEST.resolve_parameters({"size_bytes": 16 * 1024**2, "transfers": 1001})
    assert MANIFEST.forecast(big, rate_bps=8e6)[1] > 2_000_000_000


def test_the_campaign_example_holds_the_nine_sizes() -> None:
    raw = yaml.safe_load((REPO / "deploy/campaigns/goodput-sequence.yaml").read_text())
    spec = parse_campaign(raw)
    sizes = [s.parameters["size_bytes"] for s in spec.steps]
    assert sizes == [4096 * 2**i for i in range(9)]  # 4 KB to 1 MB
    for s in spec.steps:
        MANIFEST.resolve_parameters(s.parameters)
