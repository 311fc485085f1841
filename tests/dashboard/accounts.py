"""The dashboard tests' credentials (a module of their own: the conftest and
the browser fixtures both need them)."""

USER, PASSWORD = "admin", "correct horse battery"
TOKEN = "s3cret-dashboard-token"
