"""The Grafana provisioning in dashboards/, checked structurally (Grafana cannot run here).

Every dashboard is JSON the Grafana Foundation SDK's dashboard model reads back
unchanged, every panel reads a provisioned datasource (InfluxDB or Prometheus) with at
least one query, every InfluxQL query is of the shape the datasource runs
(``SELECT ... FROM "<measurement>"`` or a subquery, bounded by ``$timeFilter``) over the
measurements, fields and tags of orchestrator/timeseries/schema.py, every PromQL query
parses (promtool) and reads ``ALERTS`` or the orchestrator's ``testbed_*`` series
(that a real scrape exports each of them: tests/integration/test_alert_rules.py), every
template variable used is defined, and the committed files are what
dashboards/generate.py writes today.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from orchestrator.timeseries.schema import FIELDS, TAGS
from tests.conftest import REPO, require_tools

PROVISIONING = REPO / "dashboards" / "provisioning"
RESULT_TAGS = {*TAGS, "direction", "method"}  # tags the results add (docs/timeseries.md)
BUILTINS = {"timeFilter", "__interval", "__interval_ms", "__range", "__from", "__to",
            "__timeFilter", "col"}
IDENT = re.compile(r'"((?:[^"\\]|\\.)*)"')
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dashboards_generate",
                                                  REPO / "dashboards" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in
            sorted((PROVISIONING / "dashboards").glob("*.json"))}


def influx_dashboards() -> dict[str, dict[str, Any]]:
    return {n: d for n, d in dashboards().items()
            if all(p["datasource"]["type"] == "influxdb" for p in d["panels"])}


def prometheus_queries() -> list[str]:
    """Every PromQL expression a panel runs (tests/integration/test_alert_rules.py checks
    that the orchestrator exports each series they read)."""
    return [t["expr"] for d in dashboards().values() for p in d["panels"]
            for t in p["targets"] if t["datasource"]["type"] == "prometheus"]


def sdk_round_trip(data: dict[str, Any]) -> dict[str, Any]:
    """The dashboard read into the SDK's model and written back: what the model does not
    know (a misspelt key, a value of the wrong shape) does not survive."""
    again: dict[str, Any] = json.loads(json.dumps(Dashboard.from_json(data),
                                                  cls=JSONEncoder))
    return again


def test_committed_files_are_what_the_generator_writes(tmp_path: Path) -> None:
    load_generator().write(tmp_path)
    fresh = {p.relative_to(tmp_path): p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    committed = {p.relative_to(PROVISIONING): p.read_text()
                 for p in PROVISIONING.rglob("*") if p.is_file()}
    assert sorted(fresh) == sorted(committed), "run: python dashboards/generate.py"
    stale = [str(rel) for rel, text in fresh.items() if committed[rel] != text]
    assert not stale, f"out of date, run python dashboards/generate.py: {stale}"


def test_datasource_and_provider() -> None:
    gen = load_generator()
    doc = yaml.safe_load((PROVISIONING / "datasources" / "influxdb.yaml").read_text())
    [ds] = doc["datasources"]
    assert ds["uid"] == gen.DATASOURCE_UID and ds["type"] == "influxdb"
    assert ds["jsonData"]["version"] == "InfluxQL"  # the v1 API: 1.x, 2.x and 3.x
    assert ds["url"].startswith("${") and ds["secureJsonData"]["password"].startswith("${")
    # As InfluxDB's read-only user, with the password variable scripts/up generates for
    # compose (deploy/.secrets/compose.env), so Grafana can take that file as it is.
    assert ds["user"] == "${TESTBED_INFLUXDB_READER_USER}"
    assert ds["secureJsonData"]["password"] == "${TESTBED_INFLUXDB_READER_PASSWORD}"
    assert "TESTBED_INFLUXDB_READER_PASSWORD" in (REPO / "scripts" / "up").read_text()
    doc = yaml.safe_load((PROVISIONING / "datasources" / "prometheus.yaml").read_text())
    [prom] = doc["datasources"]
    assert prom["uid"] == gen.PROMETHEUS_UID and prom["type"] == "prometheus"
    assert prom["url"] == "${TESTBED_PROMETHEUS_URL}" and prom["isDefault"] is False
    provider = yaml.safe_load((PROVISIONING / "dashboards" / "testbed.yaml").read_text())
    [p] = provider["providers"]
    assert p["type"] == "file" and p["options"]["path"].endswith("provisioning/dashboards")


def test_the_dashboards_the_platform_promises_exist() -> None:
    titles = {d["title"] for d in dashboards().values()}
    assert titles == {
        "Campaign overview", "ABw vs TAT", "Data volume per session",
        "ABw measurement latency", "TAT in 100 ms bins", "Hourly behaviour",
        "Daily behaviour", "Time-of-day effects", "Signal metadata", "Quota use",
        "Fleet health", "Fleet alerts"}
    uids = [d["uid"] for d in dashboards().values()]
    assert len(set(uids)) == len(uids)


# --- InfluxQL, enough of it to check names ------------------------------------------------


def _close(text: str, start: int) -> int:
    """Index of the parenthesis closing the one at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise AssertionError(f"unbalanced parentheses in {text!r}")


