"""SPEC §10: task objects are typed with ParamSpec, so mypy sees ``add``'s
parameters. The functions below are checked by ``mypy tests`` (CI's lint leg);
the test runs mypy on wrong calls and expects each to be reported."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from typing_extensions import assert_type

from portqueue import AddJobResult, AsyncJob, AsyncPortQueue, Job, PortQueue

ROOT = Path(__file__).resolve().parents[2]


def _sync_usage(pq: PortQueue) -> None:
    @pq.task(queue="emails")
    def send(to: str, template: str = "welcome") -> bool:
        return bool(to and template)

    @pq.task(queue="resize")
    def resize(job: Job, image_id: int) -> None: ...

    assert_type(send.add(to="a@b.com"), AddJobResult)
    assert_type(send.add("a@b.com", template="reset"), AddJobResult)
    assert_type(send.configure(priority=10).add(to="a@b.com"), AddJobResult)
    assert_type(send("a@b.com"), bool)
    assert_type(resize.add(image_id=3), AddJobResult)


async def _async_usage(apq: AsyncPortQueue) -> None:
    @apq.task(queue="emails")
    async def send(to: str) -> str:
        return to

    @apq.task(queue="resize")
    async def resize(job: AsyncJob, image_id: int) -> None: ...

    assert_type(await send.add(to="a@b.com"), AddJobResult)
    assert_type(await resize.configure(priority=1).add(image_id=3), AddJobResult)


WRONG_CALLS = {
    'send.add(too="a@b.com")': 'Unexpected keyword argument "too"',
    "send.add(to=1)": 'Argument "to" to "add" of "Task" has incompatible type "int"',
    "send.add()": 'Missing positional argument "to"',
    "resize.add(image_id=\"3\")": 'incompatible type "str"; expected "int"',
}


@pytest.mark.slow
def test_mypy_reports_wrong_arguments_to_add(tmp_path: Path) -> None:
    api = pytest.importorskip("mypy.api")
    lines = "\n".join(f"    {call}" for call in WRONG_CALLS)
    source = textwrap.dedent('''
        from portqueue import Job, PortQueue

        def usage(pq: PortQueue) -> None:
            @pq.task(queue="emails")
            def send(to: str, template: str = "welcome") -> bool:
                return True

            @pq.task(queue="resize")
            def resize(job: Job, image_id: int) -> None: ...

        ''') + lines + "\n"
    checked = tmp_path / "wrong_calls.py"
    checked.write_text(source, encoding="utf-8")
    out, _, status = api.run([str(checked), "--strict", "--no-incremental",
                              "--cache-dir", str(tmp_path / "cache"),
                              "--config-file", str(ROOT / "pyproject.toml")])
    assert status == 1, out
    for call, message in WRONG_CALLS.items():
        assert message in out, f"mypy did not report {call}: {out}"
