"""Job ids: UUIDv7 text, time-ordered, with the version and variant bits right."""

from __future__ import annotations

import time
import uuid

from portqueue.ids import uuid7, uuid7s


def test_ids_are_canonical_uuid7_text() -> None:
    for text in [uuid7() for _ in range(5_000)] + uuid7s(5_000):
        parsed = uuid.UUID(text)
        assert str(parsed) == text
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122


def test_the_id_starts_with_the_unix_milliseconds_it_was_made_at() -> None:
    before = time.time_ns() // 1_000_000
    made = uuid.UUID(uuid7()).int >> 80
    after = time.time_ns() // 1_000_000
    assert before <= made <= after


def test_ids_of_later_milliseconds_sort_later_and_ids_do_not_repeat() -> None:
    first = uuid7()
    deadline = time.monotonic() + 1
    while uuid.UUID(uuid7()).int >> 80 == uuid.UUID(first).int >> 80:
        assert time.monotonic() < deadline
    assert uuid7() > first
    many = {uuid7() for _ in range(20_000)}
    assert len(many) == 20_000


def test_a_batch_of_ids_shares_one_millisecond_and_repeats_none() -> None:
    before = time.time_ns() // 1_000_000
    batch = uuid7s(20_000)
    after = time.time_ns() // 1_000_000
    assert len(set(batch)) == 20_000
    (made,) = {uuid.UUID(text).int >> 80 for text in batch}
    assert before <= made <= after
    assert uuid7s(0) == [] and len(uuid7s(1)) == 1