def _outside_strings(text: str) -> str:
    """Regexes and string literals blanked, so their contents are not read as names."""
    text = re.sub(r"/\^[^/]*\$/", "/re/", text)
    return re.sub(r"'[^']*'", "''", text)


def check_select(query: str) -> set[str]:
    """Check one SELECT; return the names its rows carry (aliases or fields)."""
    m = re.match(r"SELECT (?P<sel>.+?) FROM (?P<src>.*)$", query, re.S)
    assert m, f"not a SELECT ... FROM ...: {query!r}"
    src = m.group("src")
    if src.startswith("("):
        end = _close(src, 0)
        available = check_select(src[1:end])
        rest = src[end + 1:]
        measurement = None
    else:
        mm = re.match(r'"(\w+)"(?P<rest>.*)$', src, re.S)
        assert mm, f'FROM must name a quoted measurement: {query!r}'
        measurement = mm.group(1)
        assert measurement in FIELDS, f"unknown measurement {measurement!r} in {query!r}"
        available = set(FIELDS[measurement])
        rest = mm.group("rest")
    assert "$timeFilter" in rest, f"unbounded query (no $timeFilter): {query!r}"
    selected = _outside_strings(m.group("sel"))
    aliases = set(re.findall(r'AS "([^"]+)"', selected))
    used = set(IDENT.findall(re.sub(r'AS "[^"]+"', "", selected)))
    unknown = used - available
    assert not unknown, (f"{sorted(unknown)} not among {sorted(available)} "
                         f"({measurement or 'subquery'}): {query!r}")
    for name in IDENT.findall(_outside_strings(rest)):
        assert name in RESULT_TAGS, f"{name!r} in WHERE/GROUP BY is not a tag: {query!r}"
    assert re.search(r"\bGROUP BY\b.*\btime\(", rest) is None or "$timeFilter" in rest
    return aliases | (used if not aliases else set())


def panel_queries() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [(name, p, t) for name, d in influx_dashboards().items() for p in d["panels"]
            for t in p["targets"]]


def test_every_panel_reads_a_provisioned_datasource_with_a_query() -> None:
    gen = load_generator()
    sources = {"influxdb": gen.DATASOURCE_UID, "prometheus": gen.PROMETHEUS_UID}
    for name, d in dashboards().items():
        assert d["panels"], name
        kinds = {p["datasource"]["type"] for p in d["panels"]}
        assert len(kinds) == 1, f"{name}: one datasource per dashboard, not {kinds}"
        for p in d["panels"]:
            kind = p["datasource"]["type"]
            assert p["datasource"] == {"type": kind, "uid": sources[kind]}, (name, p["title"])
            assert p["targets"], f"{name}: panel {p['title']!r} has no query"
            for t in p["targets"]:
                assert t["datasource"] == p["datasource"], (name, p["title"])
                if kind == "influxdb":
                    assert t["rawQuery"] is True and t["query"].strip(), (name, p["title"])
                else:
                    assert t["expr"].strip(), (name, p["title"])


def test_the_dashboards_are_what_the_sdk_model_accepts() -> None:
    for name, d in dashboards().items():
        assert sdk_round_trip(d) == d, f"{name} does not survive the SDK's dashboard model"


@pytest.mark.parametrize("damage", ["misspelt panel key", "gridPos of the wrong shape"])
def test_the_round_trip_catches_what_the_model_does_not_know(damage: str) -> None:
    d = json.loads((PROVISIONING / "dashboards" / "fleet.json").read_text())
    if damage == "misspelt panel key":
        d["panels"][0]["repeatDirecton"] = "v"
    else:
        d["panels"][0]["gridPos"] = {"height": 8, "width": 12}
    assert sdk_round_trip(d) != d


#: PromQL words that are not series: functions, aggregations, keywords.
PROMQL_WORDS = {"max", "min", "sum", "count", "avg", "by", "without", "and", "or",
                "unless", "on", "ignoring", "abs", "rate", "increase", "time"}


