"""Job ids spelled so that ``uuid.UUID()`` reads them as another text's id."""

from __future__ import annotations


def odd_spellings(job_id: str) -> list[str]:
    """Texts uuid.UUID() reads as ``job_id``: an Eastern Arabic digit for an ASCII
    one, and an underscore (int(…, 16) skips it) in place of the leading 0."""
    digit = next(i for i, char in enumerate(job_id) if char in "123456789")
    arabic = job_id[:digit] + chr(0x0660 + int(job_id[digit])) + job_id[digit + 1:]
    hex_digits = job_id.replace("-", "")
    assert hex_digits[0] == "0", "a UUIDv7 of this century starts with 0"
    underscore = hex_digits[1:5] + "_" + hex_digits[5:]
    return [arabic, underscore]
