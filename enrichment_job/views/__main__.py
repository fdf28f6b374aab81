"""python -m enrichment_job.views: keep the materialized views of the enriched stream live until
stopped (customer_ratings, segment_hourly), each in Spark's RocksDB state and in its compacted
changelog topic.

Settings come from VIEWS_JOB_* environment variables or the file named by VIEWS_JOB_ENV_FILE.

python -m enrichment_job.views validate FILE... checks views declared in SQL (see
`definition`) and creates nothing.
"""

import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from enrichment_job.runtime.cli import CONFIG_EXIT, load_or_exit, run_until_stopped, stop_on_signals
from enrichment_job.views import commands
from enrichment_job.views.background import BackgroundProcess
from enrichment_job.views.commands import COMMANDS
from enrichment_job.views.settings import KEYED_QUERY, ViewsSettings
from foundation.errors import ConfigError
from foundation.logs import configure_or_exit

if TYPE_CHECKING:
    from enrichment_job.views.app import RunningViews
    from enrichment_job.views.user_views import SqlViews


def main(argv: list[str]) -> int:
    if argv and argv[0] in COMMANDS:
        return commands.main(argv)
    settings = load_or_exit(ViewsSettings, argv, "python -m enrichment_job.views", __doc__ or "")
    configure_or_exit()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("enrichment_job.views")
    stopping = stop_on_signals(log)
    if settings.nice:
        # Where the views share a host's cores with the enrichment job, a batch of enrichment
        # (alerts wait for it) goes first, e.g. while the views rebuild from the topic's start.
        os.nice(settings.nice)
        _session_nice(settings.nice, log)
    background = None
    if settings.background_process:
        background = BackgroundProcess(settings, stopping.set)
        settings = settings.model_copy(update={"queries": KEYED_QUERY, "background_process": False})
    from enrichment_job.views.app import start  # noqa: PLC0415 (Spark loads only past --help)

    try:
        views = start(settings)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        code = CONFIG_EXIT
    else:
        sql_views = _follow_the_catalog(views, settings)

        def goes_on() -> bool:
            """The built-in views' queries all run: a SQL view's query that ended (dropped, or
            failed alone) does not stop the job."""
            if sql_views is not None:
                sql_views.healthy()
            return all(q.isActive for q in views.queries)

        def stop() -> None:
            if sql_views is not None:
                sql_views.stop()
            views.stop()

        tick = sql_views.healthy if sql_views is not None else lambda: None
        code = run_until_stopped(views.spark, stop, log, stopping, goes_on=goes_on, tick=tick)
    if background is not None:
        background.stop()
        if background.failed is not None:
            code = code or 1
    return code


def _follow_the_catalog(views: "RunningViews", settings: ViewsSettings) -> "SqlViews | None":
    """The views declared in SQL, kept in this process (the one that keeps customer_ratings,
    when the queries are shared out), following the catalog; None when there is no catalog."""
    if not settings.keeps_sql_views():
        return None
    from enrichment_job.runtime.checkpoints import run_id  # noqa: PLC0415 (Spark loads only past --help)
    from enrichment_job.views.user_views import SqlViews  # noqa: PLC0415

    return SqlViews.follow(views.spark, settings, run_id(settings.state))


def _session_nice(nice: int, log: logging.Logger) -> None:
    """Where Linux groups processes by session (autogroup) the cores are shared between
    sessions, and a nice counts only inside its own: a process that leads its session (the
    background process does) lowers the session's weight too."""
    autogroup = Path("/proc/self/autogroup")
    if os.getsid(0) != os.getpid() or not autogroup.exists():
        return
    try:
        autogroup.write_text(str(nice))
    except OSError as err:
        log.warning("could not lower the session's CPU weight (%s): %s", autogroup, err)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
