"""python -m enrichment_job: run the CDC ingestion and enrichment queries until stopped.

Settings come from ENRICH_* environment variables or the file named by ENRICH_ENV_FILE.
"""

import logging
import os
import sys

from pydantic import ValidationError

from enrichment_job.app import start
from enrichment_job.settings import JobSettings


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = JobSettings(_env_file=os.environ.get("ENRICH_ENV_FILE"))
    except ValidationError as err:
        for problem in err.errors():
            name = "ENRICH_" + "_".join(str(p) for p in problem["loc"]).upper()
            print(f"error: setting {name}: {problem['msg']}", file=sys.stderr)
        return 2
    spark, _queries = start(settings)
    try:
        spark.streams.awaitAnyTermination()
    except KeyboardInterrupt:
        logging.getLogger("enrichment_job").info("stopping")
    finally:
        for query in spark.streams.active:
            query.stop()
    failed = [q for q in _queries if q.exception() is not None]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
