"""A run's forecast: how long it holds the node and how many bytes it moves.

The manifest states both as expressions over the parameters and ``rate_bps``, the
link's expected rate. The rate comes from the link's recent history (TAT and ABw rates
measured on that node + operator): a high percentile, because a quota reservation that
is too small gets the run killed mid-measurement, while one too large only defers a
later run. Without enough history a stated default rate is used, and the forecast says
which it used.

The scheduling layer may not import the catalogue (they are sibling layers), so the
manifest is reached through the small :class:`ForecastModel` protocol, which
``orchestrator.catalogue.manifest.Manifest`` satisfies as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.model.ids import NodeId


class ForecastModel(Protocol):
    """What the scheduler needs of an experiment manifest."""

    @property
    def interfaces(self) -> int: ...

    #: The platforms the image provides, and whether it needs the native tools
    #: (orchestrator.scheduling.platforms).
    @property
    def platforms(self) -> tuple[str, ...]: ...

    @property
    def native_tools(self) -> bool: ...

    def resolve_parameters(self, given: Mapping[str, Any]) -> dict[str, Any]: ...

    def forecast(self, parameters: Mapping[str, Any], rate_bps: float) -> tuple[float, int]: ...


@dataclass(frozen=True)
class LinkHistory:
    """Recent measured rates per link (node, MCC-MNC), oldest first, bit/s."""

    rates: Mapping[tuple[NodeId, str], Sequence[float]] = field(default_factory=dict)


@dataclass(frozen=True)
class RatePolicy:
    #: Percentile of recent rates used for volume forecasts. 95: over-reserving only
    #: defers, under-reserving kills a run at its quota.
    percentile: float = 95.0
    #: How many of the most recent samples count (a day of hourly ABw-TAT-ABw is ~72).
    recent: int = 72
    #: Fewer samples than this and the default rate is used instead.
    min_samples: int = 3
    #: bit/s when a link has no usable history (settings.scheduling.default_rate_bps).
    default_rate_bps: float = 20e6


@dataclass(frozen=True)
class RateEstimate:
    rate_bps: float
    #: "p95 of 24 recent samples" or "default (2 samples)", for the booking's record.
    source: str


@dataclass(frozen=True)
class Forecast:
    duration_s: float
    volume_bytes: int
    rate: RateEstimate


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: the value was really measured)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100.0 * len(ordered)))
    return ordered[rank - 1]


def expected_rate(history: LinkHistory, *, node: NodeId, mcc_mnc: str,
                  policy: RatePolicy) -> RateEstimate:
    samples = [r for r in history.rates.get((node, mcc_mnc), ())[-policy.recent:]
               if r > 0 and math.isfinite(r)]
    if len(samples) < policy.min_samples:
        return RateEstimate(policy.default_rate_bps, f"default ({len(samples)} samples)")
    return RateEstimate(
        percentile(samples, policy.percentile),
        f"p{policy.percentile:g} of {len(samples)} recent samples",
    )


def forecast_run(model: ForecastModel, parameters: Mapping[str, Any], *,
                 rate: RateEstimate) -> Forecast:
    """Duration and volume of one run with resolved ``parameters`` on a link of
    ``rate``. Raises ``ValueError`` (the manifest's expression errors) if they do not
    evaluate, and for a negative or non-finite result."""
    duration, volume = model.forecast(parameters, rate.rate_bps)
    if not (math.isfinite(duration) and duration > 0) or volume < 0:
        raise ValueError(f"forecast gave duration {duration} s and volume {volume} bytes")
    return Forecast(duration, volume, rate)
