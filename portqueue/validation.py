"""Argument checks. Everything here runs before any I/O and raises InvalidArgument.

Each rule says what it prevents: most stop a value that Postgres would reject
mid-transaction (aborting a caller's transaction), or one that would be stored
but could never behave as the caller meant.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, fields, is_dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, NamedTuple, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from portqueue import cron
from portqueue.errors import InvalidArgument, PayloadTooLarge
from portqueue.ids import uuid7
from portqueue.types import (
    Backoff,
    BackoffStrategy,
    CronSpec,
    Debounce,
    JobStatus,
    PauseMode,
    RateLimit,
    Retention,
    RetryPolicy,
    Schedule,
    Throttle,
)

INT32_MAX = 2**31 - 1
MAX_QUEUE_NAME = 128
MAX_KEY_LENGTH = 512
MAX_PAGE = 500
DEFAULT_PAGE = 50
DEFAULT_MAX_PAYLOAD_BYTES = 1024 * 1024
# The highest max_payload_bytes a client may set. Postgres parses the payload
# as jsonb, which can take several times the text for dense shapes ([0,0,...]),
# and past a size fails mid-statement ("invalid memory alloc request size"),
# aborting the caller's transaction. This limit keeps a margin below the size
# found to fail, the batch wrapper included (docs/performance.md).
MAX_PAYLOAD_BYTES_LIMIT = 16 * 1024 * 1024

# Quoted everywhere, but still restricted: the schema name also forms NOTIFY
# channel names, which Postgres truncates at 63 bytes.
_SCHEMA_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
# A NUL escape preceded by an even number of backslashes is a real U+0000,
# which jsonb cannot store ("unsupported Unicode escape sequence").
_JSON_NUL_RE = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")

# See _check_structure: far below Python's default recursion limit (1000),
# so any reader can decode what was accepted, however deep its own stack.
MAX_PAYLOAD_DEPTH = 200
# Python writes floats from 1e16 up with an exponent (see _encode_big_floats).
_FLOAT_EXPONENT_FROM = 1e16
_FLOAT_PLACEHOLDER_RE = re.compile(r'"\\u0000(\d+)\\u0000"')

E = TypeVar("E")


def schema_name(value: object) -> str:
    if not isinstance(value, str) or not _SCHEMA_RE.fullmatch(value):
        raise InvalidArgument(
            "schema", f"must be a letter or _ then up to 47 letters, digits or _; got {value!r}"
        )
    # Postgres reserves the pg_ prefix (CREATE SCHEMA fails half-way through a
    # migration; pg_catalog and pg_toast are the catalogs themselves), and
    # information_schema is the SQL-standard system schema that pg_dump skips:
    # portqueue's tables there would be silently missing from every backup.
    # The check is case-sensitive like Postgres's own: "PG_x" is an ordinary name.
    if value.startswith("pg_") or value == "information_schema":
        raise InvalidArgument("schema", f"{value!r} is a Postgres system schema name")
    return value


def text(argument: str, value: object, *, max_length: int = MAX_KEY_LENGTH) -> str:
    """A non-empty string Postgres can store as text (no NUL, no lone surrogate)."""
    if not isinstance(value, str):
        raise InvalidArgument(argument, f"must be a string, got {type(value).__name__}")
    if not 1 <= len(value) <= max_length:
        raise InvalidArgument(argument, f"must be 1 to {max_length} characters, got {len(value)}")
    if "\x00" in value:
        raise InvalidArgument(argument, "must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(argument, "must be valid Unicode (lone surrogate)") from exc
    return value


def queue_name(value: object, argument: str = "queue") -> str:
    return text(argument, value, max_length=MAX_QUEUE_NAME)


def optional_text(argument: str, value: object) -> str | None:
    return None if value is None else text(argument, value)


def integer(argument: str, value: object, *, minimum: int, maximum: int = INT32_MAX) -> int:
    # bool is an int subclass; True as a priority is always a mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(argument, f"must be an integer, got {type(value).__name__}")
    if not minimum <= value <= maximum:
        raise InvalidArgument(argument, f"must be between {minimum} and {maximum}, got {value}")
    return value


def optional_integer(
    argument: str, value: object, *, minimum: int, maximum: int = INT32_MAX
) -> int | None:
    return None if value is None else integer(argument, value, minimum=minimum, maximum=maximum)


def seconds(argument: str, value: object, *, minimum: int = 0) -> int | None:
    return optional_integer(argument, value, minimum=minimum)


# uuid.UUID() reads the hex with int(…, 16), which also takes other scripts'
# digits ("٣" is 3), "+" and "_": "…0000000_0001" would name another job.
_UUID_TEXT_RE = re.compile(r"(?:urn:uuid:)?\{?[0-9A-Fa-f-]+\}?")


def job_id(value: object, argument: str = "job_id") -> str:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str) and _UUID_TEXT_RE.fullmatch(value):
        try:
            return str(uuid.UUID(value))
        except ValueError:
            pass
    raise InvalidArgument(argument, f"must be a UUID string, got {value!r}")


def job_ids(value: object) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument("job_ids", "must be a sequence of UUID strings")
    return [job_id(v, "job_ids") for v in value]


def statuses(value: object, *, allow_active: bool = True) -> list[JobStatus] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise InvalidArgument("statuses", "must be a sequence of JobStatus")
    result = []
    for item in value:
        try:
            status = JobStatus(item)
        except ValueError:
            raise InvalidArgument("statuses", f"unknown status {item!r}") from None
        if status is JobStatus.ACTIVE and not allow_active:
            # Deleting running jobs would let their workers write into nothing.
            raise InvalidArgument("statuses", "ACTIVE jobs cannot be removed; cancel them first")
        result.append(status)
    return result


def pause_mode(value: object) -> PauseMode:
    try:
        return PauseMode(value)
    except ValueError:
        raise InvalidArgument("mode", f"must be a PauseMode, got {value!r}") from None


def window(limit: object, offset: object) -> tuple[int, int]:
    return (
        integer("limit", limit, minimum=1, maximum=MAX_PAGE),
        integer("offset", offset, minimum=0),
    )


# One encoder for every payload: json.dumps with options builds a new one per call.
_ENCODER = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def _encode_json(value: object) -> str:
    return _ENCODER.encode(value)


def _checked_size(argument: str, encoded: str, max_bytes: int) -> None:
    # isascii() is a flag CPython keeps on the string: an ASCII text's length
    # is its size, and it holds no surrogate, without encoding it.
    if encoded.isascii():
        size = len(encoded)
    else:
        try:
            size = len(encoded.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidArgument(
                argument, "contains a lone surrogate (invalid Unicode)") from None
    if size > max_bytes:
        raise PayloadTooLarge(argument, f"is {size} bytes encoded, over the {max_bytes} limit")


# Exact types only: a subclass (an int-like enum, a str subclass) takes the
# general checks below.
_PLAIN_SCALARS = frozenset({str, int, bool, type(None)})


def _check_structure(argument: str, value: object) -> bool:
    """Walk an encodable value (no cycles: json.dumps checked); True if it holds a big float.

    Object keys must be strings: json.dumps silently turns {1: "a"} into
    {"1": "a"}, so the job would read back different keys, and {1: "a", "1": "b"}
    would lose a value to jsonb's last-duplicate-wins rule. Depth is capped
    because every reader decodes the payload recursively: a payload a writer
    could encode near Python's recursion limit would raise RecursionError in a
    reader (or claiming worker) running on a deeper stack, a job that can be
    added but never read, and Postgres itself refuses ~100k levels.
    """
    if not isinstance(value, (dict, list, tuple)):
        return isinstance(value, float) and not -_FLOAT_EXPONENT_FROM < value < _FLOAT_EXPONENT_FROM
    has_big_float = False
    # Iterative, and only containers are pushed: this runs on every add.
    stack: list[tuple[dict[Any, Any] | list[Any] | tuple[Any, ...], int]] = [(value, 1)]
    while stack:
        container, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise InvalidArgument(
                argument, f"is nested deeper than {MAX_PAYLOAD_DEPTH} arrays/objects"
            )
        if isinstance(container, dict):
            for key in container:
                if not isinstance(key, str):
                    raise InvalidArgument(
                        argument,
                        f"has a {type(key).__name__} object key {key!r}; JSON keys are strings",
                    )
            children: Iterable[Any] = container.values()
        else:
            children = container
        for child in children:
            if type(child) in _PLAIN_SCALARS:
                continue  # the commonest values, passed without the isinstance calls
            if isinstance(child, (dict, list, tuple)):
                stack.append((child, depth + 1))
            elif isinstance(child, float) and not (
                -_FLOAT_EXPONENT_FROM < child < _FLOAT_EXPONENT_FROM
            ):
                has_big_float = True
    return has_big_float


def _float_text(value: float) -> str:
    # repr is the shortest text that reads back as the same float; above 1e16
    # it is integral, so it is written out positionally with a ".0".
    return format(Decimal(float.__repr__(value)), "f") + ".0"


def _encode_big_floats(value: object) -> str:
    """Encode with floats of 1e16 and above written as e.g. 10000000000000000.0.

    json.dumps writes 1e16 as "1e+16"; jsonb stores numbers as numeric, whose
    display scale for "1e+16" is 0, so it reads back as the int 10000000000000000:
    the float would come back as an int. With a ".0" numeric keeps one decimal
    place and the value reads back as the same float. Each such float is first
    swapped for a placeholder string holding NUL characters, which no accepted
    payload can contain, then the placeholder is replaced in the encoded text.
    """
    floats: list[float] = []

    def swap(item: object) -> object:
        if isinstance(item, dict):
            return {key: swap(child) for key, child in item.items()}
        if isinstance(item, (list, tuple)):
            return [swap(child) for child in item]
        if isinstance(item, float) and not -_FLOAT_EXPONENT_FROM < item < _FLOAT_EXPONENT_FROM:
            floats.append(item)
            return f"\x00{len(floats) - 1}\x00"
        return item

    encoded = _encode_json(swap(value))
    return _FLOAT_PLACEHOLDER_RE.sub(lambda m: _float_text(floats[int(m.group(1))]), encoded)


def payload(argument: str, value: object, max_bytes: int) -> str:
    """Encode ``value`` as JSON once; the text is what gets sent and stored."""
    try:
        encoded = _encode_json(value)
    except ValueError as exc:  # NaN / Infinity: not JSON, and jsonb rejects them
        raise InvalidArgument(argument, f"is not JSON: {exc}") from None
    except TypeError as exc:
        raise InvalidArgument(argument, f"is not JSON-serialisable: {exc}") from None
    except RecursionError:
        raise InvalidArgument(argument, "is nested too deeply to encode") from None
    if "\\u0000" in encoded and _JSON_NUL_RE.search(encoded):
        raise InvalidArgument(argument, "contains a NUL character, which jsonb cannot store")
    _checked_size(argument, encoded, max_bytes)
    if _check_structure(argument, value):
        encoded = _encode_big_floats(value)
        _checked_size(argument, encoded, max_bytes)
    return encoded


def regex(argument: str, value: object) -> str:
    """A pattern Postgres (``~``, where it runs) and Python's ``re`` both accept alike."""
    pattern = text(argument, value)
    # The subset check comes first: it refuses what re.compile would only warn about.
    problem = _regex_problem(pattern)
    if problem is not None:
        raise InvalidArgument(argument, f"is not a portable regular expression: {problem}")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidArgument(argument, f"is not a valid regular expression: {exc}") from None
    return pattern


