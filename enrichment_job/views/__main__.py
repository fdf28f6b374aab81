"""python -m enrichment_job.views: keep the materialized views of the enriched stream live until
stopped (customer_ratings, segment_hourly), each in Spark's RocksDB state and in its compacted
changelog topic.

Settings come from VIEWS_JOB_* environment variables or the file named by VIEWS_JOB_ENV_FILE.
"""

import logging
import os
import sys

from enrichment_job.cli import CONFIG_EXIT, load_or_exit, run_until_stopped, stop_on_signals
from enrichment_job.views.settings import ViewsSettings
from services.core.errors import ConfigError
from services.core.logs import configure_or_exit


def main(argv: list[str]) -> int:
    settings = load_or_exit(ViewsSettings, argv, "python -m enrichment_job.views", __doc__ or "")
    configure_or_exit()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("enrichment_job.views")
    stopping = stop_on_signals(log)
    if settings.nice:
        # Where the views share a host's cores with the enrichment job, a batch of enrichment
        # (alerts wait for it) goes first, e.g. while the views rebuild from the topic's start.
        os.nice(settings.nice)
    from enrichment_job.views.app import start  # noqa: PLC0415 (Spark loads only past --help)

    try:
        views = start(settings)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return CONFIG_EXIT
    return run_until_stopped(views.spark, views.stop, log, stopping)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
