"""python -m services.views: the materialized views' query service. Loads the views' changelog
topics into an embedded store and serves them over HTTP on 127.0.0.1:8087 by default:
GET /views, /views/<name>/<key>, /views/<name>?<column>=<value>&limit=N,
/views/<name>/changes (Server-Sent Events), /health; and over PostgreSQL's wire protocol, read
only, on 127.0.0.1:6875 (psql -h 127.0.0.1 -p 6875 -c "SELECT * FROM customer_ratings LIMIT 5").

Settings come from VIEWS_* environment variables or the file named by VIEWS_ENV_FILE. Exit codes:
0 stopped on request, 1 Kafka or the store failed, 2 a bad setting.
"""

import asyncio
import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Iterator

import uvicorn

from foundation.errors import ConfigError
from foundation.help import settings_help
from foundation.logs import configure_or_exit
from foundation.settings import load_settings
from services.views.api import Api
from services.views.changelog import ChangelogProcess
from services.views.config import ViewsApiSettings
from services.views.hub import Hub
from services.views.pgwire import PgServer
from services.views.protocol import pull_protocol
from services.views.sql import SqlReader
from services.views.store import Store


class _Server(uvicorn.Server):
    """uvicorn's server, stopped by us: its own signal handling raises the signal again once it
    has shut down, which ends the process by that signal instead of with exit code 0. Its event
    loop takes the changelog process's messages."""

    def __init__(self, config: uvicorn.Config, changelog: ChangelogProcess, pg: PgServer | None) -> None:
        super().__init__(config)
        self.changelog = changelog
        self.pg = pg

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        await self.changelog.attach(asyncio.get_running_loop())
        if self.pg is not None:
            await self.pg.start()
        try:
            await super().serve(sockets)
        finally:
            if self.pg is not None:
                await self.pg.close()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def stop(self) -> None:
        self.should_exit = True


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print(settings_help(ViewsApiSettings, "python -m services.views", __doc__ or ""))
        return 0
    configure_or_exit()
    try:
        settings = load_settings(ViewsApiSettings)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    logging.getLogger().setLevel(settings.log_level.upper())
    log = logging.getLogger("views")
    store, hub = Store(settings.state_dir / "store.sqlite3", settings.store_cache_kib()), Hub()
    changelog = ChangelogProcess(settings, store, hub)
    api = Api(settings, store, hub, changelog)
    pg = None
    if settings.pg_port:
        sql = SqlReader(
            store,
            max_rows=settings.pg_max_rows,
            max_bytes=settings.pg_max_bytes,
            timeout_s=settings.pg_timeout_s,
            loading=api.loading_views,
        )
        pg = PgServer(sql, settings.pg(), follow=api.follow)
    server = _Server(
        uvicorn.Config(
            api.app(),
            # pulls answered without the app's request cycle; requests bounded in bytes and time
            http=pull_protocol(api.pull, settings.bounds(), settings.access()),
            limit_concurrency=settings.max_connections,
            host=settings.host,
            port=settings.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=1,
        ),
        changelog,
        pg,
    )
    changelog.on_end = server.stop
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: server.stop())
    changelog.start()
    log.info(
        "serving on http://%s:%d (views: %s)",
        settings.host,
        settings.port,
        ", ".join(settings.changelog_topics),
    )
    server.run()  # until SIGINT or SIGTERM
    changelog.stop()
    if changelog.failed is not None:
        log.error("stopped: reading the changelog topics failed: %s", changelog.failed)
        return 1
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
