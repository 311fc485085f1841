#!/usr/bin/env python
"""The test project's manage.py: ``python tests/django/manage.py portqueue_worker``."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # The project lives in the `tests` package at the repository's top.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.project.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
