"""``CancelCounts``, what ``cancel_jobs`` returns: an ``int`` (the jobs acted on,
so ``cancel_jobs(...) == 3`` reads naturally) that also says how many of each."""

from __future__ import annotations

import copy
import json
import pickle

from portqueue import CancelCounts


def test_it_is_the_jobs_acted_on_and_says_how_many_of_each() -> None:
    counts = CancelCounts(cancelled=3, signalled=2, already_finished=1, not_found=4)
    assert counts == 5 and isinstance(counts, int)
    assert (counts.cancelled, counts.signalled, counts.already_finished, counts.not_found) == (
        3, 2, 1, 4)
    assert repr(counts) == ("CancelCounts(cancelled=3, signalled=2, already_finished=1, "
                            "not_found=4)")
    assert json.dumps({"acted": counts}) == '{"acted": 5}'
    assert CancelCounts() == 0


def test_it_survives_a_copy_and_a_pickle() -> None:
    counts = CancelCounts(cancelled=1, signalled=2, already_finished=3, not_found=4)
    for again in (copy.copy(counts), pickle.loads(pickle.dumps(counts))):
        assert again == 3 and repr(again) == repr(counts)
