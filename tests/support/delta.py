"""Reads a Delta table's current rows and commit metadata from its files, without Spark: the
transaction log's JSON commits say which Parquet files are live. The table is a local folder,
or (file system, path) for one in S3."""

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

Table = Path | tuple[pafs.FileSystem, str]


def _where(table: Table) -> tuple[pafs.FileSystem, str]:
    return (pafs.LocalFileSystem(), str(table)) if isinstance(table, Path) else table


def commits(table: Table) -> list[list[dict[str, Any]]]:
    """Each commit's actions, oldest first."""
    fs, root = _where(table)
    found = fs.get_file_info(pafs.FileSelector(f"{root}/_delta_log"))
    files = sorted(f.path for f in found if f.path.endswith(".json"))
    texts = [fs.open_input_stream(f).read().decode() for f in files]
    return [[json.loads(line) for line in text.splitlines() if line] for text in texts]


def live_rows(table: Table) -> pa.Table:
    fs, root = _where(table)
    live: set[str] = set()
    for actions in commits(table):
        for action in actions:
            if "add" in action:
                live.add(action["add"]["path"])
            elif "remove" in action:
                live.discard(action["remove"]["path"])
    parts = [pq.read_table(f"{root}/{path}", filesystem=fs) for path in sorted(live)]
    return pa.concat_tables(parts, promote_options="default") if parts else pa.table({})


def user_metadata(table: Table) -> list[dict[str, Any]]:
    """The userMetadata (JSON) of each commit that has one, oldest first."""
    found = []
    for actions in commits(table):
        for action in actions:
            meta = action.get("commitInfo", {}).get("userMetadata")
            if meta:
                found.append(json.loads(meta))
    return found
