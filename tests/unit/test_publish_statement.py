"""SPEC §9: a publish is one statement, whatever the number of subscribers
(the statement itself adds one job per subscribed queue; tested end to end
in tests/integration/test_workflow_flows.py)."""

from __future__ import annotations

from typing import Any

from portqueue import flows
from tests.support.recording import Recording, settings


def options(**overrides: Any) -> dict[str, Any]:
    """What PortQueue.publish passes on, its defaults."""
    return {"data": {"order": 1}, "schedule": None, "priority": 0, "retry": None,
            "expire_in_seconds": None, "retention": None, "timeout_seconds": None,
            "preferred_instance_key_pattern": None, "group_id": None, **overrides}


def test_a_publish_sends_one_statement() -> None:
    recording = Recording()
    assert recording.run(flows.publish(settings(), "order.created", options())) == []
    assert recording.statements == ["publish"]


def test_a_publish_with_options_is_still_one_statement() -> None:
    recording = Recording()
    recording.run(flows.publish(settings(), "order.created", options(
        priority=5, retry={"max_attempts": 3}, group_id="g")))
    assert recording.statements == ["publish"]
