"""The pinned artifact versions (infra/versions.toml), read once."""

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

VERSIONS_FILE = Path(__file__).resolve().parent.parent / "versions.toml"


@dataclass(frozen=True)
class Versions:
    kafka: str
    log4j: str
    slf4j: str
    jackson: str
    debezium: str
    elasticsearch: str
    s3proxy: str
    spark: str
    delta: str
    hadoop: str
    aws_sdk: str
    pgjdbc: str  # the tests' PostgreSQL JDBC driver
    mariadb_line: str
    postgres_major: str
    java_minimum: int
    spark_java: str  # the JDK the Spark jobs prefer, at least this version
    python: dict[str, str]

    def maven_properties(self) -> dict[str, str]:
        """The -D properties the POMs in infra/maven use."""
        return {
            "kafka.version": self.kafka,
            "log4j.version": self.log4j,
            "slf4j.version": self.slf4j,
            "jackson.version": self.jackson,
            "s3proxy.version": self.s3proxy,
            "spark.version": self.spark,
            "delta.version": self.delta,
            "hadoop.version": self.hadoop,
            "awssdk.version": self.aws_sdk,
        }


@cache
def load_versions(path: Path = VERSIONS_FILE) -> Versions:
    data = tomllib.loads(path.read_text())
    maven = data["maven"]
    return Versions(
        kafka=maven["kafka"],
        log4j=maven["log4j"],
        slf4j=maven["slf4j"],
        jackson=maven["jackson"],
        debezium=maven["debezium"],
        elasticsearch=maven["elasticsearch"],
        s3proxy=maven["s3proxy"],
        spark=maven["spark"],
        delta=maven["delta"],
        hadoop=maven["hadoop"],
        aws_sdk=maven["aws-sdk"],
        pgjdbc=maven["pgjdbc"],
        mariadb_line=data["debian"]["mariadb-server"].split(":", 1)[-1],
        postgres_major=str(data["debian"]["postgresql"]),
        java_minimum=int(data["java"]["minimum"]),
        spark_java=str(data["java"]["spark"]),
        python=dict(data["python"]),
    )
