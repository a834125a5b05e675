"""The node's local account of each SIM's cap while offline (``node_agent.sim_account``):
what is left, what a run may reserve, which measured bytes the last reply had counted;
and the agent refusing a run over it, with the reason reported."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest

from node_agent.runner import RunOutcome, StopRequest
from node_agent.sim_account import SimAccount, load_account, save_account
from testbed_common.states import RunState
from tests.unit.test_agent_measured_bytes import NOW, agent, assignment, reports

MB = 1_000_000


def test_no_cap_known_refuses_nothing() -> None:
    account = SimAccount()
    assert account.left("op0") is None
    assert account.refusal(run_id="r-1", interface="op0", max_bytes=10**12) is None


def test_bytes_measured_offline_count_down_what_the_last_reply_left() -> None:
    account = SimAccount({"op0": 100 * MB, "op1": 5 * MB})
    account = account.measured(run_id="r-1", interface="op0", nbytes=30 * MB)
    account = account.measured(run_id="r-2", interface="op0", nbytes=45 * MB)
    assert account.left("op0") == 25 * MB
    assert account.left("op1") == 5 * MB  # another SIM's runs do not count
    assert account.refusal(run_id="r-3", interface="op0", max_bytes=25 * MB) is None
    why = account.refusal(run_id="r-3", interface="op0", max_bytes=25 * MB + 1)
    assert why is not None
    assert "r-3 reserves 25000001 bytes" in why and "only 25000000 bytes left" in why
    assert "75000000 bytes the node measured since" in why


def test_an_overrun_leaves_nothing_and_says_zero() -> None:
    account = SimAccount({"op0": MB}).measured(run_id="r-1", interface="op0", nbytes=3 * MB)
    assert account.left("op0") == -2 * MB
    why = account.refusal(run_id="r-2", interface="op0", max_bytes=1)
    assert why is not None and "only 0 bytes left" in why


def test_a_reply_replaces_the_account_keeping_runs_it_had_not_counted() -> None:
    account = (SimAccount({"op0": 100 * MB})
               .measured(run_id="delivered", interface="op0", nbytes=10 * MB)
               .measured(run_id="in-outbox", interface="op0", nbytes=20 * MB))
    # the reply's figure already holds "delivered" (its report had gone); not "in-outbox"
    after = account.contact({"op0": 90 * MB}, uncounted={"in-outbox", "running"})
    assert after.left("op0") == 70 * MB
    # a run that ends after the reply is counted against it
    assert after.measured(run_id="running", interface="op0", nbytes=MB).left("op0") == 69 * MB
    # a SIM whose cap was removed is no longer checked
    assert after.contact({}, uncounted=()).left("op0") is None


def test_the_account_survives_a_restart_and_a_damaged_file_means_no_account(
        tmp_path: Path) -> None:
    path = tmp_path / "sim-account.json"
    account = SimAccount({"op0": 7 * MB}).measured(run_id="r-1", interface="op0", nbytes=MB)
    save_account(account, path)
    assert load_account(path) == account
    path.write_text("{not json")
    assert load_account(path) == SimAccount()
    assert load_account(tmp_path / "absent.json") == SimAccount()


def test_the_agent_refuses_a_run_over_what_is_left_and_reports_why(tmp_path: Path) -> None:
    a = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished", exit_code=0,
                                   started_at=NOW, ended_at=NOW, bytes_used=600_000))
    a.account = SimAccount({"op0": 1_500_000})
    first = assignment()  # reserves 1 MB
    assert a.execute(first, StopRequest()).state == RunState.UPLOADING
    assert a.account.left("op0") == 900_000  # measured offline, counted down, kept on disk
    assert load_account(tmp_path / "sim-account.json").left("op0") == 900_000
    second = first.model_copy(update={"run_id": "r-2"})
    outcome = a.execute(second, StopRequest())
    assert outcome.state == RunState.FAILED
    assert outcome.reason.startswith("refused by the node: run r-2 reserves 1000000 bytes")
    sent = [(p.run_id, p.report.state, p.report.reason) for p in a.outbox.pending()]
    assert sent[-1] == ("r-2", RunState.FAILED, outcome.reason)  # reported when back
    assert [s for r, s, _ in sent if r == "r-2"] == [RunState.FAILED]  # never deployed
    assert reports(a)[:3] == [(RunState.DEPLOYING, None), (RunState.RUNNING, None),
                              (RunState.UPLOADING, 600_000)]


@pytest.mark.parametrize(("begun_s", "left_s", "reason"), [
    (300, -240, "missed: the node could not start the run before"),
    # four fifths of the slot gone (a node busy or slow): not started either
    (20, 5, "missed: the node could start the run only 5 s before its deadline"),
])
def test_a_run_whose_slot_passed_while_the_node_was_away_is_reported_expired(
        tmp_path: Path, begun_s: float, left_s: float, reason: str) -> None:
    a = agent(tmp_path, RunOutcome(RunState.UPLOADING, "finished"))
    late = assignment().model_copy(update={"not_before": NOW - timedelta(seconds=begun_s),
                                           "deadline": NOW + timedelta(seconds=left_s)})
    a.book.offer([late])
    loop = threading.Thread(target=a._executor_loop, daemon=True)
    loop.start()
    try:
        for _ in range(100):
            if a.outbox.pending():
                break
            threading.Event().wait(0.05)
    finally:
        a._stopping.set()
        a._wake_executor.set()
        loop.join(timeout=10)
    [sent] = a.outbox.pending()
    assert (sent.run_id, sent.report.state) == ("r-1", RunState.EXPIRED)
    assert sent.report.reason.startswith(reason)
    assert a.book.pending_ids == []  # dropped from the book, never started
