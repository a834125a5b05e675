#!/usr/bin/env python3
"""Grafana provisioning for the testbed, generated from code.

    python dashboards/generate.py            # rewrite dashboards/provisioning/
    python dashboards/generate.py --out DIR  # write elsewhere (the tests compare)

Writes two datasources (InfluxDB over the v1 API with InfluxQL, which 1.x, 2.x and 3.x
serve, see docs/timeseries.md; and the Prometheus that evaluates the alert rules), a
dashboards provider, and one JSON model per dashboard, built with the Grafana
Foundation SDK's builders so that they are Grafana's schema, not hand-written JSON.
Mount ``provisioning/`` as ``/etc/grafana/provisioning`` and set
``TESTBED_INFLUXDB_URL``, ``TESTBED_INFLUXDB_DB``, ``TESTBED_INFLUXDB_READER_USER``,
``TESTBED_INFLUXDB_READER_PASSWORD`` (InfluxDB's read-only user: docs/security.md) and
``TESTBED_PROMETHEUS_URL`` in Grafana's environment (provisioning expands them).

Every query is InfluxQL against the measurements and fields of
orchestrator/timeseries/schema.py, bounded by ``$timeFilter`` and narrowed by the
template variables ``campaign``, ``operator`` (MCC-MNC) and ``node`` (multi-value,
"All" matches every value, including points without the tag). Hour-of-day panels use
Grafana's ``formatTime`` transformation (Grafana >= 10.2) in the dashboard's time zone,
and day buckets InfluxQL's ``tz()`` with the ``tz`` variable: set both to the nodes'
zone. What Grafana cannot compute (the time-of-day significance test, the RD CDF) is
approximated here and computed exactly by the orchestrator's own pages, linked from
every dashboard (``pages_url`` variable).

The Fleet alerts dashboard reads Prometheus: ``ALERTS`` and the orchestrator's
``testbed_*`` series (orchestrator/metrics/collector.py), the ones the alert rules in
deploy/prometheus/rules read, with the rules' thresholds drawn in.

Grafana cannot run on the machines that build this project, so the output is checked
structurally (tests/unit/test_dashboards.py: it round-trips through the SDK's dashboard
model), not rendered.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import dashboard as sdk
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.cog import runtime as cogruntime
from grafana_foundation_sdk.cog import variants as cogvariants
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as common_model
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models import prometheus as prom_model

HERE = Path(__file__).resolve().parent
DATASOURCE_UID = "testbed-influxdb"
PROMETHEUS_UID = "testbed-prometheus"
DS = model.DataSourceRef(type_val="influxdb", uid=DATASOURCE_UID)
PROM = model.DataSourceRef(type_val="prometheus", uid=PROMETHEUS_UID)
Json = dict[str, Any]
Panel = sdk.Panel | timeseries.Panel | stat.Panel | table.Panel
TYPED_PANELS: dict[str, type[timeseries.Panel | stat.Panel | table.Panel]] = {
    "timeseries": timeseries.Panel, "stat": stat.Panel, "table": table.Panel}
Variable = cogbuilder.Builder[model.VariableModel]
Query = cogbuilder.Builder[cogvariants.Dataquery]

# --- template variables -----------------------------------------------------------------

#: The usual filter, as regex matches so the multi-value and "All" selections work.
CAMPAIGN = '"campaign" =~ /^$campaign$/'
OPERATOR = '"operator" =~ /^$operator$/'
NODE = '"node" =~ /^$node$/'
RUN_FILTER = f"{CAMPAIGN} AND {OPERATOR} AND {NODE}"  # the filters of a run's points
SITE_FILTER = f"{OPERATOR} AND {NODE}"  # metadata is sampled outside campaigns too


def query_var(name: str, label: str, query: str, *, multi: bool = True,
              datasource: model.DataSourceRef = DS) -> Variable:
    var = (sdk.QueryVariable(name).label(label).datasource(datasource).query(query)
           .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
           .sort(model.VariableSort.ALPHABETICAL_ASC).multi(multi).include_all(multi)
           .allow_custom_value(False).hide(model.VariableHide.DONT_HIDE))
    return var.all_value(".*") if multi else var


def campaign_var(measurement: str = "tat_summary") -> Variable:
    return query_var("campaign", "Campaign",
                     f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "campaign"')


def operator_var(measurement: str = "tat_summary") -> Variable:
    return query_var("operator", "Operator (MCC-MNC)",
                     f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "operator"')


def node_var(measurement: str = "tat_summary") -> Variable:
    return query_var("node", "Node",
                     f'SHOW TAG VALUES FROM "{measurement}" WITH KEY = "node" '
                     "WHERE \"operator\" =~ /^$operator$/")


def method_var() -> Variable:
    return query_var("method", "ABw tool", 'SHOW TAG VALUES FROM "abw" WITH KEY = "method"')


def custom_var(name: str, label: str, options: Sequence[str], *, doc: str) -> Variable:
    return (sdk.CustomVariable(name).label(label).description(doc).values(",".join(options))
            .multi(False).allow_custom_value(False).hide(model.VariableHide.DONT_HIDE)
            .current(model.VariableOption(text=options[0], value=options[0], selected=True))
            .options([model.VariableOption(text=o, value=o, selected=i == 0)
                      for i, o in enumerate(options)]))


def textbox_var(name: str, label: str, default: str, *, doc: str) -> Variable:
    return (sdk.TextBoxVariable(name).label(label).description(doc).default_value(default)
            .hide(model.VariableHide.DONT_HIDE)
            .current(model.VariableOption(text=default, value=default)))


def tz_var() -> Variable:
    return textbox_var("tz", "Time zone of day buckets", "UTC",
                       doc="IANA zone for InfluxQL tz(): days start at the nodes' local "
                           "midnight (e.g. Europe/Stockholm)")


def pages_var() -> Variable:
    return textbox_var("pages_url", "Orchestrator URL", "http://localhost:8080",
                       doc="Where the orchestrator's own pages are served (exact "
                           "time-of-day test, RD CDF)")


def bucket_var() -> Variable:
    return custom_var("session", "Session spacing", ["1h", "2h", "1d"],
                      doc="Campaign recurrence: ABw and TAT of one session fall in one bucket")


# --- queries --------------------------------------------------------------------------


class InfluxQL(cogbuilder.Builder[cogvariants.Dataquery]):
    """A raw InfluxQL target. The SDK ships no InfluxDB query model (its Python package
    has builders for Prometheus, Loki, Elasticsearch and others, not InfluxDB), so this
    builds the target the InfluxDB datasource reads, as the SDK's own bag for query
    types it has no model of (``UnknownDataquery``), which its dashboard model
    round-trips unchanged."""

    def __init__(self, query: str, ref: str = "A", *, table: bool = False,
                 alias: str = "") -> None:
        self._data: Json = {"refId": ref, "datasource": DS.to_json(), "rawQuery": True,
                            "query": query,
                            "resultFormat": "table" if table else "time_series"}
        if alias:
            self._data["alias"] = alias

    def build(self) -> cogvariants.Dataquery:
        return cogruntime.UnknownDataquery(dict(self._data))


def target(query: str, ref: str = "A", *, table: bool = False, alias: str = "") -> Query:
    return InfluxQL(query, ref, table=table, alias=alias)


def promql(expr: str, ref: str = "A", *, legend: str = "", instant: bool = False,
           table: bool = False) -> Query:
    """A Prometheus target: a range query drawn over time, or an instant one (the latest
    value; as a table with ``table``)."""
    q = prometheus.Dataquery().expr(expr).ref_id(ref).datasource(PROM)
    if legend:
        q = q.legend_format(legend)
    if table:
        return q.instant().format(prom_model.PromQueryFormat.TABLE)
    return q.instant() if instant else q.range()


# --- panels ---------------------------------------------------------------------------


def panel(title: str, kind: str, targets: Sequence[Query], *, unit: str = "",
          description: str = "", width: int = 12, height: int = 8,
          options: Json | None = None, overrides: Sequence[tuple[str, Sequence[Json]]] = (),
          transformations: Sequence[Json] = (), repeat: str = "", interval: str = "",
          limits: tuple[float, float] | None = None,
          steps: sdk.ThresholdsConfig | None = None, legend_calcs: Sequence[str] = (),
          datasource: model.DataSourceRef = DS) -> Panel:
    """One panel of ``kind`` (its Grafana plugin id). Time series, stat and table panels
    are the SDK's typed builders (a table legend with ``legend_calcs``); the other
    plugins' options go in as Grafana stores them, through the SDK's generic builder."""
    p: Panel
    if kind in TYPED_PANELS:
        if options:
            raise ValueError(f"{title}: set a {kind} panel's options through the SDK's "
                             f"{kind} builder, not as a dict")
        p = TYPED_PANELS[kind]()
    else:
        p = sdk.Panel().type(kind).options(options or {})
    p = (p.title(title).description(description).datasource(datasource)
         .targets(list(targets)).span(width).height(height))
    if legend_calcs:
        if not isinstance(p, timeseries.Panel):
            raise ValueError(f"{title}: legend_calcs is a time series option, not {kind}")
        p = p.legend(common.VizLegendOptions().display_mode(common_model.LegendDisplayMode.TABLE)
                     .placement(common_model.LegendPlacement.BOTTOM).show_legend(True)
                     .calcs(list(legend_calcs)))
    if unit:
        p = p.unit(unit)
    for name, props in overrides:
        p = p.override_by_name(name, [model.DynamicConfigValue(id_val=c["id"],
                                                               value=c["value"])
                                      for c in props])
    if transformations:
        p = p.transformations([model.DataTransformerConfig(id_val=t["id"],
                                                           options=t["options"])
                               for t in transformations])
    if repeat:
        p = p.repeat(repeat).repeat_direction("h").max_per_row(2)
    if interval:
        p = p.interval(interval)
    if limits:
        p = p.min(limits[0]).max(limits[1])
    if steps:
        p = p.thresholds(steps)
        if isinstance(p, timeseries.Panel):  # draw the thresholds (an alert's line)
            p = p.thresholds_style(common.GraphThresholdsStyleConfig().mode(
                common_model.GraphThresholdsStyleMode.DASHED))
    return p


def band_overrides(upper: str, lower: str) -> list[tuple[str, list[Json]]]:
    """Fill between two series (a confidence band), and hide them from the legend."""
    hidden = {"id": "custom.hideFrom", "value": {"legend": True, "tooltip": False,
                                                  "viz": False}}
    return [
        (upper, [{"id": "custom.fillBelowTo", "value": lower},
                 {"id": "custom.lineWidth", "value": 0},
                 {"id": "custom.fillOpacity", "value": 25}, hidden]),
        (lower, [{"id": "custom.lineWidth", "value": 0}, hidden]),
    ]


def thresholds(*steps: tuple[float | None, str]) -> sdk.ThresholdsConfig:
    return sdk.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(
        [model.Threshold(value=v, color=c) for v, c in steps])


def join_by_time(mode: str = "inner") -> Json:
    return {"id": "joinByField", "options": {"byField": "Time", "mode": mode}}


def ratio(left: str, right: str, alias: str) -> Json:
    return {"id": "calculateField", "options": {
        "mode": "binary", "alias": alias, "replaceFields": False,
        "binary": {"left": left, "operator": "/", "right": right}}}


def hour_of_day(value: str) -> list[Json]:
    """Rows to one row per hour of day (dashboard time zone): min, mean, max, count."""
    return [
        {"id": "formatTime", "options": {"timeField": "Time", "outputFormat": "HH",
                                         "useTimezone": True}},
        {"id": "groupBy", "options": {"fields": {
            "Time": {"operation": "groupby", "aggregations": []},
            value: {"operation": "aggregate",
                    "aggregations": ["min", "mean", "max", "count"]}}}},
        {"id": "sortBy", "options": {"sort": [{"field": "Time", "desc": False}]}},
    ]


# --- dashboards -----------------------------------------------------------------------


def dashboard(uid: str, title: str, description: str, panels: Sequence[Panel],
              variables: Sequence[Variable], *, time_from: str = "now-9d") -> Json:
    """The dashboard as Grafana's JSON model, panels numbered and laid out left to right
    in rows of 24 columns."""
    names = {v.build().name for v in variables}
    pages = "${pages_url}/" + ("?campaign=${campaign}" if "campaign" in names else "")
    d = (sdk.Dashboard(title).uid(uid).description(description).tags(["testbed", "mbb"])
         .timezone("browser").readonly().version(1).refresh("")
         .time(time_from, "now").tooltip(model.DashboardCursorSync.CROSSHAIR)
         .variables([*variables, pages_var()])
         .links([
             sdk.DashboardLink("Testbed dashboards").type(model.DashboardLinkType.DASHBOARDS)
             .tags(["testbed"]).as_dropdown(True).include_vars(True).keep_time(True),
             sdk.DashboardLink("Orchestrator pages (exact statistics)")
             .type(model.DashboardLinkType.LINK).url(pages).target_blank(True)]))
    x, y, row_h = 0, 0, 0
    for pid, p in enumerate(panels, start=1):
        size = p.build().grid_pos
        assert size is not None  # span() and height() set it
        if x + size.w > 24:  # start a row when the panel does not fit (the SDK would not)
            x, y, row_h = 0, y + row_h, 0
        d = d.with_panel(p.id(pid).grid_pos(model.GridPos(h=size.h, w=size.w, x=x, y=y)))
        x, row_h = x + size.w, max(row_h, size.h)
    return to_json(d.build())


def to_json(built: model.Dashboard) -> Json:
    """The model as plain JSON (what Grafana's provisioning reads)."""
    data: Json = json.loads(json.dumps(built, cls=JSONEncoder))
    return data


def campaign_overview() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    return dashboard("testbed-campaign", "Campaign overview",
                     "What a campaign measured so far: transfers, estimates, rates, policing.",
                     [
        panel("TAT transfers", "stat", [target(
            f'SELECT count("mean_bps") FROM "tat_summary" {w}')], width=6, height=4),
        panel("ABw estimates", "stat", [target(
            f'SELECT count("estimate_bps") FROM "abw" {w}')], width=6, height=4),
        panel("Mean TAT rate", "stat", [target(
            f'SELECT mean("mean_bps") FROM "tat_summary" {w}')], unit="bps", width=6,
            height=4),
        panel("Bytes sent (TAT + ABw)", "stat", [
            target(f'SELECT sum("sender_bytes") FROM "tat_summary" {w}', "A", alias="TAT"),
            target(f'SELECT sum("bytes") FROM "abw" {w}', "B", alias="ABw")],
            unit="decbytes", width=6, height=4),
        panel("TAT mean rate per operator", "timeseries", [target(
            f'SELECT mean("mean_bps") FROM "tat_summary" {w} '
            'GROUP BY time($__interval), "operator_name" fill(none)',
            alias="$tag_operator_name")], unit="bps"),
        panel("ABw estimate per tool and operator", "timeseries", [target(
            f'SELECT mean("estimate_bps") FROM "abw" {w} '
            'GROUP BY time($__interval), "method", "operator_name" fill(none)',
            alias="$tag_operator_name $tag_method")], unit="bps"),
        panel("Transfers per node and operator", "table", [target(
            f'SELECT count("mean_bps") AS "transfers", mean("mean_bps") AS "mean rate", '
            f'sum("sender_bytes") AS "bytes" FROM "tat_summary" {w} '
            'GROUP BY "node", "operator_name"', table=True)], width=24,
            transformations=[{"id": "merge", "options": {}}]),
        panel("Policing profile of each transfer", "table", [target(
            f'SELECT "policing", "stable_bps", "time_to_90_s", "peak_bps", "drop_s" '
            f'FROM "tat_summary" {w} GROUP BY "node", "operator_name"', table=True)],
            width=24, description="flat, ramp (LTE: ~10 s before the stable rate) or "
            "peak_then_drop (3G token bucket), from the 100 ms bins"),
    ], [campaign_var(), operator_var(), node_var()])


def abw_vs_tat() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    tat = target(f'SELECT mean("mean_bps") AS "tat_bps" FROM "tat_summary" {w} '
                 "GROUP BY time($session) fill(none)", "A")
    abw = target(f'SELECT mean("estimate_bps") AS "abw_bps" FROM "abw" {w} '
                 'AND "method" =~ /^$method$/ GROUP BY time($session) fill(none)', "B")
    return dashboard(
        "testbed-abw-vs-tat", "ABw vs TAT",
        "ABw estimates against TAT per operator (one panel each; pick a country's "
        "operators). ABw and TAT of one session share a bucket of the session spacing. "
        "RD = |TAT - ABw| / TAT is 1 - ABw/TAT in absolute value: the histogram shows "
        "ABw/TAT; the orchestrator's ABw vs TAT page draws the exact pairing and RD CDF.",
        [
            panel("ABw estimate against TAT: $operator", "xychart", [tat, abw],
                  unit="bps", transformations=[join_by_time()],
                  options={"seriesMapping": "auto", "dims": {"x": "tat_bps"},
                           "series": [{"x": "tat_bps", "y": "abw_bps"}]},
                  repeat="operator"),
            panel("ABw / TAT per session: $operator", "histogram", [tat, abw],
                  transformations=[join_by_time(), ratio("abw_bps", "tat_bps", "abw_over_tat"),
                                   {"id": "organize", "options": {"excludeByName": {
                                       "tat_bps": True, "abw_bps": True}}}],
                  options={"bucketSize": 0.05, "combine": False},
                  description="1 = exact; RD = |1 - ABw/TAT|", repeat="operator"),
            panel("Mean ABw and TAT per session", "timeseries", [
                target(f'SELECT mean("mean_bps") FROM "tat_summary" {w} '
                       'GROUP BY time($session), "operator_name" fill(none)', "A",
                       alias="TAT $tag_operator_name"),
                target(f'SELECT mean("estimate_bps") FROM "abw" {w} AND '
                       '"method" =~ /^$method$/ GROUP BY time($session), "operator_name", '
                       '"method" fill(none)', "B",
                       alias="ABw $tag_method $tag_operator_name")], unit="bps", width=24),
        ], [campaign_var(), operator_var(), node_var(), method_var(), bucket_var()])


def volume() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    tat = target(f'SELECT sum("sender_bytes") AS "tat_bytes" FROM "tat_summary" {w} '
                 "GROUP BY time($session) fill(none)", "A")
    abw = target(f'SELECT sum("bytes") AS "abw_bytes" FROM "abw" {w} '
                 "GROUP BY time($session) fill(none)", "B")
    return dashboard(
        "testbed-volume", "Data volume per session",
        "What each session cost: bytes TAT and the ABw tools sent, and their ratio (the "
        "seeds saw TAT move 8.5x to 14.7x more).", [
            panel("Bytes per session", "barchart", [tat, abw], unit="decbytes",
                  transformations=[join_by_time("outer")], options={"xField": "Time"}),
            panel("TAT/ABw volume ratio per session", "timeseries", [tat, abw],
                  transformations=[join_by_time(), ratio("tat_bytes", "abw_bytes", "ratio"),
                                   {"id": "organize", "options": {"excludeByName": {
                                       "tat_bytes": True, "abw_bytes": True}}}],
                  unit="x"),
            panel("ABw bytes per estimate, by tool", "timeseries", [target(
                f'SELECT mean("bytes") FROM "abw" {w} GROUP BY time($__interval), "method" '
                "fill(none)", alias="$tag_method")], unit="decbytes"),
            panel("TAT bytes per transfer, by operator", "timeseries", [target(
                f'SELECT mean("sender_bytes") FROM "tat_summary" {w} '
                'GROUP BY time($__interval), "operator_name" fill(none)',
                alias="$tag_operator_name")], unit="decbytes"),
        ], [campaign_var(), operator_var(), node_var(), bucket_var()])


def abw_latency() -> Json:
    w = f'WHERE {RUN_FILTER} AND "method" =~ /^$method$/ AND $timeFilter'
    return dashboard(
        "testbed-abw-latency", "ABw measurement latency",
        "Time one ABw estimate took (the seeds: 0.8-1.6 s mean).", [
            panel("Latency per estimate", "timeseries", [target(
                f'SELECT mean("latency_s") FROM "abw" {w} '
                'GROUP BY time($__interval), "method" fill(none)', alias="$tag_method")],
                unit="s"),
            panel("Latency distribution", "histogram", [target(
                f'SELECT "latency_s" FROM "abw" {w}')], unit="s",
                options={"bucketSize": 0.1}),
            panel("Latency by tool and operator", "table", [target(
                f'SELECT mean("latency_s") AS "mean", stddev("latency_s") AS "sd", '
                f'count("latency_s") AS "estimates" FROM "abw" {w} '
                'GROUP BY "method", "operator_name"', table=True)], unit="s", width=24),
        ], [campaign_var("abw"), operator_var("abw"), node_var("abw"), method_var()])


def tat_bins() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    return dashboard(
        "testbed-tat-bins", "TAT in 100 ms bins",
        "Receiver-side rate in 100 ms bins: the operator's policing shows as a ramp "
        "(LTE) or a peak then a drop (3G). Zoomed out, each point is the mean of the bins "
        "in the interval with its 95 % confidence band (mean ± 1.96 sd/√n).", [
            panel("TAT rate with 95 % confidence band", "timeseries", [target(
                'SELECT mean("bps") AS "mean", '
                'mean("bps") + 1.96 * stddev("bps") / sqrt(count("bps")) AS "upper", '
                'mean("bps") - 1.96 * stddev("bps") / sqrt(count("bps")) AS "lower" '
                f'FROM "tat" {w} GROUP BY time($__interval) fill(none)')],
                unit="bps", width=24, height=10,
                overrides=band_overrides("upper", "lower"), interval="100ms"),
            panel("TAT rate per node and operator", "timeseries", [target(
                f'SELECT mean("bps") FROM "tat" {w} '
                'GROUP BY time($__interval), "node", "operator_name" fill(none)',
                alias="$tag_node $tag_operator_name")], unit="bps", width=24,
                interval="100ms"),
        ], [campaign_var("tat"), operator_var("tat"), node_var("tat")], time_from="now-6h")


def hourly() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    return dashboard(
        "testbed-hourly", "Hourly behaviour",
        "TAT rate by hour of day per operator (the dashboard's time zone: set it to the "
        "nodes'). Grafana has no box plot: min, mean and max per hour; the orchestrator's "
        "hourly page draws box plots in each node's local time.", [
            panel("TAT rate by hour of day: $operator", "barchart", [target(
                f'SELECT "mean_bps" FROM "tat_summary" {w}', table=True)],
                unit="bps", transformations=hour_of_day("mean_bps"),
                options={"xField": "Time", "showValue": "never"},
                repeat="operator"),
            panel("Hourly mean TAT rate per operator", "timeseries", [target(
                f'SELECT mean("mean_bps") FROM "tat_summary" {w} '
                'GROUP BY time(1h), "operator_name" fill(none)',
                alias="$tag_operator_name")], unit="bps", width=24),
        ], [campaign_var(), operator_var(), node_var()])


def daily() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    return dashboard(
        "testbed-daily", "Daily behaviour",
        "Daily mean TAT rate per operator; days start at midnight in the tz variable's "
        "zone.", [
            panel("Daily mean TAT rate per operator", "timeseries", [target(
                f'SELECT mean("mean_bps") FROM "tat_summary" {w} '
                "GROUP BY time(1d), \"operator_name\" fill(none) tz('$tz')",
                alias="$tag_operator_name")], unit="bps", width=24,
                legend_calcs=["mean", "min", "max"]),
            panel("Transfers per day", "barchart", [target(
                f'SELECT count("mean_bps") FROM "tat_summary" {w} '
                "GROUP BY time(1d), \"operator_name\" fill(0) tz('$tz')",
                alias="$tag_operator_name")], width=12),
            panel("Daily ABw estimate per tool", "timeseries", [target(
                f'SELECT mean("estimate_bps") FROM "abw" {w} '
                "GROUP BY time(1d), \"method\", \"operator_name\" fill(none) tz('$tz')",
                alias="$tag_operator_name $tag_method")], unit="bps", width=12),
        ], [campaign_var(), operator_var(), node_var(), tz_var()], time_from="now-30d")


def time_of_day() -> Json:
    w = f"WHERE {RUN_FILTER} AND $timeFilter"
    return dashboard(
        "testbed-time-of-day", "Time-of-day effects",
        "Is there a daily cycle? Grafana cannot run the test (Lomb-Scargle periodogram and "
        "differential BIC with permutation p-values): see the orchestrator's time-of-day "
        "page (link above). Here: hourly means per node and the daily swing of them.", [
            panel("Hourly mean TAT rate per node", "timeseries", [target(
                f'SELECT mean("mean_bps") FROM "tat_summary" {w} '
                'GROUP BY time(1h), "node", "operator_name" fill(none)',
                alias="$tag_node $tag_operator_name")], unit="bps", width=24),
            panel("Daily swing of the hourly means", "timeseries", [target(
                'SELECT spread("hourly_bps") FROM (SELECT mean("mean_bps") AS "hourly_bps" '
                f'FROM "tat_summary" {w} GROUP BY time(1h), "node", "operator_name") '
                "WHERE $timeFilter GROUP BY time(1d), \"node\", \"operator_name\" fill(none) "
                "tz('$tz')", alias="$tag_node $tag_operator_name")], unit="bps",
                description="max - min of the hourly means in each day: a daily cycle "
                "keeps it high day after day"),
            panel("Flow completion and handshake RTT by hour", "timeseries", [target(
                f'SELECT mean("fct_s") AS "fct", mean("rtt_3whs_s") AS "rtt_3whs" '
                f'FROM "flows" {w} GROUP BY time(1h) fill(none)')], unit="s"),
        ], [campaign_var(), operator_var(), node_var(), tz_var()], time_from="now-9d")


def signal() -> Json:
    w = f"WHERE {SITE_FILTER} AND $timeFilter"

    def metric(field: str, title: str, unit: str) -> Panel:
        return panel(title, "timeseries", [target(
            f'SELECT mean("{field}") FROM "modem" {w} '
            'GROUP BY time($__interval), "node", "interface" fill(none)',
            alias="$tag_node $tag_interface")], unit=unit)

    return dashboard(
        "testbed-signal", "Signal metadata",
        "Modem measurements over time (as the modem reports them).", [
            metric("rsrp", "RSRP", "dBm"), metric("rsrq", "RSRQ", "dB"),
            metric("sinr", "SINR", "dB"), metric("rssi", "RSSI", "dBm"),
            panel("Cells seen per interval (handovers)", "timeseries", [target(
                f'SELECT count(distinct("cell_id")) FROM "modem" {w} '
                'GROUP BY time($__interval), "node", "interface" fill(none)',
                alias="$tag_node $tag_interface")]),
            panel("Current cell, band and RAT", "table", [target(
                f'SELECT last("cell_id") AS "cell", last("band") AS "band", '
                f'last("rat") AS "rat" FROM "modem" {w} GROUP BY "node", "interface"',
                table=True)]),
        ], [operator_var("modem"), node_var("modem")], time_from="now-24h")


def quota() -> Json:
    w = f"WHERE {SITE_FILTER} AND $timeFilter"
    return dashboard(
        "testbed-quota", "Quota use",
        "Per node and operator SIM: bytes used and reserved against the limit.", [
            panel("Used and reserved", "timeseries", [target(
                f'SELECT last("used_bytes") AS "used", last("reserved_bytes") AS "reserved", '
                f'last("limit_bytes") AS "limit" FROM "quota" {w} '
                'GROUP BY time($__interval), "node", "operator_name" fill(previous)',
                alias="$tag_node $tag_operator_name $col")], unit="decbytes", width=24),
            panel("Share of the limit used", "bargauge", [target(
                f'SELECT last("used_bytes") / last("limit_bytes") * 100 FROM "quota" {w} '
                'GROUP BY "node", "operator_name"',
                alias="$tag_node $tag_operator_name")], unit="percent",
                options={"displayMode": "gradient", "orientation": "horizontal"},
                limits=(0, 100),
                steps=thresholds((None, "green"), (80, "orange"), (95, "red"))),
            panel("Reserved share of the limit", "bargauge", [target(
                f'SELECT last("reserved_bytes") / last("limit_bytes") * 100 FROM "quota" {w} '
                'GROUP BY "node", "operator_name"',
                alias="$tag_node $tag_operator_name")], unit="percent"),
        ], [operator_var("quota"), node_var("quota")], time_from="now-30d")


def fleet() -> Json:
    w = f"WHERE {NODE} AND $timeFilter"
    return dashboard(
        "testbed-fleet", "Fleet health",
        "Node metadata: samples per hour (a gap is an outage or a node that cannot "
        "upload), CPU, temperature, memory, free disk.", [
            panel("System samples per hour", "timeseries", [target(
                f'SELECT count("cpu_pct") FROM "system" {w} '
                'GROUP BY time(1h), "node" fill(0)', alias="$tag_node")], width=24,
                legend_calcs=["min", "last"]),
            panel("Latest per node", "table", [target(
                f'SELECT last("cpu_pct") AS "cpu %", last("temperature_c") AS "temp °C", '
                f'last("mem_pct") AS "mem %", last("disk_free_bytes") AS "disk free" '
                f'FROM "system" {w} GROUP BY "node"', table=True)], width=24,
                description="the time column is the node's last sample"),
            panel("CPU", "timeseries", [target(
                f'SELECT mean("cpu_pct") FROM "system" {w} '
                'GROUP BY time($__interval), "node" fill(none)', alias="$tag_node")],
                unit="percent"),
            panel("Temperature", "timeseries", [target(
                f'SELECT max("temperature_c") FROM "system" {w} '
                'GROUP BY time($__interval), "node" fill(none)', alias="$tag_node")],
                unit="celsius"),
            panel("Free disk", "timeseries", [target(
                f'SELECT min("disk_free_bytes") FROM "system" {w} '
                'GROUP BY time($__interval), "node" fill(none)', alias="$tag_node")],
                unit="decbytes"),
            panel("Speed (mobile nodes)", "timeseries", [target(
                f'SELECT mean("speed_mps") FROM "gps" {w} '
                'GROUP BY time($__interval), "node" fill(none)', alias="$tag_node")],
                unit="velocityms"),
        ], [query_var("node", "Node", 'SHOW TAG VALUES FROM "system" WITH KEY = "node"')],
        time_from="now-24h")


def fleet_alerts() -> Json:
    """What Prometheus sees (deploy/prometheus/rules): the alerts firing and the series
    their rules read, with the rules' thresholds drawn in."""

    def prom(title: str, kind: str, targets: Sequence[Query], **kw: Any) -> Panel:
        return panel(title, kind, targets, datasource=PROM, **kw)

    quota_share = ("max by (node, interface, mcc_mnc) (testbed_quota_used_bytes) "
                   "/ max by (node, interface, mcc_mnc) (testbed_quota_limit_bytes > 0) * 100")
    return dashboard(
        "testbed-fleet-alerts", "Fleet alerts",
        "The alerts Prometheus evaluates over the orchestrator's /metrics and the series "
        "behind them; what each alert means and what to do: docs/monitoring.md. A node "
        "out of contact is normal for a while (its runs wait).", [
            prom("Firing alerts", "table", [promql(
                'max by (alertname, severity, node, interface, mcc_mnc, instance) '
                '(ALERTS{alertstate="firing", alertname=~"Testbed.*"})', table=True)],
                width=24, height=6, transformations=[{"id": "organize", "options": {
                    "excludeByName": {"Time": True, "Value": True}}}]),
            prom("Alerts firing and pending", "timeseries", [promql(
                'count by (alertname, alertstate) (ALERTS{alertname=~"Testbed.*"})',
                legend="{{alertname}} {{alertstate}}")], width=24, height=6),
            prom("Nodes by health", "timeseries", [promql(
                "sum by (health) (max by (node, health) (testbed_node_health))",
                legend="{{health}}")],
                description="online, stale (missing heartbeats), offline, maintenance"),
            prom("Heartbeat age per node", "timeseries", [promql(
                "max by (node) (testbed_node_heartbeat_age_seconds)", legend="{{node}}")],
                unit="s"),
            prom("SIM quota use (share of the cap)", "bargauge", [promql(
                quota_share, legend="{{node}}/{{interface}} {{mcc_mnc}}", instant=True)],
                unit="percent", limits=(0, 100),
                options={"displayMode": "gradient", "orientation": "horizontal"},
                steps=thresholds((None, "green"), (80, "orange"), (95, "red")),
                description="TestbedSimQuotaAt80Percent and ...At95Percent fire at "
                "80 and 95 %"),
            prom("Ingest lag", "timeseries", [
                promql("max without (instance) (testbed_ingest_oldest_pending_age_seconds)",
                       "A", legend="oldest pending run"),
            ], unit="s", steps=thresholds((None, "green"), (1800, "red")),
                description="How long the oldest archived run has waited for the "
                "time-series store; TestbedIngestLagging fires over 30 min"),
            prom("Runs waiting for the time-series store", "timeseries", [promql(
                "max without (instance) (testbed_ingest_pending_runs)",
                legend="pending runs")]),
            prom("Archive disk free", "timeseries", [promql(
                "testbed_archive_disk_free_bytes / testbed_archive_disk_size_bytes * 100",
                legend="{{instance}}")], unit="percent", limits=(0, 100),
                steps=thresholds((None, "red"), (10, "green")),
                description="TestbedArchiveDiskLow fires under 10 %"),
        ], [], time_from="now-24h")


DASHBOARDS = {
    "campaign-overview": campaign_overview, "abw-vs-tat": abw_vs_tat, "volume": volume,
    "abw-latency": abw_latency, "tat-bins": tat_bins, "hourly": hourly, "daily": daily,
    "time-of-day": time_of_day, "signal": signal, "quota": quota, "fleet": fleet,
    "fleet-alerts": fleet_alerts,
}

DATASOURCE_YAML = f"""\
# Generated by dashboards/generate.py; do not edit by hand.
# InfluxDB through its v1 API with InfluxQL: served by InfluxDB 1.x, 2.x (with a DBRP
# mapping) and 3.x. Values come from Grafana's environment. The user is the store's
# reader (READ on the database only, docs/security.md): a dashboard can never write.
apiVersion: 1
datasources:
  - name: Testbed InfluxDB
    uid: {DATASOURCE_UID}
    type: influxdb
    access: proxy
    url: ${{TESTBED_INFLUXDB_URL}}
    user: ${{TESTBED_INFLUXDB_READER_USER}}
    isDefault: true
    editable: false
    jsonData:
      dbName: ${{TESTBED_INFLUXDB_DB}}
      httpMode: POST
      version: InfluxQL
    secureJsonData:
      password: ${{TESTBED_INFLUXDB_READER_PASSWORD}}
"""

PROMETHEUS_YAML = f"""\
# Generated by dashboards/generate.py; do not edit by hand.
# The Prometheus that scrapes the orchestrator and evaluates deploy/prometheus/rules
# (the Fleet alerts dashboard). The URL comes from Grafana's environment.
apiVersion: 1
datasources:
  - name: Testbed Prometheus
    uid: {PROMETHEUS_UID}
    type: prometheus
    access: proxy
    url: ${{TESTBED_PROMETHEUS_URL}}
    isDefault: false
    editable: false
    jsonData:
      httpMethod: POST
"""

PROVIDER_YAML = """\
# Generated by dashboards/generate.py; do not edit by hand.
apiVersion: 1
providers:
  - name: testbed
    orgId: 1
    folder: MBB testbed
    type: file
    disableDeletion: true
    allowUiUpdates: false
    updateIntervalSeconds: 60
    options:
      path: /etc/grafana/provisioning/dashboards
"""


def render() -> dict[str, str]:
    """Relative path -> file text, for everything under provisioning/."""
    files = {"datasources/influxdb.yaml": DATASOURCE_YAML,
             "datasources/prometheus.yaml": PROMETHEUS_YAML,
             "dashboards/testbed.yaml": PROVIDER_YAML}
    for name, build in DASHBOARDS.items():
        files[f"dashboards/{name}.json"] = json.dumps(build(), indent=2,
                                                      ensure_ascii=False) + "\n"
    return files


def write(out: Path) -> list[Path]:
    written = []
    for rel, text in render().items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "provisioning",
                        help="provisioning folder to write (default: %(default)s)")
    args = parser.parse_args(argv)
    for path in write(args.out):
        print(path)


if __name__ == "__main__":
    main()
