"""What an action tells the operator after its redirect.

The redirect carries a short code (``?notice=retried``), never free text, so a
crafted link cannot make the dashboard display words of an attacker's choosing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from portqueue import parsing
from portqueue.errors import InvalidArgument


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
    "bulk_retried": Notice("ok", "Retried {count} of {matched} matching job(s)."),
    "bulk_cancelled": Notice("ok", "Cancelled {count} of {matched} matching job(s)."),
}

# The only values a notice's text takes from the link: counts, as digits.
_COUNTS = ("count", "matched")
MAX_COUNT = 10**12


def notice_for(query: Mapping[str, str]) -> Notice | None:
    """The notice a redirect asked for; one whose counts are not plain numbers
    is dropped rather than shown with what the link says."""
    notice = NOTICES.get(query.get("notice", ""))
    if notice is None or "{" not in notice.text:
        return notice
    try:
        counts = {name: parsing.integer(name, query.get(name, ""), minimum=0,
                                        maximum=MAX_COUNT) for name in _COUNTS}
    except InvalidArgument:
        return None
    return Notice(notice.kind, notice.text.format(**counts))
