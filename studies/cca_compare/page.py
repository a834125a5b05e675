"""The CUBIC vs BBR page (``/pages/cca-compare``), in the form of Li et al.'s comparison:
per operator, direction and kind of transfer (bulk, 1 MB download), the distributions
of throughput, self-inflicted delay, retransmission % and duplicate-ACK % under each
congestion control; throughput by SINR bin per control; the figures of transfers with
and without a handover; and a Mann-Whitney U test of each difference.

Pure: rows in, a page model out (the rows come from :func:`.queries.cca_transfers`, the
``cca_compare`` points); the statistics are :mod:`studies.cca_compare.analysis`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.study import (
    Filters,
    Page,
    Readable,
    Section,
    Table,
    TimeSeriesQuery,
    Where,
    no_data,
    result_rows,
    select_points,
    slug,
    svg,
    text,
    where_of,
)
from studies.cca_compare.analysis import (
    ALPHA,
    METRICS,
    MIN_EACH,
    TransferSample,
    differences,
    handover_class,
    sinr_bin,
    sinr_label,
    values,
)
from studies.cca_compare.points import CCA_COMPARE

SLUG = "cca-compare"
TITLE = "CUBIC vs BBR"
KIND_LABEL = {"bulk": "bulk transfers", "download": "downloads"}


@dataclass(frozen=True)
class CcaRow:
    """One transfer of a cca-compare session (a ``cca_compare`` point)."""

    time_ns: int
    where: Where
    run: str
    direction: str
    cca: str
    kind: str
    status: str
    throughput_bps: float | None
    self_delay_s: float | None
    retrans_pct: float | None
    dupack_pct: float | None
    sinr_db: float | None
    handovers: int | None


def _sample(r: CcaRow) -> TransferSample | None:
    if r.status != "ok" or r.throughput_bps is None:
        return None
    return TransferSample(cca=r.cca, kind=r.kind, throughput_bps=r.throughput_bps,
                          self_delay_s=r.self_delay_s, retrans_pct=r.retrans_pct or 0.0,
                          dupack_pct=r.dupack_pct or 0.0, sinr_db=r.sinr_db,
                          handovers=r.handovers)


def _median(xs: Sequence[float]) -> str:
    box = svg.box_stats(xs)
    return "" if box is None else f"{box.median:.3g}"


def _metric_cells(samples: Sequence[TransferSample]) -> tuple[str, ...]:
    return tuple(_median(values(samples, metric)) for _name, metric, _unit in METRICS)


METRIC_HEADERS = tuple(f"Median {name} ({unit})" for name, _m, unit in METRICS)


def _boxes(label: str, direction: str, kind: str,
           by_cca: dict[str, list[TransferSample]]) -> list[str]:
    """One chart per metric: a box per control."""
    ccas = sorted(by_cca)
    charts = []
    for i, (name, metric, unit) in enumerate(METRICS):
        charts.append(svg.box_plot(
            chart_id=f"cca-{slug(label)}-{direction}-{kind}-{slug(name)}",
            title=f"{label} ({direction}, {KIND_LABEL.get(kind, kind)}): {name}",
            desc=f"Distribution of {name} per congestion control.",
            categories=ccas, boxes=[svg.box_stats(values(by_cca[c], metric)) for c in ccas],
            x_label="Congestion control", y_label=f"{name} ({unit})", colour_index=i,
            unit=unit))
    return charts


def cca_page(rows: Sequence[CcaRow], *, filters: Filters) -> Page:
    intro = ("CUBIC and BBR alternated in one session on the same link (the order "
             "balanced across repetitions), each set per connection on the sending side; "
             "throughput (unique bytes from the SYN to the last byte ACKed), "
             "self-inflicted delay (each segment's RTT above the connection's minimum), "
             "retransmission and duplicate-ACK percentages from the capture at the "
             "sender, and the modem's SINR and handovers during each transfer (after Li "
             "et al.). Bulk transfers and downloads are shown apart.")
    if not rows:
        return Page(SLUG, TITLE, intro, empty=no_data("cca-compare", filters))
    groups: dict[tuple[str, str, str], list[CcaRow]] = defaultdict(list)
    for r in rows:
        groups[(r.where.operator_label, r.direction, r.kind)].append(r)
    charts: list[str] = []
    summary, by_sinr, by_handover, tests = [], [], [], []
    for (label, direction, kind), rs in sorted(groups.items()):
        status = Counter((r.cca, r.status) for r in rs)
        samples = [s for r in rs if (s := _sample(r)) is not None]
        by_cca: dict[str, list[TransferSample]] = defaultdict(list)
        for s in samples:
            by_cca[s.cca].append(s)
        what = (label, direction, KIND_LABEL.get(kind, kind))
        for cca in sorted({r.cca for r in rs}):
            summary.append((*what, cca, str(status[(cca, "ok")]),
                            str(sum(n for (c, st), n in status.items()
                                    if c == cca and st != "ok")),
                            *_metric_cells(by_cca.get(cca, []))))
        charts.extend(_boxes(label, direction, kind, by_cca))
        bins: dict[tuple[float | None, str], list[TransferSample]] = defaultdict(list)
        classes: dict[tuple[str, str], list[TransferSample]] = defaultdict(list)
        for s in samples:
            bins[(sinr_bin(s.sinr_db), s.cca)].append(s)
            classes[(handover_class(s.handovers), s.cca)].append(s)
        for (low, cca), ss in sorted(bins.items(), key=lambda kv: (
                kv[0][0] is None, kv[0][0] or 0.0, kv[0][1])):
            rates = [s.throughput_bps / 1e6 for s in ss]
            by_sinr.append((*what, sinr_label(low), cca, str(len(ss)), _median(rates)))
        for (cls, cca), ss in sorted(classes.items()):
            by_handover.append((*what, cls, cca, str(len(ss)), *_metric_cells(ss)))
        if len(by_cca) == 2:
            a, b = sorted(by_cca)
            for d in differences(by_cca[a], by_cca[b]):
                verdict = ("yes" if d.significant else "no" if d.significant is False
                           else "too few transfers" if min(d.n_a, d.n_b) < MIN_EACH
                           else "no test: every value the same")
                tests.append((*what, d.metric, f"{a} vs {b}", f"{d.n_a} / {d.n_b}",
                              "" if d.median_a is None else f"{d.median_a:.3g} {d.unit}",
                              "" if d.median_b is None else f"{d.median_b:.3g} {d.unit}",
                              "" if d.u is None else f"{d.u:g}",
                              "" if d.p_value is None else f"{d.p_value:.3f}", verdict))
    place = ("Operator", "Direction", "Transfers of")
    return Page(SLUG, TITLE, intro, sections=(
        Section(heading="Per congestion control", charts=tuple(charts), tables=(Table(
            caption="Transfers per congestion control",
            headers=(*place, "Congestion control", "Measured", "Failed or uncaptured",
                     *METRIC_HEADERS),
            rows=tuple(summary), css_class="cca-summary"),)),
        Section(heading="Throughput by SINR", text=(
            "Median throughput per SINR bin (the mean of the modem's samples during the "
            "transfer, or the last before it) and congestion control."), tables=(Table(
                caption="Throughput by SINR bin per congestion control",
                headers=(*place, "SINR", "Congestion control", "Transfers",
                         "Median throughput (Mbit/s)"),
                rows=tuple(by_sinr), css_class="cca-sinr"),)),
        Section(heading="With and without a handover", text=(
            "A transfer is with a handover when the modem's handover count moved between "
            "the last sample before it and the first after it (so a handover up to one "
            "sampling interval either side counts); unknown without a sample on both "
            "sides."), tables=(Table(
                caption="Transfers with and without a handover",
                headers=(*place, "Handover", "Congestion control", "Transfers",
                         *METRIC_HEADERS),
                rows=tuple(by_handover), css_class="cca-handover"),)),
        Section(heading="Significance", text=(
            f"Mann-Whitney U, two-sided, at {ALPHA:g}, of each metric's distribution "
            "under one control against the other's."), tables=(Table(
                caption="Differences between the congestion controls",
                headers=(*place, "Metric", "Compared", "Transfers", "Median (first)",
                         "Median (second)", "U", "p-value", "Different?"),
                rows=tuple(tests), css_class="significance"),)),
    ))


# --- the page's query ------------------------------------------------------------------


def cca_query(filters: Filters) -> str:
    return select_points(CCA_COMPARE, ("status", "throughput_bps", "self_delay_s",
                                       "retrans_pct", "dupack_pct", "sinr_db", "handovers",
                                       "cca", "kind"), filters)


def _opt(row: dict[str, Any], key: str) -> float | None:
    v = row.get(key)
    return None if v is None else float(v)


def cca_transfers(ts: TimeSeriesQuery, filters: Filters, *,
                  readable: Readable) -> list[CcaRow]:
    """Every transfer of the cca-compare runs the caller may read, failed ones too (the
    page counts them)."""
    out = []
    for row in result_rows(ts.query(cca_query(filters))):
        if row.get("status") is None or not readable.run(text(row, "run")):
            continue
        handovers = row.get("handovers")
        out.append(CcaRow(
            time_ns=int(row["time"]), where=where_of(row), run=text(row, "run"),
            direction=text(row, "direction"), cca=text(row, "cca"), kind=text(row, "kind"),
            status=text(row, "status"), throughput_bps=_opt(row, "throughput_bps"),
            self_delay_s=_opt(row, "self_delay_s"), retrans_pct=_opt(row, "retrans_pct"),
            dupack_pct=_opt(row, "dupack_pct"), sinr_db=_opt(row, "sinr_db"),
            handovers=None if handovers is None else int(handovers)))
    return out
