"""Client connections built from <state>/stack.env (what `make up` writes for clients)."""

from typing import Any

from services.core import customer_db


def app_db(env: dict[str, str]) -> Any:
    """The customer database (MariaDB or PostgreSQL, as the stack was made) as the application's
    least-privilege user (reads and writes the customers table), autocommit."""
    kind = env.get("CUSTOMER_DB", "mariadb")
    if kind not in customer_db.KINDS:
        raise ValueError(f"CUSTOMER_DB={kind!r} in stack.env: expected one of {customer_db.KINDS}")
    return customer_db.connect(
        kind,
        env.get("CUSTOMER_DB_HOST", env.get("MARIADB_HOST", "127.0.0.1")),
        int(env.get("CUSTOMER_DB_PORT", env.get("MARIADB_PORT", "3306"))),
        env["APP_DB_USER"],
        env["APP_DB_PASSWORD"],
        env.get("CUSTOMER_DB_NAME", "demo"),
    )
