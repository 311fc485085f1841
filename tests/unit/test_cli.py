"""The CLI's password redaction, without a database (the CLI runs are in tests/migrations)."""

from __future__ import annotations

import pytest

from portqueue.cli import redact


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("postgresql://u:pw0rd@h/x", "pw0rd"),
        ("postgres://u:p%40ss@h:5432/x", "p%40ss"),
        ("postgres://u:p%40ss@h:5432/x", "p@ss"),
        ("host=h password=pw0rd dbname=x", "pw0rd"),
        ("host=h password = 'pw0rd' dbname=x", "pw0rd"),
        ("postgresql://h/x?user=u&password=pw0rd&sslmode=disable", "pw0rd"),
        ("postgresql://u:pw0rd%ZZ@h/x", "pw0rd%ZZ"),  # unparsable: libpq quotes it
        ("host=h password=pw0rd port", "pw0rd"),  # unparsable
    ],
)
def test_redact_hides_every_spelling(dsn: str, secret: str) -> None:
    message = f"failed near {secret!r} in {dsn}"
    redacted = redact(message, dsn)
    assert secret not in redacted
    assert "***" in redacted


def test_redact_leaves_passwordless_messages_alone() -> None:
    message = 'connection to server at "h", port 1 failed'
    assert redact(message, "postgresql://u@h:1/x") == message
