"""Client connections built from <state>/stack.env (what `make up` writes for clients)."""

from typing import Any

import pymysql


def app_db(env: dict[str, str]) -> Any:
    """MariaDB as the application's least-privilege user (reads and writes demo.customers), autocommit."""
    return pymysql.connect(
        host=env["MARIADB_HOST"],
        port=int(env["MARIADB_PORT"]),
        user=env["APP_DB_USER"],
        password=env["APP_DB_PASSWORD"],
        database=env["MARIADB_DATABASE"],
        autocommit=True,
    )
