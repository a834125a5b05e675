"""The alert rules (deploy/prometheus/rules) pass their promtool unit tests, every rule
has such a test and a line in docs/monitoring.md, every series a rule reads is one the
orchestrator exports, and the Prometheus and Alertmanager configs load."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import REPO, ManualClock, require_tools
from tests.integration.test_metrics_fleet import NO_INFLUX, beat, make_api, scrape
from tests.unit.test_dashboards import prometheus_queries

PROMETHEUS = REPO / "deploy" / "prometheus"
RULES = sorted((PROMETHEUS / "rules").glob("*.yml"))
UNIT_TESTS = sorted((PROMETHEUS / "tests").glob("*.yml"))
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"


def run(*args: str | Path) -> str:
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, f"{' '.join(map(str, args))}:\n{out.stdout}\n{out.stderr}"
    return out.stdout + out.stderr


def rules() -> list[dict[str, Any]]:
    return [rule for path in RULES for group in yaml.safe_load(path.read_text())["groups"]
            for rule in group["rules"]]


def alert_names() -> set[str]:
    return {r["alert"] for r in rules() if "alert" in r}


def test_the_alert_rules_pass_their_promtool_unit_tests() -> None:
    require_tools("promtool")
    assert RULES and UNIT_TESTS
    run("promtool", "check", "rules", *RULES)
    assert "SUCCESS" in run("promtool", "test", "rules", *UNIT_TESTS)


def test_every_alert_has_a_unit_test_that_sees_it_fire_and_a_doc_entry() -> None:
    firing: set[str] = set()
    for path in UNIT_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            firing |= {t["alertname"] for t in case.get("alert_rule_test", [])
                       if t.get("exp_alerts")}
    assert alert_names() - firing == set(), "alerts no unit test sees firing"
    doc = (REPO / "docs" / "monitoring.md").read_text()
    assert {a for a in alert_names() if f"`{a}`" not in doc} == set(), \
        "alerts missing from docs/monitoring.md"


def test_every_series_a_rule_or_dashboard_reads_is_exported(tmp_path: Path,
                                                            clock: ManualClock) -> None:
    """A series renamed in the collector would leave its rule (or its Grafana panel, in
    the Fleet alerts dashboard) reading nothing, silent for good: every ``testbed_*``
    name in the rules and the dashboards' PromQL must be in a real scrape."""
    for api in make_api(tmp_path, clock, f"sqlite:///{tmp_path / 'testbed.db'}",
                        influx=NO_INFLUX):
        token = api.add_node("se-01", [("op0", "240-01", "Telia")])
        run_id = api.submit("se-01", duration_s=10)["id"]
        beat(api, token, clock_offset_s=0.1)
        assert api.report(token, run_id, "failed", "modem gone").status_code == 204
        exported = {name for name, _ in scrape(api)}
    exprs = [r["expr"] for r in rules()]
    panels = prometheus_queries()
    read = {name for expr in [*exprs, *panels]
            for name in re.findall(r"\btestbed_[a-z0-9_]+", expr)}
    assert exprs and panels and read - exported == set()


def test_the_prometheus_and_alertmanager_configs_load() -> None:
    require_tools("promtool", "amtool")
    # --syntax-only: the token file the config names exists only in the container
    run("promtool", "check", "config", "--syntax-only", PROMETHEUS / "prometheus.yml")
    out = run("amtool", "check-config", ALERTMANAGER)
    assert "2 inhibit rules" in out


def test_the_rules_select_the_job_that_scrapes_the_orchestrator_with_the_token() -> None:
    """The rules match ``job="testbed"``: a job renamed in prometheus.yml would leave
    TestbedOrchestratorDown matching nothing (never firing), and a job without the
    token would see no node at all."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    [job] = [j for j in config["scrape_configs"] if j["job_name"] == "testbed"]
    assert job["authorization"]["credentials_file"]
    assert job["static_configs"][0]["targets"] == ["orchestrator:8080"]
    assert 'job="testbed"' in " ".join(r["expr"] for r in rules())
