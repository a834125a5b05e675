"""The ABw proxy page (``/pages/abw-proxy``): per SIM, the calibrated TAT proxy's
predictions against the TATs measured, with their 90 % intervals; the interval's
coverage and the median absolute error on held-back TATs; and the bytes the campaign
spent against an all-TAT campaign of the same length.

Held back in time: every TAT is predicted by the model fitted on the SIM's TATs before
it only (``score_sequentially``), from the 10th on (the 9 before it are the fewest that
bound a 90 % interval), as the proxy meets it in a campaign. It works on any campaign of
ABw-TAT-ABw sessions: on an all-TAT one every TAT is a check of the proxy; in proxy mode,
the TATs it asked for are, and its cheap sessions show what it stood in for.

Pure: histories in (:func:`orchestrator.analysis.proxy_data.histories`), a page model
out.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.analysis.proxy import (
    COVERAGE,
    Prediction,
    Scored,
    evaluate,
    fit,
    score_sequentially,
)
from orchestrator.analysis.proxy_data import SimHistory, SimId, histories
from orchestrator.study import (
    Filters,
    Page,
    Readable,
    Section,
    Table,
    TimeSeriesQuery,
    no_data,
    slug,
    svg,
)
from studies.abw_proxy.rows import campaign_points

SLUG = "abw-proxy"
TITLE = "ABw proxy"
#: TATs before the first held-back one: the fewest that bound a 90 % interval.
BEFORE_HELD_BACK = 9


@dataclass(frozen=True)
class SimFigures:
    sim: SimId
    tats: int
    held_back: int  # TATs scored with a bounded interval
    covered: int
    median_abs_error_bps: float
    median_relative_error: float
    full_sessions: int
    cheap_sessions: int
    bytes_spent: int
    #: The same windows, each a full session at this SIM's mean full-session bytes.
    bytes_all_tat: int

    @property
    def coverage(self) -> float | None:
        return self.covered / self.held_back if self.held_back else None


def sim_figures(h: SimHistory) -> tuple[SimFigures, list[svg.Interval], list[Scored]]:
    """One SIM's figures, its chart's points (x: campaign hours from its first run) and
    its held-back TATs."""
    scored = score_sequentially(h.observations, min_tats=BEFORE_HELD_BACK)
    ev = evaluate(scored)
    t0 = h.runs[0].time_s if h.runs else 0.0
    points = [_interval((s.time_s - t0) / 3600, s.prediction, s.measured_bps)
              for s in scored]
    for c in h.cheap:
        model = fit([o for o in h.observations if o.time_s < c.time_s])
        if model is not None and c.signals.usable:
            points.append(_interval((c.time_s - t0) / 3600, model.predict(c.signals), None))
    full = [r for r in h.runs if r.tat]
    mean_full = statistics.fmean(r.bytes for r in full) if full else 0.0
    fig = SimFigures(
        sim=h.sim, tats=len(h.observations), held_back=ev.held_back, covered=ev.covered,
        median_abs_error_bps=ev.median_abs_error_bps,
        median_relative_error=ev.median_relative_error, full_sessions=len(full),
        cheap_sessions=len(h.runs) - len(full), bytes_spent=sum(r.bytes for r in h.runs),
        bytes_all_tat=round(mean_full * len(h.runs)))
    return fig, sorted(points, key=lambda p: p.x), scored


def _interval(x: float, p: Prediction, measured: float | None) -> svg.Interval:
    mbit = 1e6
    return svg.Interval(x, p.tat_bps / mbit, p.low_bps / mbit, p.high_bps / mbit,
                        None if measured is None else measured / mbit)


def _pct(x: float | None) -> str:
    return "" if x is None or x != x else f"{x * 100:.1f}"


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def _row(name: str, *, covered: int, held: int, mae: float, rel: float, full: int,
         cheap: int, spent: int, all_tat: int) -> tuple[str, ...]:
    return (name, str(held), f"{covered} of {held}", _pct(covered / held if held else None),
            "" if mae != mae else f"{mae / 1e6:.2f}", _pct(rel), str(full), str(cheap),
            _mb(spent), _mb(all_tat), _pct(spent / all_tat if all_tat else None))


def abw_proxy_page(hists: Mapping[SimId, SimHistory], *, filters: Filters) -> Page:
    intro = (
        "The calibrated TAT proxy (docs/abw-proxy.md) predicts each SIM's TCP achievable "
        "throughput (TAT) from its cheap signals (the ABw estimates around it and their "
        f"range, RTT, RSRP and SINR) with a {COVERAGE:.0%} prediction interval. Here every "
        f"TAT from the SIM's {BEFORE_HELD_BACK + 1}th on is held back: predicted by the model "
        "fitted on the TATs before it only. Coverage is the share of those TATs inside "
        f"their interval: {COVERAGE:.0%} is calibrated. Bytes: what the campaign's tools "
        "moved (ABw probes and TAT transfers), against its windows all run with a TAT at "
        "this SIM's mean full-session bytes.")
    if not filters.campaign:
        return Page(SLUG, TITLE, intro,
                    empty="Choose a campaign of ABw-TAT-ABw sessions (in proxy mode or not).")
    if not any(h.observations or h.cheap for h in hists.values()):
        return Page(SLUG, TITLE, intro, empty=no_data("ABw-TAT-ABw", filters))
    rows: list[tuple[str, ...]] = []
    charts: list[str] = []
    pooled = dict(covered=0, held=0, full=0, cheap=0, spent=0, all_tat=0)
    errors: list[float] = []
    rel: list[float] = []
    for sim in sorted(hists, key=lambda s: (s.node, s.operator)):
        f, points, scored = sim_figures(hists[sim])
        rows.append(_row(sim.label(), covered=f.covered, held=f.held_back,
                         mae=f.median_abs_error_bps, rel=f.median_relative_error,
                         full=f.full_sessions, cheap=f.cheap_sessions, spent=f.bytes_spent,
                         all_tat=f.bytes_all_tat))
        for key, v in (("covered", f.covered), ("held", f.held_back),
                       ("full", f.full_sessions), ("cheap", f.cheap_sessions),
                       ("spent", f.bytes_spent), ("all_tat", f.bytes_all_tat)):
            pooled[key] += v
        errors += [abs(s.prediction.tat_bps - s.measured_bps) for s in scored]
        rel += [abs(s.prediction.tat_bps - s.measured_bps) / s.measured_bps for s in scored]
        if points:
            charts.append(svg.interval_chart(
                chart_id=f"abw-proxy-{slug(sim.label())}", title=f"{sim.label()}: TAT",
                desc=(f"Predicted TAT with its {COVERAGE:.0%} interval, and the TAT "
                      "measured there (hollow: outside the interval), by campaign hour."),
                intervals=points, x_label="Campaign hours from the first session",
                y_label="TAT (Mbit/s)"))
    rows.append(_row("All SIMs", covered=pooled["covered"], held=pooled["held"],
                     mae=statistics.median(errors) if errors else float("nan"),
                     rel=statistics.median(rel) if rel else float("nan"),
                     full=pooled["full"], cheap=pooled["cheap"], spent=pooled["spent"],
                     all_tat=pooled["all_tat"]))
    return Page(SLUG, TITLE, intro, sections=(
        Section(heading="Held-back TATs and bytes", tables=(Table(
            caption="Per SIM: the proxy's coverage, its error and the bytes spent",
            headers=("SIM", "Held-back TATs", "Inside the interval",
                     f"Coverage of the {COVERAGE:.0%} interval (%)",
                     "Median absolute error (Mbit/s)", "Median relative error (%)",
                     "Sessions with TAT", "ABw-only sessions", "Bytes spent (MB)",
                     "All-TAT campaign (MB)", "Spent / all-TAT (%)"),
            rows=tuple(rows), css_class="abw-proxy"),)),
        Section(heading="Predicted against measured", charts=tuple(charts)),
    ))


# --- the page's query ------------------------------------------------------------------


def proxy_histories(ts: TimeSeriesQuery, filters: Filters, *,
                    readable: Readable) -> dict[SimId, SimHistory]:
    """The chosen campaign's SIM histories (the planner's, :mod:`.rows`), of the runs
    the caller may read, narrowed to the operator and node filters; none without a
    campaign (a proxy is per campaign)."""
    if not filters.campaign:
        return {}
    tats, abws, modems = campaign_points(ts, filters.campaign)

    def keep(sim: SimId, run: str) -> bool:
        return (readable.run(run) and filters.operator in (None, sim.operator)
                and filters.node in (None, sim.node))

    return histories([t for t in tats if keep(t.sim, t.run)],
                     [a for a in abws if keep(a.sim, a.run)],
                     [m for m in modems if keep(m.sim, m.run)])
