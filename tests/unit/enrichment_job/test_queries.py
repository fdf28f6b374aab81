"""A query is started again only when Spark's Kafka source fault in `metrics` ended it, and only a
few times in one process."""

from dataclasses import dataclass, field
from typing import Any

from enrichment_job.queries import MAX_RESTARTS, Query, ended_by_kafka_metrics_fault


@dataclass
class _Frame:
    """Java objects are read through their Java method names."""

    cls: str
    method: str

    def getClassName(self) -> str:
        return self.cls

    def getMethodName(self) -> str:
        return self.method


@dataclass
class _Throwable:
    name: str
    frames: list[_Frame]

    def getClass(self) -> Any:
        name = self.name
        return type("C", (), {"getName": staticmethod(lambda: name)})

    def getStackTrace(self) -> list[_Frame]:
        return self.frames


@dataclass
class _JOption:
    value: Any

    def isDefined(self) -> bool:
        return self.value is not None

    def get(self) -> Any:
        return self.value


@dataclass
class _FakeQuery:
    """What Query reads of a StreamingQuery, ended by `cause` (None: still running)."""

    cause: _Throwable | None = None
    name: str = "enrichment"
    stopped: bool = field(default=False)

    @property
    def isActive(self) -> bool:
        return self.cause is None and not self.stopped

    def exception(self) -> object | None:
        return object() if self.cause is not None else None

    @property
    def _jsq(self) -> Any:
        cause = self.cause
        outer = type("E", (), {"getCause": staticmethod(lambda: cause)}) if cause is not None else None
        return type("J", (), {"exception": staticmethod(lambda: _JOption(outer))})

    def stop(self) -> None:
        self.stopped = True


KAFKA_METRICS_NPE = _Throwable(
    "java.lang.NullPointerException",
    [_Frame("org.apache.spark.sql.kafka010.KafkaMicroBatchStream$", "metrics"), _Frame("x.Y", "z")],
)


def test_the_kafka_sources_metrics_fault_is_recognised_and_nothing_else() -> None:
    assert ended_by_kafka_metrics_fault(_FakeQuery(KAFKA_METRICS_NPE))  # type: ignore[arg-type]
    others = [
        None,  # still running
        _Throwable("java.lang.NullPointerException", [_Frame("org.example.Other", "metrics")]),
        _Throwable(
            "java.lang.NullPointerException", [_Frame(KAFKA_METRICS_NPE.frames[0].cls, "latestOffset")]
        ),
        _Throwable("java.lang.IllegalStateException", KAFKA_METRICS_NPE.frames),
        _Throwable("java.lang.NullPointerException", []),
    ]
    for cause in others:
        assert not ended_by_kafka_metrics_fault(_FakeQuery(cause)), cause  # type: ignore[arg-type]


def test_a_query_ended_by_the_fault_is_started_again_a_few_times_at_most() -> None:
    started: list[_FakeQuery] = []

    def start() -> Any:
        started.append(_FakeQuery(KAFKA_METRICS_NPE))
        return started[-1]

    query = Query(start)
    assert query.failed
    for _ in range(MAX_RESTARTS):
        assert query.restart_if_spark_fault()
        assert query.current is started[-1]
    assert not query.restart_if_spark_fault()
    assert len(started) == 1 + MAX_RESTARTS


def test_a_query_ended_by_any_other_failure_is_not_started_again() -> None:
    started: list[_FakeQuery] = []
    other = _Throwable("org.apache.kafka.common.errors.TimeoutException", [_Frame("a.B", "c")])

    def start() -> Any:
        started.append(_FakeQuery(other))
        return started[-1]

    query = Query(start)
    assert query.failed
    assert not query.restart_if_spark_fault()
    assert len(started) == 1
