"""Write sql/schema.sql, the DDL snapshot: every migration applied to an empty database.

The snapshot is exactly ``portqueue migrate --sql`` for the default schema,
alembic's version table included (it is part of the real state). Run it after
every change to migrations/; tests/migrations/test_schema_snapshot.py fails
while the two disagree. ``--check`` only reports whether the file is current.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from portqueue.migrate import migration_sql  # noqa: E402

TARGET = ROOT / "sql" / "schema.sql"


def generate() -> str:
    return migration_sql()


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is stale: run python tools/dump_schema.py")
            return 1
        print(f"{TARGET.relative_to(ROOT)} is current")
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
