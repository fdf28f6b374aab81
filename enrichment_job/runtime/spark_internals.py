"""Every use of Spark's private interfaces, in one place, each with the reason no public one
does the job. An upgrade of Spark checks this module (tests/unit/enrichment_job/
test_spark_internals.py and the integration tests run each of them).

- `batch_ends`: the views' markers record the enriched offsets a batch covered. The offset log
  in the query's checkpoint is the only place a running foreachBatch can learn them (progress
  events come after the batch). Read through the state folder's file system, so s3a:// works.
- `last_planned_batch`: the newest batch of a checkpoint's offset log, to tell a marker in the
  commits topic that this checkpoint never planned (written by someone else) from its own.
- `batch_starts`: where a batch's records begin, for the views' dead letters, which read a
  batch's records again: the previous batch's offset log file, or for the first batch the
  source's initial offsets in the checkpoint.
- `local_checkpoint_files`: a checkpoint file manager class for local state (the class name is
  Spark's; it moved in 4.1).
- `skip_driver_checksums`: Hadoop's local file system object of the driver.
- `JsonProgressEvents`: the JVM listener wrapper PySpark builds, fed Spark's JSON of a progress
  event instead of PySpark's field-by-field conversion.
- `java_columns`, `wrap_frame`: a list of columns handed to the JVM once (plans.py).
- `live_executors`, `placed_rdd`: the join in tasks keeps each ratings partition on the
  executor that ran it before. PySpark's `parallelize` takes no preferred locations, and no
  public API lists the executors' ids; Scala's `makeRDD` with locations and the app status
  store do.
"""

import json
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import pyarrow.fs as pafs
from pyspark import RDD, SparkContext
from pyspark.serializers import CPickleSerializer
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql.classic.column import _to_java_column, _to_seq
from pyspark.sql.classic.dataframe import DataFrame as ClassicDataFrame
from pyspark.sql.streaming.listener import JStreamingQueryListener, QueryProgressEvent

from enrichment_job.runtime.offsets import partition_offsets
from enrichment_job.runtime.state_dir import StateDir

__all__ = [
    "CHECKPOINT_FILE_MANAGER",
    "OFFSET_LOG_VERSION",
    "JsonProgressEvents",
    "T",
    "batch_ends",
    "batch_starts",
    "java_columns",
    "java_frame",
    "java_names",
    "last_planned_batch",
    "live_executors",
    "local_checkpoint_files",
    "placed_rdd",
    "skip_driver_checksums",
    "wrap_frame",
]

OFFSET_LOG_VERSION = "v1"

T = TypeVar("T")

# Spark 4.1 moved it into the `checkpointing` package (4.0: org.apache.spark.sql.execution.streaming).
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def batch_ends(state: StateDir, checkpoint: str, batch_id: int, topic: str) -> dict[int, int]:
    """partition -> the offset where batch `batch_id`'s records of `topic` end, from the offset
    log of the query checkpointed at `checkpoint` (relative to `state`): its file for the batch
    has a version line, a metadata line, then a line per source. Empty when the topic is not in
    the batch (it does not exist yet)."""

    def ends(lines: list[str]) -> dict[int, int]:
        for line in lines[1:]:
            if line == "-":  # a source without offsets
                continue
            found = json.loads(line).get(topic)
            if found is not None:
                return partition_offsets(found)
        return {}

    return _versioned_file(state, f"{checkpoint}/offsets/{batch_id}", f"batch {batch_id}'s offsets", ends)


def last_planned_batch(state: StateDir, checkpoint: str) -> int | None:
    """The newest batch id in the offset log of the query checkpointed at `checkpoint`: Spark
    writes a batch's file there before the batch runs, so no batch of this checkpoint past it
    has been written anywhere. None when the log is empty or missing."""
    fs, path = state.locate(f"{checkpoint}/offsets")
    try:
        found = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except FileNotFoundError:
        return None
    ids = [int(f.base_name) for f in found if f.base_name.isdigit()]
    return max(ids) if ids else None


def batch_starts(state: StateDir, checkpoint: str, batch_id: int, topic: str) -> dict[int, int]:
    """partition -> the offset where batch `batch_id`'s records of `topic` begin: where the
    batch before it ended, or for batch 0 the offsets the query started from (Spark's Kafka
    source writes them to `sources/0/0`: a zero byte, a version line, then the JSON). A
    partition missing from them starts at 0."""
    if batch_id > 0:
        return batch_ends(state, checkpoint, batch_id - 1, topic)
    return _versioned_file(
        state,
        f"{checkpoint}/sources/0/0",
        "the query's initial offsets",
        lambda lines: partition_offsets(json.loads("\n".join(lines)), topic),
    )


