"""python -m enrichment_job: run the CDC ingestion and enrichment queries until stopped.

Settings come from ENRICH_* environment variables or the file named by ENRICH_ENV_FILE.
"""

import logging
import os
import signal
import sys
import threading
from types import FrameType

from pydantic import ValidationError
from pydantic_settings import SettingsError
from pyspark.errors import StreamingQueryException

from enrichment_job.app import start
from enrichment_job.settings import JobSettings


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # py4j logs every callback (each batch, each progress event) at INFO.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    log = logging.getLogger("enrichment_job")
    try:
        settings = JobSettings(_env_file=os.environ.get("ENRICH_ENV_FILE"))
    except ValidationError as err:
        for problem in err.errors():
            name = "_".join(str(p) for p in problem["loc"]).upper()
            name = name if name.startswith("ENRICH_") else f"ENRICH_{name}"
            print(f"error: setting {name}: {problem['msg']}", file=sys.stderr)
        return 2
    except SettingsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    job = start(settings)
    stopping = _stop_on_signals(log)
    code = 0
    try:
        while not stopping.is_set():
            if job.spark.streams.awaitAnyTermination(1):
                log.warning("the query stopped; the job stops")
                break
    except StreamingQueryException as err:
        log.error("the query failed; the job stops (restart it to resume from the checkpoint): %s", err)
        code = 1
    finally:
        job.stop()
    return code


def _stop_on_signals(log: logging.Logger) -> threading.Event:
    """Turns SIGINT and SIGTERM into a request to stop, acted on between calls into the JVM.

    PySpark's own SIGINT handler calls into the JVM from inside the signal handler, which breaks
    the py4j connection the main thread is waiting on and ends the job with a traceback.
    """
    stopping = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("%s: stopping (a batch in flight is redone on restart)", signal.Signals(signum).name)
        stopping.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, request_stop)
    return stopping


if __name__ == "__main__":
    sys.exit(main())
