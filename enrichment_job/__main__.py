"""python -m enrichment_job: run the CDC ingestion and enrichment queries until stopped.

Settings come from ENRICH_* environment variables or the file named by ENRICH_ENV_FILE.
"""

import logging
import sys

from enrichment_job.app import start
from enrichment_job.cli import load_or_exit, run_until_stopped, stop_on_signals
from enrichment_job.settings import JobSettings
from enrichment_job.views.settings import ViewsSettings


def main(argv: list[str]) -> int:
    settings = load_or_exit(JobSettings, argv, "python -m enrichment_job", __doc__ or "")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # py4j logs every callback (each batch, each progress event) at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("enrichment_job")
    stopping = stop_on_signals(log)
    views = None
    if settings.views_in_job:
        views = load_or_exit(ViewsSettings, [], "python -m enrichment_job", __doc__ or "")
    job = start(settings, views)
    return run_until_stopped(job.spark, job.stop, log, stopping)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