# The pattern runs in Postgres (the claim's `instance_key ~ pattern`), not in
# Python. A pattern re.compile accepts but Postgres rejects (a named group, a
# possessive or atomic construct, a count over 255, a bound nested too deep)
# would be stored, then make every claim that meets the job fail: the queue
# stalls for all workers. So patterns are held to a subset both engines read
# alike, checked by the small tokenizer below; anything it does not know is
# refused. tests/integration/test_roundtrip_properties.py checks "accepted here
# => accepted by Postgres" against random patterns. The size estimate cannot
# bound what Postgres spends on nested counts, so an add then has Postgres
# compile the pattern within a deadline (operations.check_patterns).
_REGEX_OPTIONS_RE = re.compile(r"\(\?([a-z]*)\)")
_REGEX_BOUND_RE = re.compile(r"\{(\d{1,3})(,(\d{0,3}))?\}")
_REGEX_GROUP_OPENERS = ("(?:", "(?<=", "(?<!", "(?=", "(?!")
# Same meaning in both; \b means backspace in Postgres and \B a backslash.
_REGEX_ESCAPES = frozenset("dDwWsSntrfv")
_REGEX_ANCHOR_ESCAPES = frozenset("AZ")
# Postgres before 14 refuses \D, \W and \S inside brackets.
_REGEX_CLASS_ESCAPES = frozenset("dwsntrfv")
_REGEX_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ ")
# Sequences Python reserves for future set operations inside brackets (it
# warns), and "[" which Postgres reads as a [:class:] or collating element.
_REGEX_CLASS_RESERVED = ("[", "--", "&&", "~~", "||")
MAX_REGEX_BOUND = 255  # Postgres's RE_DUP_MAX: "invalid repetition count(s)" above it
# Postgres refuses as "too complex" once bounded repetition expands its
# automaton to some 50k states; (a{255}){128} passes and (a{255}){200} fails.
MAX_REGEX_SIZE = 10_000