def _versioned_file(state: StateDir, relative: str, what: str, parse: Callable[[list[str]], T]) -> T:
    """`parse` of the lines after the version line of checkpoint file `relative` (a leading zero
    byte skipped); a missing file, an unknown version or a parse error as a RuntimeError that
    names the file."""
    try:
        text = state.read_text(relative)
        if text is None:
            raise ValueError("no such file")
        lines = text.lstrip("\x00").splitlines()
        if not lines or lines[0] != OFFSET_LOG_VERSION:
            raise ValueError(f"not a checkpoint file of a known version: {lines[:1]}")
        return parse(lines[1:])
    except (OSError, ValueError) as err:
        raise RuntimeError(f"cannot read {what} from {state.child(relative)}: {err}") from err


def local_checkpoint_files(state: StateDir) -> dict[str, str]:
    """Spark configuration for a query checkpoint in a local folder.

    Each batch writes two small checkpoint files (offsets, commit). Spark's default manager
    (Hadoop FileContext) forks `readlink` four times and `chmod` twice per file where Hadoop's
    native library is absent, as it is on a pip install: 33 ms a file here, on the query
    thread. Renames through the FileSystem API are plain Java: 11 ms a file, 7 ms without the
    .crc side file (`skip_driver_checksums`). Object stores keep Spark's default."""
    if not state.is_local:
        return {}
    return {"spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER}


def skip_driver_checksums(spark: SparkSession) -> None:
    """The driver's local file system writes no .crc beside the files it writes (checkpoint
    offsets and commits, the customer table's log): one `chmod` fork less per file.

    It stays Hadoop's checksummed LocalFileSystem, the instance FileSystem.get caches for this
    user, with checksums turned off. Swapping in RawLocalFileSystem for the `file` scheme instead
    broke the RocksDB state store, which copies its snapshots through FileSystem.getLocal and
    casts what it gets to LocalFileSystem: every snapshot upload failed, so the store's changelog
    grew without end and a restart replayed all of it. Tasks and any other instance keep
    writing checksums, as they do by default."""
    jvm: Any = spark.sparkContext._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark.sparkContext._jsc.hadoopConfiguration())
    local.setWriteChecksum(False)


def live_executors(sc: SparkContext) -> dict[str, str]:
    """The live executors, not the driver: id -> host."""
    jvm: Any = sc._jvm
    store = sc._jsc.sc().statusStore()
    found = {}
    for summary in jvm.scala.jdk.javaapi.CollectionConverters.asJava(store.executorList(True)):
        if summary.id() != "driver":
            found[summary.id()] = summary.hostPort().rsplit(":", 1)[0]
    return found


def placed_rdd(sc: SparkContext, items: Sequence[tuple[object, str, str]]) -> RDD[Any]:
    """An RDD of one partition per (object, executor id, host), each partition preferring that
    executor (Spark's locality tag `executor_<host>_<id>`); its elements reach the Python
    workers pickled one by one."""
    jvm: Any = sc._jvm
    scala = jvm.scala.jdk.javaapi.CollectionConverters
    pickled = CPickleSerializer()
    pairs = jvm.java.util.ArrayList()
    for item, executor, host in items:
        where = jvm.java.util.ArrayList()
        where.add(f"executor_{host}_{executor}")
        pairs.add(jvm.scala.Tuple2(bytearray(pickled.dumps(item)), scala.asScala(where).toSeq()))  # type: ignore[no-untyped-call]
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    placed = sc._jsc.sc().makeRDD(scala.asScala(pairs).toSeq(), tag)
    return RDD(placed.toJavaRDD(), sc, pickled)


class JsonProgressEvents:
    """Mixed into a `StreamingQueryListener`: the JVM side PySpark builds for it, but handing a
    progress event over as Spark's JSON of it, in one call. PySpark's own conversion reads every
    field with its own call, and resolving them loaded classes through the jars: with two
    batches a second that took 15% of the JVM's CPU on an idle job."""

    @property
    def _jlistener(self) -> Any:
        if not hasattr(self, "_jlistenerobj"):
            from pyspark import SparkContext  # noqa: PLC0415

            jvm: Any = SparkContext._jvm
            self._jlistenerobj = jvm.PythonStreamingQueryListenerWrapper(_JsonEvents(self))  # type: ignore[arg-type]
        return self._jlistenerobj


class _JsonEvents(JStreamingQueryListener):
    def onQueryProgress(self, jevent: Any) -> None:
        progress = json.loads(jevent.progress().json())
        self.pylistener.onQueryProgress(QueryProgressEvent.fromJson({"progress": progress}))

    def onQueryIdle(self, jevent: Any) -> None:
        return


def java_columns(spark: SparkSession, items: tuple[Column | str, ...]) -> Any:
    """`items` as one Java sequence of columns (names or expressions)."""
    return _to_seq(spark.sparkContext, items, _to_java_column)


def java_names(spark: SparkSession, names: tuple[str, ...]) -> Any:
    """`names` as one Java sequence of strings."""
    return _to_seq(spark.sparkContext, names)


def java_frame(df: DataFrame) -> Any:
    """The JVM Dataset behind `df`."""
    return df._jdf


def wrap_frame(jdf: Any, spark: SparkSession) -> DataFrame:
    """A JVM Dataset as a PySpark DataFrame."""
    return ClassicDataFrame(jdf, spark)
