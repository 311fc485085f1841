"""What an action tells the operator after its redirect.

The redirect carries a short code (``?notice=retried``), never free text, so a
crafted link cannot make the dashboard display words of an attacker's choosing.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Notice:
    kind: str  # "ok" or "warning": the CSS class
    text: str


NOTICES: dict[str, Notice] = {
    "added": Notice("ok", "Job added."),
    "retried": Notice("ok", "Job re-armed: it is pending again."),
    "not_retried": Notice("warning", "Not retried: the job is running or no longer exists."),
    "cancelled": Notice("ok", "Job cancelled."),
    "signalled": Notice("ok", "The running job's handler was signalled to stop."),
    "cancel_not_found": Notice("warning", "Not cancelled: the job no longer exists."),
    "cancel_already_finished": Notice("warning", "Not cancelled: the job had already finished."),
    "removed": Notice("ok", "Job removed."),
    "not_removed": Notice("warning", "Not removed: the job is running or no longer exists."),
    "paused": Notice("ok", "Queue paused."),
    "resumed": Notice("ok", "Queue resumed."),
    "queue_removed": Notice("ok", "Queue removed, with its schedules and finished jobs."),
    "queue_not_removed": Notice("warning", "Not removed: the queue no longer exists."),
    "queue_not_empty": Notice("warning", "Not removed: the queue still has pending or active "
                              "jobs. Cancel or remove them first."),
    "schedule_removed": Notice("ok", "Schedule removed; the jobs it spawned are untouched."),
    "schedule_not_removed": Notice("warning", "Not removed: the schedule no longer exists."),
}