def _regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` is outside the portable subset, or None."""
    position = 0
    options = _REGEX_OPTIONS_RE.match(pattern)
    if options is not None:
        if not options.group(1) or not set(options.group(1)) <= set("ims"):
            return "only (?i), (?m) and (?s) options, at the start, are supported"
        position = options.end()
    # One running size per open group; a group's entry says if it is a lookaround.
    sizes = [0]
    lookarounds: list[bool] = []
    last_size = 0  # the size of the last atom, when a quantifier may follow it
    quantifiable = False
    while position < len(pattern):
        char = pattern[position]
        if char == "\\":
            escaped = pattern[position + 1 : position + 2]
            if escaped in _REGEX_ANCHOR_ESCAPES:
                quantifiable = False
            elif escaped in _REGEX_ESCAPES or escaped in _REGEX_PUNCTUATION:
                last_size, quantifiable = 1, True
                sizes[-1] += 1
            else:
                return f"\\{escaped} does not mean the same in Python and Postgres"
            position += 2
        elif char == "[":
            end = _regex_class_end(pattern, position)
            if isinstance(end, str):
                return end
            position = end
            last_size, quantifiable = 1, True
            sizes[-1] += 1
        elif char == "(":
            opener = next((o for o in _REGEX_GROUP_OPENERS if pattern.startswith(o, position)), "(")
            if opener == "(" and pattern.startswith("(?", position):
                return f"{pattern[position:position + 3]}... is not supported by Postgres"
            lookarounds.append(opener not in ("(", "(?:"))
            sizes.append(0)
            quantifiable = False
            position += len(opener)
        elif char == ")":
            if not lookarounds:
                return "unbalanced )"
            last_size = sizes.pop()
            sizes[-1] += last_size
            # Postgres refuses a quantified lookaround ("quantifier operand invalid").
            quantifiable = not lookarounds.pop()
            position += 1
        elif char in "*+?" or (char == "{" and _REGEX_BOUND_RE.match(pattern, position)):
            if not quantifiable:
                # also catches Python's possessive a*+ and a{2}+, which Postgres refuses
                return f"nothing to repeat, or a repeated repeat, at position {position}"
            bound = _REGEX_BOUND_RE.match(pattern, position) if char == "{" else None
            if bound is not None:
                low, high = int(bound.group(1)), bound.group(3)
                top = low if high is None or high == "" else int(high)
                if top > MAX_REGEX_BOUND or low > top:
                    return f"repetition {bound.group(0)} is over {MAX_REGEX_BOUND} or reversed"
                sizes[-1] += last_size * (max(top, 1) - 1)
                position = bound.end()
            else:
                position += 1
            if pattern.startswith("?", position):  # lazy
                position += 1
            quantifiable = False
        elif char == "{" and pattern[position + 1 : position + 2] in (",", *"0123456789"):
            # Python reads a{1 or a{1,2,3} as literal text, Postgres as a bad
            # bound; a{,3} is a bound in Python and literal text in Postgres.
            return f"incomplete repetition bound at position {position}"
        elif char in "|^$":
            quantifiable = False
            position += 1
        else:  # a literal character, ".", "{", "}" or "]"
            last_size, quantifiable = 1, True
            sizes[-1] += 1
            position += 1
    if lookarounds:
        return "unbalanced ("
    if sizes[0] > MAX_REGEX_SIZE:
        return f"its repetitions expand to over {MAX_REGEX_SIZE} states"
    return None


def _regex_class_end(pattern: str, start: int) -> int | str:
    """The position after the bracket expression opening at ``start``, or why it is refused."""
    position = start + 1
    if pattern.startswith("^", position):
        position += 1
    if pattern.startswith("]", position):  # a leading ] is a literal in both
        position += 1
    while position < len(pattern):
        char = pattern[position]
        if char == "]":
            return position + 1
        for reserved in _REGEX_CLASS_RESERVED:
            if pattern.startswith(reserved, position):
                return f"{reserved!r} inside [...] is read differently by Python and Postgres"
        if char == "\\":
            escaped = pattern[position + 1 : position + 2]
            if escaped not in _REGEX_CLASS_ESCAPES and escaped not in _REGEX_PUNCTUATION:
                return f"\\{escaped} inside [...] is not supported by both"
            if pattern.startswith("-", position + 2) and not pattern.startswith("-]", position + 2):
                return "a range inside [...] must run between two plain characters"
            position += 2
        elif pattern.startswith("-", position + 1) and not pattern.startswith("-]", position + 1):
            high = pattern[position + 2 : position + 3]
            # a "-" as the upper end reads as Python's reserved "--"
            if high in ("", "-", "\\", "[", "]") or high < char:
                return f"bad range {pattern[position:position + 3]!r} inside [...]"
            position += 3
            if pattern.startswith("-", position) and not pattern.startswith("-]", position):
                return "a range inside [...] cannot be followed by another -"
        else:
            position += 1
    return "unterminated [...]"


def _as_dataclass(argument: str, value: object, cls: type[E]) -> E:
    """Accept the dataclass itself or a dict with exactly its field names."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise InvalidArgument(argument, f"must be a {cls.__name__} or a dict")
    if not is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    known = {f.name for f in fields(cls)}
    for key in value:
        if key not in known:
            raise InvalidArgument(
                f"{argument}.{key}", f"unknown option; expected one of {sorted(known)}"
            )
    # A dict without a required field ({"cron": {"tz": "UTC"}}) would make the
    # constructor raise TypeError, which escapes callers catching ValueError.
    for f in fields(cls):
        if f.name not in value and f.default is MISSING and f.default_factory is MISSING:
            raise InvalidArgument(f"{argument}.{f.name}", "is required")
    return cls(**value)


def backoff(value: object, argument: str = "retry.backoff") -> Backoff:
    b = _as_dataclass(argument, value, Backoff)
    try:
        strategy = BackoffStrategy(b.strategy)
    except ValueError:
        raise InvalidArgument(f"{argument}.strategy", f"unknown strategy {b.strategy!r}") from None
    if isinstance(b.factor, bool) or not isinstance(b.factor, (int, float)):
        raise InvalidArgument(f"{argument}.factor", "must be a number")
    if not 1 <= b.factor <= 1000:
        raise InvalidArgument(f"{argument}.factor", f"must be between 1 and 1000, got {b.factor}")
    seconds(f"{argument}.max_delay_seconds", b.max_delay_seconds)
    if not isinstance(b.jitter, bool):
        raise InvalidArgument(f"{argument}.jitter", "must be a bool")
    return Backoff(strategy, float(b.factor), b.max_delay_seconds, b.jitter)


def retry_policy(value: object, argument: str = "retry") -> RetryPolicy | None:
    if value is None:
        return None
    r = _as_dataclass(argument, value, RetryPolicy)
    integer(f"{argument}.max_attempts", r.max_attempts, minimum=1, maximum=1_000_000)
    integer(f"{argument}.delay_seconds", r.delay_seconds, minimum=0)
    return RetryPolicy(r.max_attempts, r.delay_seconds, backoff(r.backoff, f"{argument}.backoff"))


def retention(value: object, argument: str = "retention") -> Retention | None:
    if value is None:
        return None
    r = _as_dataclass(argument, value, Retention)
    seconds(f"{argument}.ttl_seconds", r.ttl_seconds)
    optional_integer(f"{argument}.keep_completed", r.keep_completed, minimum=0)
    optional_integer(f"{argument}.keep_failed", r.keep_failed, minimum=0)
    seconds(f"{argument}.completed_ttl_seconds", r.completed_ttl_seconds)
    seconds(f"{argument}.failed_ttl_seconds", r.failed_ttl_seconds)
    return r


def default_retention(value: object, argument: str = "default_retention") -> Retention:
    """A client's retention defaults. Its plain ttl is ``default_retention_seconds``,
    which exists already: one setting, not two that could disagree."""
    checked = retention(value, argument) or Retention()
    if checked.ttl_seconds is not None:
        raise InvalidArgument(f"{argument}.ttl_seconds", "is set by default_retention_seconds")
    return checked


def cron_spec(value: object, argument: str = "schedule.cron") -> CronSpec:
    spec = (
        CronSpec(value)
        if isinstance(value, str)
        else _as_dataclass(argument, value, CronSpec)
    )
    pattern = text(f"{argument}.pattern", spec.pattern, max_length=256)
    if cron.drawn_field(pattern) is not None:
        raise InvalidArgument(f"{argument}.pattern", cron.DRAWN_REFUSAL)
    if not croniter.is_valid(pattern):
        raise InvalidArgument(
            f"{argument}.pattern", f"is not a valid cron expression: {pattern!r}"
        )
    tz = text(f"{argument}.tz", spec.tz, max_length=64)
    try:
        zone = ZoneInfo(tz)
    # OSError: a tzdata directory such as "America" is opened as a file and
    # raises IsADirectoryError rather than ZoneInfoNotFoundError.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(f"{argument}.tz", f"unknown IANA time zone {tz!r}") from None
    # Syntax is not enough: "0 0 30 2 *" (February 30) or a past year field
    # parse, then never fire. The add checks again on the database clock.
    try:
        first = cron.next_match(pattern, tz, datetime.now(zone))
    except ValueError:
        first = None
    if first is None:
        raise InvalidArgument(
            f"{argument}.pattern", f"never fires (no next occurrence): {pattern!r}"
        )
    return CronSpec(pattern, tz)


def schedule(value: object, argument: str = "schedule") -> Schedule | None:
    if value is None:
        return None
    s = _as_dataclass(argument, value, Schedule)
    modes = [
        m
        for m in ("start_after_seconds", "start_at", "start_every_seconds", "cron")
        if getattr(s, m) is not None
    ]
    if len(modes) != 1:
        raise InvalidArgument(
            argument,
            f"pass exactly one of start_after_seconds, start_at, "
            f"start_every_seconds, cron; got {modes or 'none'}",
        )
    if s.misfire_grace_seconds is not None and not s.recurring:
        raise InvalidArgument(f"{argument}.misfire_grace_seconds",
                              "applies to recurring schedules only (start_every_seconds, cron)")
    if s.key is not None and not s.recurring:
        raise InvalidArgument(f"{argument}.key",
                              "names a recurring schedule (start_every_seconds, cron)")
    return Schedule(
        key=optional_text(f"{argument}.key", s.key),
        misfire_grace_seconds=seconds(
            f"{argument}.misfire_grace_seconds", s.misfire_grace_seconds, minimum=1),
        start_after_seconds=seconds(f"{argument}.start_after_seconds", s.start_after_seconds),
        start_every_seconds=seconds(
            f"{argument}.start_every_seconds", s.start_every_seconds, minimum=1
        ),
        cron=None if s.cron is None else cron_spec(s.cron, f"{argument}.cron"),
        start_at=start_at(f"{argument}.start_at", s.start_at),
    )


def start_at(argument: str, value: object) -> datetime | None:
    """An aware datetime. A naive one is refused: read as UTC or as the host's
    zone, it would silently start hours early or late on some machine."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidArgument(argument, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidArgument(argument, "must be timezone-aware (a naive datetime has no "
                              "fixed instant): pass e.g. datetime.now(timezone.utc)")
    return value


class JobSpec(NamedTuple):
    """One validated job to add. ``None`` means "the queue's default, else the built-in one".

    A named tuple rather than a frozen dataclass: one is built per job added,
    and a tuple is built several times faster."""

    id: str
    data_json: str
    priority: int = 0
    # Fractional only for schedule.start_at (the delay to an exact instant).
    start_after_seconds: float = 0
    retry: RetryPolicy | None = None
    expire_in_seconds: int | None = None
    retention_ttl_seconds: int | None = None
    timeout_seconds: int | None = None
    preferred_instance_key_pattern: str | None = None
    idempotency_key: str | None = None
    singleton_key: str | None = None
    group_id: str | None = None
    # Set by the client, never by a caller: the add span's trace context
    # (portqueue.metrics.tracing), stored in the row's attrs.
    attrs: Mapping[str, str] | None = None
    retention_completed_ttl_seconds: int | None = None
    retention_failed_ttl_seconds: int | None = None
    # Flow control (SPEC §8).
    partition_key: str | None = None
    throttle: Throttle | None = None
    debounce: Debounce | None = None

    def columns(self) -> dict[str, Any]:
        """The columns this entry sets besides its id and data, by column name.

        An option left to the queue's default (or, for priority and delay, to
        0) is absent: add_jobs sends a column only when some entry sets it."""
        if self[2:] == _DEFAULT_OPTIONS:
            return {}  # the common entry (this runs for every job added)
        values: dict[str, Any] = {
            "priority": self.priority or None,
            "start_after_seconds": self.start_after_seconds or None,
            "expire_in_seconds": self.expire_in_seconds,
            "retention_ttl_seconds": self.retention_ttl_seconds,
            "timeout_seconds": self.timeout_seconds,
            "preferred_instance_key_pattern": self.preferred_instance_key_pattern,
            "idempotency_key": self.idempotency_key,
            "singleton_key": self.singleton_key,
            "group_id": self.group_id,
            "retention_completed_ttl_seconds": self.retention_completed_ttl_seconds,
            "retention_failed_ttl_seconds": self.retention_failed_ttl_seconds,
            "partition_key": self.partition_key,
            "debounce_key": None if self.debounce is None else self.debounce.key,
        }
        if self.retry is not None:
            values.update(retry_columns(self.retry))
        if self.attrs:
            values["attrs"] = json.dumps(dict(self.attrs), ensure_ascii=False)
        return {column: value for column, value in values.items() if value is not None}


# A JobSpec's options when only data is given: every field after id and data at its default.
_DEFAULT_OPTIONS = JobSpec("", "")[2:]


class QueueDefaults(NamedTuple):
    """The add-time options a client's handler declares for its queue: they fill
    what a job leaves unset, so the client's own adds follow its declaration
    from the first job on, whether or not a worker has written the queue's row.
    (Retention, leases, the dead-letter queue are read when a job runs or is
    pruned, by then from the row a worker wrote.)"""

    retry: RetryPolicy | None
    expire_in_seconds: int | None
    timeout_seconds: int | None

    def fill(self, spec: JobSpec) -> JobSpec:
        """``spec`` with each option it leaves unset taken from these defaults."""
        return spec._replace(
            # A job's retry policy is taken whole or not at all, as in SQL.
            retry=self.retry if spec.retry is None else spec.retry,
            expire_in_seconds=(self.expire_in_seconds if spec.expire_in_seconds is None
                               else spec.expire_in_seconds),
            timeout_seconds=(self.timeout_seconds if spec.timeout_seconds is None
                             else spec.timeout_seconds),
        )


def retry_columns(retry: RetryPolicy) -> dict[str, Any]:
    """A retry policy as the column names the job and queue tables use."""
    return {
        "max_attempts": retry.max_attempts,
        "retry_delay_seconds": retry.delay_seconds,
        "backoff_strategy": retry.backoff.strategy.value,
        # float, as the column is: an int factor among float ones would give
        # the batch's array the wrong element type
        "backoff_factor": float(retry.backoff.factor),
        "backoff_max_delay_seconds": retry.backoff.max_delay_seconds,
        "backoff_jitter": retry.backoff.jitter,
    }


JOB_OPTION_KEYS = frozenset(
    {
        "data",
        "schedule",
        "priority",
        "retry",
        "expire_in_seconds",
        "retention",
        "preferred_instance_key_pattern",
        "idempotency_key",
        "singleton_key",
        "group_id",
        "timeout_seconds",
        "partition_key",
        "throttle",
        "debounce",
    }
)


def job_spec(
    options: Mapping[str, Any],
    *,
    instance_key: str | None,
    max_payload_bytes: int,
    prefix: str = "",
    job_id: str | None = None,
) -> tuple[JobSpec, Schedule | None]:
    """Validate one add's options; returns the spec and its schedule (if any).
    The job's id is ``job_id`` (one of a batch's ``uuid7s``), else a new one."""
    for key in options:
        if key not in JOB_OPTION_KEYS:
            raise InvalidArgument(f"{prefix}{key}", "unknown option")
    if "data" not in options:
        raise InvalidArgument(f"{prefix}data", "is required")
    data_json = payload(f"{prefix}data", options["data"], max_payload_bytes)
    if job_id is None:
        job_id = uuid7()
    if _takes_defaults(options):
        # The common add, data and nothing else (this runs for every job added).
        return JobSpec(job_id, data_json), None
    sched = schedule(options.get("schedule"), f"{prefix}schedule")
    pattern = options.get("preferred_instance_key_pattern")
    if pattern is not None:
        pattern = regex(f"{prefix}preferred_instance_key_pattern", pattern)
        if instance_key is None:
            # The pattern is matched against claimers' keys; a producer without
            # one has no notion of instances, so the pattern is almost surely a bug.
            raise InvalidArgument(
                f"{prefix}preferred_instance_key_pattern",
                "requires the client to have an instance_key",
            )
    ret = retention(options.get("retention"), f"{prefix}retention")
    if ret is not None and (ret.keep_completed is not None or ret.keep_failed is not None):
        raise InvalidArgument(f"{prefix}retention", "keep_completed/keep_failed are queue options")
    spec = JobSpec(
        id=job_id,
        data_json=data_json,
        priority=integer(
            f"{prefix}priority", options.get("priority", 0), minimum=-INT32_MAX, maximum=INT32_MAX
        ),
        start_after_seconds=(sched.start_after_seconds or 0) if sched else 0,
        retry=retry_policy(options.get("retry"), f"{prefix}retry"),
        expire_in_seconds=seconds(
            f"{prefix}expire_in_seconds", options.get("expire_in_seconds"), minimum=1
        ),
        retention_ttl_seconds=None if ret is None else ret.ttl_seconds,
        timeout_seconds=seconds(
            f"{prefix}timeout_seconds", options.get("timeout_seconds"), minimum=1
        ),
        preferred_instance_key_pattern=pattern,
        idempotency_key=optional_text(f"{prefix}idempotency_key", options.get("idempotency_key")),
        singleton_key=optional_text(f"{prefix}singleton_key", options.get("singleton_key")),
        group_id=optional_text(f"{prefix}group_id", options.get("group_id")),
        retention_completed_ttl_seconds=None if ret is None else ret.completed_ttl_seconds,
        retention_failed_ttl_seconds=None if ret is None else ret.failed_ttl_seconds,
    )
    if any(options.get(key) is not None for key in ("partition_key", "throttle", "debounce")):
        spec = _with_flow_control(spec, sched, options, prefix)
    return spec, sched


def _takes_defaults(options: Mapping[str, Any]) -> bool:
    """True if no option but data is set: every other one is None, and priority 0."""
    for key, value in options.items():
        if key == "priority":
            # type(), not isinstance(): True is an int, and never a priority
            if type(value) is not int or value != 0:
                return False
        elif value is not None and key != "data":
            return False
    return True


def job_entries(jobs: object) -> list[Mapping[str, Any]]:
    if isinstance(jobs, (str, bytes, Mapping)) or not isinstance(jobs, Sequence):
        raise InvalidArgument("jobs", "must be a list of job option dicts")
    for index, entry in enumerate(jobs):
        if not isinstance(entry, Mapping):
            raise InvalidArgument(f"jobs[{index}]", "must be a dict of job options")
    return list(jobs)


def batch_tx(tx: object, jobs: object) -> object:
    """The one transaction a batch runs in: the call's, or the one all entries name.

    add_jobs is one INSERT, so entries cannot be split across transactions:
    either no entry names a tx, or every entry names the same one."""
    entry_txs = [entry.get("tx") for entry in job_entries(jobs)]
    named = [t for t in entry_txs if t is not None]
    if not named:
        return tx
    for index, entry_tx in enumerate(entry_txs):
        if entry_tx is not named[0] or (tx is not None and entry_tx is not tx):
            raise InvalidArgument(f"jobs[{index}].tx", "every entry must share the same tx")
    return named[0]


def positive_seconds(argument: str, value: object) -> float:
    """A duration in seconds that may be fractional: waits and intervals, not schedules."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgument(argument, f"must be a number of seconds, got {type(value).__name__}")
    if not 0 < value <= 365 * 24 * 3600:
        raise InvalidArgument(argument, f"must be more than 0 and at most a year, got {value}")
    return float(value)


def known_queues(queues: object, registered: Mapping[str, Any]) -> list[str]:
    if isinstance(queues, (str, bytes)) or not isinstance(queues, Sequence):
        raise InvalidArgument("queues", "must be a list of queue names")
    for name in queues:
        if name not in registered:
            raise InvalidArgument("queues", f"{name!r} has no handler in this client")
    return list(queues)


def is_recurring(value: object) -> bool:
    checked = schedule(value)
    return checked is not None and checked.recurring


# --- flow control (SPEC §8) ---

MAX_PARTITION_KEY_LENGTH = 256


def limit(argument: str, value: object) -> int | None:
    """A concurrency limit: a positive count, or None for none."""
    return optional_integer(argument, value, minimum=1, maximum=1_000_000)


def rate_limit(value: object, argument: str = "rate_limit") -> RateLimit | None:
    if value is None:
        return None
    r = _as_dataclass(argument, value, RateLimit)
    integer(f"{argument}.limit", r.limit, minimum=1, maximum=1_000_000)
    integer(f"{argument}.period_seconds", r.period_seconds, minimum=1, maximum=366 * 24 * 3600)
    if not isinstance(r.per_partition, bool):
        raise InvalidArgument(f"{argument}.per_partition", "must be a bool")
    return r


def rate_limit_columns(value: RateLimit | None) -> dict[str, Any]:
    """A rate limit as the queue table's columns (all NULL: none)."""
    return {
        "rate_limit": None if value is None else value.limit,
        "rate_limit_period_seconds": None if value is None else value.period_seconds,
        "rate_limit_per_partition": None if value is None else value.per_partition,
    }


def throttle(value: object, argument: str = "throttle") -> Throttle:
    t = _as_dataclass(argument, value, Throttle)
    return Throttle(
        key=text(f"{argument}.key", t.key),
        seconds=integer(f"{argument}.seconds", t.seconds, minimum=1),
    )


def debounce(value: object, argument: str = "debounce") -> Debounce:
    d = _as_dataclass(argument, value, Debounce)
    return Debounce(
        key=text(f"{argument}.key", d.key),
        seconds=integer(f"{argument}.seconds", d.seconds, minimum=1),
        max_wait_seconds=seconds(f"{argument}.max_wait_seconds", d.max_wait_seconds, minimum=1),
    )


def _with_flow_control(spec: JobSpec, sched: Schedule | None, options: Mapping[str, Any],
                       prefix: str) -> JobSpec:
    """``spec`` with its partition key, throttle and debounce checked."""
    key = options.get("partition_key")
    partition_key = None if key is None else text(
        f"{prefix}partition_key", key, max_length=MAX_PARTITION_KEY_LENGTH)
    throttled = None
    debounced = None
    if options.get("throttle") is not None:
        throttled = throttle(options["throttle"], f"{prefix}throttle")
    if options.get("debounce") is not None:
        debounced = debounce(options["debounce"], f"{prefix}debounce")
    keyed = throttled is not None or debounced is not None
    if throttled is not None and debounced is not None:
        raise InvalidArgument(f"{prefix}debounce", "cannot be combined with throttle")
    if keyed:
        argument = f"{prefix}{'throttle' if throttled is not None else 'debounce'}"
        # Each decides on its own whether an add creates a job; a second key
        # deciding the same would make the add's result ambiguous.
        for other in ("idempotency_key", "singleton_key"):
            if options.get(other) is not None:
                raise InvalidArgument(argument, f"cannot be combined with {other}")
        if sched is not None:
            # A debounce sets the start itself; a recurring add has no one job.
            raise InvalidArgument(argument, "cannot be combined with schedule")
    if debounced is not None:
        # The first add starts after the delay too, never past the cap.
        delay = debounced.seconds if debounced.max_wait_seconds is None else min(
            debounced.seconds, debounced.max_wait_seconds)
        spec = spec._replace(start_after_seconds=delay)
    return spec._replace(partition_key=partition_key, throttle=throttled, debounce=debounced)
