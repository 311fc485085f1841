"""What a heartbeat took from a job's report is carried by the job's settling
write until that heartbeat is known to be written: the touch waits its turn on
the claim session, so the completion (on the pool) may commit first, and the
touch's fence then drops what it carried (seen through PgBouncer: a fast job's
progress ended None instead of 0.9)."""

from __future__ import annotations

import json
from typing import Any, cast

from portqueue.worker.job import JobReport
from portqueue.worker.outcomes import Completion
from portqueue.worker.signal import SignalState
from portqueue.worker.state import Claimed, Running

JOB_ID = "00000000-0000-0000-0000-000000000001"


def _running() -> Running:
    claimed = Claimed(JOB_ID, "q", "active", "{}", 1, 3, None, 7, None, 0, "fixed", 2.0, None,
                      False, False, None)
    return Running(claimed, cast(Any, None), SignalState(), JobReport(lambda: None))


def _entry(running: Running) -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(Completion(running, "completed", "null").as_json())
    return entry


def test_a_touch_in_flight_does_not_take_the_completions_progress() -> None:
    running = _running()
    running.report.set_progress(0.9)
    running.report.set_attrs({"a": 1})
    assert running.report.take() == (0.9, {"a": 1})  # a touch, not yet written
    running.report.set_attrs({"b": 2})
    entry = _entry(running)
    assert entry["progress"] == 0.9 and entry["attrs"] == {"a": 1, "b": 2}


def test_a_written_touch_is_not_written_again() -> None:
    running = _running()
    running.report.set_progress(0.5)
    running.report.take()
    running.report.confirm()
    entry = _entry(running)
    assert entry.get("progress") is None and entry.get("attrs") is None


def test_a_failed_touch_puts_its_values_back_once() -> None:
    running = _running()
    running.report.set_progress(0.5)
    progress, attrs = running.report.take()
    running.report.set_progress(0.6)
    running.report.put_back(progress, attrs)
    assert running.report.take() == (0.6, None)
    running.report.confirm()
    assert running.report.last() == (None, None)
