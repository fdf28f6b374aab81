"""`python -m services.s3_sink.lake_query` reads a known prefix of the real lake and prints the
ratings per day and club status, with totals."""

import json
import os
import subprocess
import sys
from collections.abc import Callable

from confluent_kafka import Message
from support.lake import Lake
from support.services import enriched_record

from services.core.records import Incoming
from services.s3_sink.config import S3SinkSettings
from services.s3_sink.sink import S3Sink

StackEnv = dict[str, str]
DAY_MS = 86_400_000


def test_lake_query_prints_counts_by_day_and_club_status(
    stack_env: StackEnv, sink_env: Callable[..., dict[str, str]], lake: Lake
) -> None:
    env = sink_env(("unused", "unused"))
    settings = S3SinkSettings(
        **{
            f: env[f"S3_SINK_{f.upper()}"]
            for f in ("endpoint_url", "access_key", "secret_key", "bucket", "prefix")
        }
    )
    day1 = 1_795_000_000_000 // DAY_MS * DAY_MS  # 2026-11-18
    records = [enriched_record(i, club_status="gold", rating_time=day1 + i) for i in range(3)]
    records += [
        enriched_record(i, club_status="platinum", rating_time=day1 + DAY_MS + i) for i in range(3, 5)
    ]
    records += [enriched_record(5, club_status=None, customer_matched=False, rating_time=day1 + DAY_MS)]
    sink = S3Sink.from_settings(settings)
    sink.write(
        [
            Incoming(json.dumps(r).encode(), Message(topic="t", partition=0, offset=i))
            for i, r in enumerate(records)
        ]
    )
    sink.close()

    done = subprocess.run(
        [sys.executable, "-m", "services.s3_sink.lake_query"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    assert lines[0] == [f"s3://{lake.bucket}/{lake.prefix}:", "2", "objects"]
    assert ["day", "gold", "platinum", "(unmatched)", "total"] in lines
    assert ["2026-11-18", "3", "0", "0", "3"] in lines
    assert ["2026-11-19", "0", "2", "1", "3"] in lines
    assert ["total", "3", "2", "1", "6"] in lines
    assert lines[-1] == ["ratings:", "6,", "distinct", "rating_id:", "6"]
