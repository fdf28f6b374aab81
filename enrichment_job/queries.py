"""The jobs' streaming queries, each kept with the function that starts it, so that a query can be
started again from its checkpoint when Spark ends it for a known fault of Spark's own.

The one such fault today: Spark 4.1's Kafka source reports its metrics from a field that is set
only once the source has been asked for the topic's latest offsets. The first batch after a
restart re-runs the batch the offset log holds without asking, so when that batch ends, the
progress report throws a NullPointerException and the query stops (SPARK-55271). By then the
batch has run and its commit is in the checkpoint's commit log: started again, the query plans
its next batch normally. Every other failure still stops the job.
"""

import logging
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("enrichment_job")

# A query's first batch after a start is the only one that can hit the fault, and a start after
# it goes on from the next batch; more restarts than this in one process mean something else.
MAX_RESTARTS = 3


def ended_by_kafka_metrics_fault(query: StreamingQuery) -> bool:
    """Whether the query ended with the Kafka source's NullPointerException in `metrics`."""
    jexception: Any = query._jsq.exception()
    if not jexception.isDefined():
        return False
    cause = jexception.get().getCause()
    if cause is None or cause.getClass().getName() != "java.lang.NullPointerException":
        return False
    frames = cause.getStackTrace()
    if len(frames) == 0:
        return False
    top = frames[0]
    return bool(top.getClassName().startswith("org.apache.spark.sql.kafka010.KafkaMicroBatchStream")) and (
        top.getMethodName() == "metrics"
    )


class Query:
    """A running streaming query and how to start it again from its checkpoint."""

    def __init__(self, start: Callable[[], StreamingQuery]) -> None:
        self._start = start
        self.current = start()
        self.restarts = 0

    @property
    def failed(self) -> bool:
        return not self.current.isActive and self.current.exception() is not None

    def restart_if_spark_fault(self) -> bool:
        """Starts the query again when Spark's known fault ended it (see the module's doc);
        False, and nothing started, for any other end."""
        if self.restarts >= MAX_RESTARTS or not ended_by_kafka_metrics_fault(self.current):
            return False
        self.restarts += 1
        log.warning(
            "query %s: Spark's Kafka source failed to report the metrics of the batch it re-ran "
            "after the restart (SPARK-55271); the batch is committed, starting the query again",
            self.current.name,
        )
        self.current = self._start()
        return True

    def stop(self) -> None:
        self.current.stop()
