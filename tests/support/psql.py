"""The real psql (Debian's postgresql-client, which `make install` installs) asking one query
of a PostgreSQL wire protocol port, unaligned: rows as `a|b` lines, errors with their SQLSTATE."""

import os
import subprocess


def psql(
    port: int, sql: str, user: str = "tests", password: str | None = None, zone: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`sql` run by psql; `zone`: the session's TimeZone, as PGTZ gives it at start-up."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}  # no PGHOST of the caller's
    if password is not None:
        env["PGPASSWORD"] = password
    if zone is not None:
        env["PGTZ"] = zone
    dsn = f"host=127.0.0.1 port={port} user={user} dbname=views sslmode=prefer connect_timeout=5"
    return subprocess.run(
        ["psql", dsn, "-X", "-A", "-t", "-F", "|", "-v", "VERBOSITY=verbose", "-w", "-c", sql],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
