"""python -m enrichment_job: run the CDC ingestion and enrichment queries until stopped.

Settings come from ENRICH_* environment variables or the file named by ENRICH_ENV_FILE.

Exit codes: 0 stopped, 1 a query failed (restart it: it resumes from its last commit), 2 a bad
setting, 3 fenced: another instance of the same ENRICH_JOB_NAME took over (do not restart).
"""

import gc
import logging
import sys
from typing import TYPE_CHECKING

from enrichment_job.runtime.cli import (
    CONFIG_EXIT,
    FENCED_EXIT,
    load_or_exit,
    run_until_stopped,
    stop_on_signals,
)
from enrichment_job.runtime.session import APP_NAME, begin_session
from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings
from foundation.errors import ConfigError
from foundation.logs import configure_or_exit

if TYPE_CHECKING:
    from enrichment_job.driver.app import RunningJob
    from enrichment_job.views.user_views import SqlViews

GC_THRESHOLD = 50_000  # above what a consume call returns (kafka.reader.CONSUME_AT_MOST)


def main(argv: list[str]) -> int:
    settings = load_or_exit(JobSettings, argv, "python -m enrichment_job", __doc__ or "")
    configure_or_exit()
    # py4j logs every callback (each batch, each progress event) at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("enrichment_job")
    stopping = stop_on_signals(log)
    # The driver reads Kafka records as Python objects, tens of thousands a call, and frees them
    # at once. At the default threshold (700 allocations) each such call ran the collector a
    # dozen times, and a long CDC read spent a fifth of its time there.
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    views = None
    if settings.views_in_job:
        views = load_or_exit(ViewsSettings, [], "python -m enrichment_job", __doc__ or "")
    # The driver JVM starts first: the job's own modules (Arrow, NumPy, the Kafka client, Delta)
    # load meanwhile, a few tenths of a second of the start.
    session_start = begin_session(settings, APP_NAME)
    from enrichment_job.driver.app import JoinMoved, start  # noqa: PLC0415
    from enrichment_job.driver.recovery import TopicsChanged  # noqa: PLC0415
    from enrichment_job.kafka.reader import RecordsDeleted  # noqa: PLC0415
    from enrichment_job.runtime.checkpoints import ForeignMarker  # noqa: PLC0415

    try:
        job = start(settings, views, session_start)
    except (TopicsChanged, JoinMoved, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return CONFIG_EXIT
    except (RecordsDeleted, ForeignMarker) as err:  # the CDC topic's head gone; a forged marker
        log.error("the job stops: %s", err)
        return 1
    sql_views = _follow_the_catalog(job, views)

    def goes_on() -> bool:
        """The enrichment query and the built-in views run: a view declared in SQL whose query
        ended (dropped, or failed alone) does not stop the job."""
        if sql_views is None:
            return False
        sql_views.healthy()
        return job.query.isActive and all(q.isActive for q in job.views)

    def stop() -> None:
        if sql_views is not None:
            sql_views.stop()
        job.stop()

    code = run_until_stopped(
        job.spark,
        stop,
        log,
        stopping,
        explain=lambda: job.pipeline.refused,
        goes_on=goes_on,
        tick=sql_views.healthy if sql_views is not None else lambda: None,
    )
    if job.pipeline.fenced is not None:
        log.error("%s", job.pipeline.fenced)
        return FENCED_EXIT
    return code


def _follow_the_catalog(job: "RunningJob", views: ViewsSettings | None) -> "SqlViews | None":
    """With the views in this application: the views declared in SQL too, following the catalog."""
    if views is None or not views.keeps_sql_views():
        return None
    from enrichment_job.runtime.checkpoints import run_id  # noqa: PLC0415 (Spark loads only past --help)
    from enrichment_job.views.user_views import SqlViews  # noqa: PLC0415

    return SqlViews.follow(job.spark, views, run_id(views.state))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
