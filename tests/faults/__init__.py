"""Fault injection: real worker processes, real signals, and a ledger that proves
nothing is lost (issue 7's harness; see ``harness.py``)."""
