"""What the hostile-input properties share: a CI-sized hypothesis profile and
hostile values of every type (the "refused, nothing written" check is
tests/support/refusals.py, shared with tests/integration/test_bad_input.py).

The profile is derandomized (the same examples on every run, so a CI failure
reproduces) and small: every property here runs against a real server, both
clients. ``PORTQUEUE_HYPOTHESIS_EXAMPLES`` raises the budget for a local soak.
"""

from __future__ import annotations

import os
from decimal import Decimal
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

HOSTILE = settings(
    max_examples=int(os.environ.get("PORTQUEUE_HYPOTHESIS_EXAMPLES", "40")),
    derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

# Integers where bugs live: the int32 and int64 edges (the columns are
# integer; a bigint or numeric cast would accept what an int column cannot
# hold), far beyond them, and Python-only sizes.
edge_integers = st.sampled_from([
    -(2**64), -INT64_MAX - 1, -(2**31), -INT32_MAX, -1, 0, 1, 2, 999_999, 1_000_000,
    1_000_001, INT32_MAX - 1, INT32_MAX, INT32_MAX + 1, INT64_MAX, INT64_MAX + 1, 2**64,
    10**100,
])
# Values of the wrong type that Python would happily treat as a number.
wrong_types = st.one_of(
    st.booleans(),
    st.floats(),
    st.sampled_from([1.0, 0.0, -0.0, 2.5, 1e300, float("nan"), float("inf"), "1", "", b"1",
                     Decimal(1), Decimal("NaN"), Fraction(3, 1), complex(1, 0), [1], (1,),
                     {"n": 1}, object()]),
)


def hostile_numbers(minimum: int, maximum: int) -> st.SearchStrategy[Any]:
    """Anything a caller might pass where an int in [minimum, maximum] belongs."""
    return st.one_of(
        edge_integers, wrong_types, st.integers(),
        st.integers(minimum - 2, minimum + 2), st.integers(maximum - 2, maximum + 2))
