"""Reads a Delta table's current rows and commit metadata from its files, without Spark: the
transaction log's JSON commits say which Parquet files are live."""

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq


def commits(table: Path) -> list[list[dict[str, Any]]]:
    """Each commit's actions, oldest first."""
    files = sorted((table / "_delta_log").glob("*.json"))
    return [[json.loads(line) for line in f.read_text().splitlines() if line] for f in files]


def live_rows(table: Path) -> pa.Table:
    live: set[str] = set()
    for actions in commits(table):
        for action in actions:
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
    parts = [pq.read_table(table / path) for path in sorted(live)]
    return pa.concat_tables(parts, promote_options="default") if parts else pa.table({})


def user_metadata(table: Path) -> list[dict[str, Any]]:
    """The userMetadata (JSON) of each commit that has one, oldest first."""
    found = []
    for actions in commits(table):
        for action in actions:
            meta = action.get("commitInfo", {}).get("userMetadata")
            if meta:
                found.append(json.loads(meta))
    return found
