"""Exceptions named in ``TaskResult.errors`` for jobs that ended without raising.

A job cancelled (``cancel_job``) or expired (``expire_in_seconds``) has no
exception of its own, yet Django shows it as ``FAILED``; these classes give
its last ``TaskError`` an importable ``exception_class_path`` saying why.
"""

from __future__ import annotations


class TaskCancelled(Exception):
    """The task's job was cancelled (portqueue status ``cancelled``)."""


class TaskExpired(Exception):
    """The task's job expired before it started (portqueue status ``expired``)."""
