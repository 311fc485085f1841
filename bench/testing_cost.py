"""What the pytest plugin costs a user's test, and a user's test of 100 jobs.

Writes a user's test file (40 tests that add a job on ``pq``, 5 that add 100
jobs with a task and drain them), runs it with pytest in a subprocess with
the plugin, ``--runs`` times, and prints the medians: the ``pq`` fixture's
set-up per test (emptying the schema, after the run's first test migrated
it), its teardown, and the 100-job test's add and drain. Needs
PORTQUEUE_TEST_DSN (or the embedded server, as the plugin finds it).

    python bench/testing_cost.py --runs 3
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CONFTEST = '''
import time
import pytest

pytest_plugins = ["portqueue.testing.pytest_plugin"]
times = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    started = time.perf_counter()
    yield
    times.append(("setup", item.name, time.perf_counter() - started))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    started = time.perf_counter()
    yield
    times.append(("teardown", item.name, time.perf_counter() - started))


def pytest_unconfigure(config):
    for kind, name, seconds in times:
        print(f"TIME {kind} {name} {seconds:.6f}")
'''

USER_TESTS = '''
import time
import pytest


@pytest.mark.parametrize("i", range(40))
def test_add(pq, i):
    pq.add_job(queue="q", data=i)


@pytest.mark.parametrize("i", range(5))
def test_hundred_jobs(pq, i):
    @pq.task(queue="bulk")
    def noop(n: int) -> None: ...

    started = time.perf_counter()
    for n in range(100):
        noop.add(n=n)
    added = time.perf_counter()
    assert pq.drain().completed == 100
    print(f"HUNDRED {added - started:.6f} {time.perf_counter() - added:.6f}")
'''


def one_run(directory: Path) -> dict[str, list[float]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "--rootdir",
         str(directory), str(directory)], cwd=directory, env=env, capture_output=True,
        text=True, timeout=600, check=True)
    figures: dict[str, list[float]] = {"setup": [], "teardown": [], "add": [], "drain": []}
    for kind, name, seconds in re.findall(r"TIME (\w+) (\S+) ([\d.]+)", done.stdout):
        if name.startswith("test_add[") and name != "test_add[0]":  # [0] migrates
            figures[kind].append(float(seconds))
    for add, drain in re.findall(r"HUNDRED ([\d.]+) ([\d.]+)", done.stdout):
        figures["add"].append(float(add))
        figures["drain"].append(float(drain))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="portqueue-testing-cost-") as name:
        directory = Path(name)
        (directory / "conftest.py").write_text(CONFTEST, encoding="utf-8")
        (directory / "test_user.py").write_text(USER_TESTS, encoding="utf-8")
        medians: dict[str, list[float]] = {}
        for _ in range(runs):
            for kind, values in one_run(directory).items():
                medians.setdefault(kind, []).append(statistics.median(values))
    for kind, values in medians.items():
        print(f"{kind:>8}: median of run medians {statistics.median(values) * 1000:7.1f} ms "
              f"(runs: {', '.join(f'{v * 1000:.1f}' for v in values)})")


if __name__ == "__main__":
    main()
