"""What `testbed run wait` shows while waiting: runs by state, time in the state, time
left of the booked slot; redrawn on a terminal, plain lines in logs."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from typing import Any

from orchestrator.cli import progress
from orchestrator.cli.waiting import wait

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def run(run_id: str, state: str, *, started_s: float = -60, slot_s: tuple[float, float]
        = (-120, 480), reason: str = "") -> dict[str, Any]:
    """A run as the API returns it (timestamps as ISO strings), times relative to NOW."""
    at = lambda s: (NOW + timedelta(seconds=s)).isoformat()  # noqa: E731
    return {"id": run_id, "node": "se-01", "interface": "op0", "experiment": "tat",
            "state": state, "state_at": at(started_s), "not_before": at(slot_s[0]),
            "deadline": at(slot_s[1]), "reason": reason}


def test_block_groups_runs_by_state_in_lifecycle_order_with_elapsed_and_slot_left() -> None:
    runs = [run("r-3", "done", reason="ok"), run("r-1", "running", started_s=-75),
            run("r-2", "scheduled", started_s=-300, slot_s=(600, 900))]
    lines = progress.block(runs, NOW, waited_s=90, timeout_s=900)
    assert lines == [
        ("waited 1 min 30 s (gives up in 13 min 30 s): 1 of 3 runs final; 1 scheduled, "
         "1 running, 1 done"),
        "scheduled (1)",
        "  r-2  se-01/op0  tat  scheduled for 5 min, slot starts in 10 min",
        "running (1)",
        "  r-1  se-01/op0  tat  running for 1 min 15 s, 8 min left of its slot",
        "done (1)",
        "  r-3  se-01/op0  tat  done for 1 min, over",
    ]


def test_a_run_past_its_deadline_says_by_how_much() -> None:
    assert progress.slot(run("r", "uploading", slot_s=(-9000, -3725)), NOW) == (
        "past its slot by 1 h 2 min")


def test_plain_lines_say_each_state_change_once_with_its_reason() -> None:
    first = progress.changes({}, [run("r-1", "scheduled")], NOW)
    assert first == ["r-1 se-01/op0 tat: scheduled; 8 min left of its slot"]
    assert progress.changes({"r-1": "scheduled"}, [run("r-1", "scheduled")], NOW) == []
    failed = progress.changes({"r-1": "running"},
                              [run("r-1", "failed", reason="no carrier")], NOW)
    assert failed == ["r-1 se-01/op0 tat: running -> failed (no carrier); over"]


def test_live_display_only_on_a_terminal_that_can_move_the_cursor() -> None:
    assert progress.live_display(isatty=True, term="xterm-256color")
    assert not progress.live_display(isatty=False, term="xterm-256color")  # docker exec
    assert not progress.live_display(isatty=True, term="dumb")
    assert not progress.live_display(isatty=True, term=None)


class FakeApi:
    """Answers GET /api/v1/runs/ID from a script of states, one step per poll."""

    def __init__(self, steps: list[dict[str, str]]) -> None:
        self.steps = steps
        self.polls = 0

    def call(self, method: str, path: str) -> dict[str, Any]:
        step = self.steps[min(self.polls // 2, len(self.steps) - 1)]  # two runs per poll
        self.polls += 1
        run_id = path.rsplit("/", 1)[1]
        return run(run_id, step[run_id])


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def waiting(steps: list[dict[str, str]], *, live: bool,
            timeout_s: float = 900) -> tuple[list[dict[str, Any]], str]:
    out, clock = io.StringIO(), FakeClock()
    runs = wait(FakeApi(steps), ("r-1", "r-2"), timeout_s=timeout_s,  # type: ignore[arg-type]
                stream=out, live=live, sleep=clock.sleep, clock=clock, now=lambda: NOW)
    return runs, out.getvalue()


STEPS = [{"r-1": "scheduled", "r-2": "scheduled"}] * 10 + [
    {"r-1": "running", "r-2": "scheduled"}, {"r-1": "done", "r-2": "failed"}]


def test_plain_mode_logs_changes_and_a_summary_at_most_every_15_s() -> None:
    runs, text = waiting(STEPS, live=False)
    assert [r["state"] for r in runs] == ["done", "failed"]
    lines = text.splitlines()
    assert "\x1b" not in text  # logs get no cursor movement
    assert [ln.split(":")[0] for ln in lines if ln.startswith("r-")] == [
        "r-1 se-01/op0 tat", "r-2 se-01/op0 tat", "r-1 se-01/op0 tat",
        "r-1 se-01/op0 tat", "r-2 se-01/op0 tat"]
    assert "scheduled -> running" in lines[lines.index(next(
        ln for ln in lines if "-> running" in ln))]
    # 12 polls 2 s apart: summaries at 16 s and the end, not at every poll
    summaries = [ln for ln in lines if ln.startswith("waited")]
    assert summaries == [
        "waited 16 s (gives up in 14 min 44 s): 0 of 2 runs final; 2 scheduled",
        "waited 22 s (gives up in 14 min 38 s): 2 of 2 runs final; 1 done, 1 failed"]


def test_live_mode_redraws_the_block_in_place() -> None:
    _, text = waiting(STEPS[-2:], live=True)
    first, second = text.split("\x1b[", 1)
    assert first.startswith("waited 0 s")
    assert second.startswith("5F\x1b[J")  # up over the 5-line block, clear, draw anew
    assert "running (1)" in first and "done (1)" in second
    assert "  r-1  se-01/op0  tat  done for 1 min, over" in second


def test_timeout_stops_waiting_and_says_so() -> None:
    runs, text = waiting([{"r-1": "scheduled", "r-2": "running"}], live=False, timeout_s=5)
    assert [r["state"] for r in runs] == ["scheduled", "running"]
    assert text.splitlines()[-1].startswith("gave up after 5 s (--timeout)")


def test_the_live_block_fits_the_terminal_so_the_redraw_lands_in_place() -> None:
    lines = progress.block([run(f"r-{i}", "running") for i in range(30)], NOW,
                           waited_s=0, timeout_s=60)
    fitted = progress.fit(lines, rows=10, columns=40)
    assert len(fitted) == 9 and all(len(ln) <= 40 for ln in fitted)
    assert fitted[-1].startswith("... 24 more lines")
    assert progress.fit(lines[:3], rows=10, columns=200) == lines[:3]