def series_in(expr: str) -> set[str]:
    """The metric names an expression reads (label matchers and strings blanked)."""
    bare = re.sub(r'\{[^}]*\}|"[^"]*"', " ", expr)
    bare = re.sub(r"\b(?:by|without|on|ignoring)\s*\([^)]*\)", " ", bare)
    return set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b", bare)) - PROMQL_WORDS


def test_every_prometheus_query_reads_the_orchestrators_series_or_alerts() -> None:
    exprs = prometheus_queries()
    assert exprs
    read = set().union(*map(series_in, exprs))
    assert "ALERTS" in read
    strays = {s for s in read - {"ALERTS"} if not s.startswith("testbed_")}
    assert not strays, f"not a series of the orchestrator's /metrics: {sorted(strays)}"


@pytest.mark.parametrize("where", [f"{n}: {p['title']} {t['refId']}"
                                   for n, p, t in panel_queries()])
def test_every_query_is_influxql_over_the_schema(where: str) -> None:
    [(_, _, target)] = [(n, p, t) for n, p, t in panel_queries()
                        if f"{n}: {p['title']} {t['refId']}" == where]
    check_select(target["query"])


def test_transformations_name_fields_the_queries_return() -> None:
    for name, d in influx_dashboards().items():
        for p in d["panels"]:
            returned = set().union(*(check_select(t["query"]) for t in p["targets"]))
            for tr in p.get("transformations", []):
                if tr["id"] == "calculateField":
                    b = tr["options"]["binary"]
                    assert {b["left"], b["right"]} <= returned, (name, p["title"])
                if tr["id"] == "groupBy":
                    fields = set(tr["options"]["fields"]) - {"Time"}
                    assert fields <= returned, (name, p["title"])
            dims = p.get("options", {}).get("dims", {})
            if "x" in dims:
                assert dims["x"] in returned, (name, p["title"])


def test_template_variables_used_are_defined() -> None:
    for name, d in dashboards().items():
        defined = {v["name"] for v in d["templating"]["list"]}
        for v in d["templating"]["list"]:
            if v["type"] == "query":
                m = re.match(r'SHOW TAG VALUES FROM "(\w+)" WITH KEY = "(\w+)"', v["query"])
                assert m, (name, v["query"])
                assert m.group(1) in FIELDS and m.group(2) in RESULT_TAGS, (name, v["query"])
                assert v["datasource"]["uid"] == load_generator().DATASOURCE_UID
        texts = [json.dumps(d["panels"]), json.dumps(d["links"]),
                 *(v.get("query", "") for v in d["templating"]["list"])]
        used = set()
        for text in texts:
            for groups in VARIABLE.findall(text):
                used.add(next(g for g in groups if g))
        used = {u for u in used if not u.startswith("tag_")}  # alias patterns
        missing = used - defined - BUILTINS
        assert not missing, f"{name}: variables used but not defined: {sorted(missing)}"
        for p in d["panels"]:
            if "repeat" in p:
                assert p["repeat"] in defined, (name, p["title"])


@pytest.mark.parametrize(("query", "why"), [
    ('SELECT mean("mean_bps") FROM "tat_summary" WHERE "campaign" = \'c\'', "unbounded"),
    ('SELECT mean("mean_bsp") FROM "tat_summary" WHERE $timeFilter', "not among"),
    ('SELECT mean("bps") FROM "tatt" WHERE $timeFilter', "unknown measurement"),
    ('SELECT mean("bps") FROM "tat" WHERE "nod" =~ /^$node$/ AND $timeFilter', "not a tag"),
    ('SELECT spread("x") FROM (SELECT mean("bps") AS "y" FROM "tat" WHERE $timeFilter) '
     "WHERE $timeFilter", "not among"),
    ("SHOW MEASUREMENTS", "not a SELECT"),
])
def test_the_query_check_catches_mistakes(query: str, why: str) -> None:
    with pytest.raises(AssertionError, match=why):
        check_select(query)


def test_every_prometheus_query_parses(tmp_path: Path) -> None:
    """promtool parses each expression as a recording rule (it has no offline query
    check): a typo in PromQL fails here, not in front of Grafana."""
    require_tools("promtool")
    rules = {"groups": [{"name": "dashboards", "rules": [
        {"record": f"dashboard:query_{i}", "expr": expr}
        for i, expr in enumerate(prometheus_queries())]}]}
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    out = subprocess.run(["promtool", "check", "rules", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_series_in_reads_the_names_a_promql_expression_reads() -> None:
    assert series_in('max by (node, health) (testbed_node_health{health=~"stale|x"}) == 1 '
                     'and on (node) max without (instance) (up{job="testbed"}) > 1e9') \
        == {"testbed_node_health", "up"}
    assert series_in('count by (alertname) (ALERTS{alertstate="firing"})') == {"ALERTS"}
