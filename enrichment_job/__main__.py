"""python -m enrichment_job: run the CDC ingestion and enrichment queries until stopped.

Settings come from ENRICH_* environment variables or the file named by ENRICH_ENV_FILE.
"""

import logging
import os
import sys

from pydantic import ValidationError
from pydantic_settings import SettingsError
from pyspark.errors import StreamingQueryException

from enrichment_job.app import start
from enrichment_job.settings import JobSettings


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
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
    spark, _queries, table = start(settings)
    code = 0
    try:
        spark.streams.awaitAnyTermination()
    except KeyboardInterrupt:
        log.info("stopping")
    except StreamingQueryException as err:
        log.error("a query failed; the job stops (restart it to resume from the checkpoint): %s", err)
        code = 1
    finally:
        for query in spark.streams.active:
            query.stop()
        table.close()
        spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
