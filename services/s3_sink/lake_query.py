"""python -m services.s3_sink.lake_query: what is in the lake, for data scientists.

Reads every Parquet object under s3://<S3_SINK_BUCKET>/<S3_SINK_PREFIX>/ as one pyarrow dataset
(hive partitions dt=YYYY-MM-DD/hour=HH become columns) and prints ratings per day and club status,
with totals and the number of distinct rating_ids (equal to the rows: every rating is there once).
Settings are the sink's own (S3_SINK_ENDPOINT_URL, S3_SINK_ACCESS_KEY, ...), from the environment.
"""

import sys
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from pyarrow import fs

from foundation.errors import ConfigError
from foundation.settings import load_settings
from services.s3_sink.config import S3SinkSettings

__all__ = ["counts_by_day_and_status", "lake_dataset", "lake_filesystem", "main", "render"]

STATUSES = ("bronze", "silver", "gold", "platinum")
UNMATCHED = "(unmatched)"
PARTITIONS = ds.partitioning(pa.schema([("dt", pa.date32()), ("hour", pa.int8())]), flavor="hive")


def lake_filesystem(settings: S3SinkSettings) -> fs.S3FileSystem:
    endpoint = urlsplit(settings.endpoint_url) if settings.endpoint_url else None
    return fs.S3FileSystem(
        access_key=settings.access_key.get_secret_value() if settings.access_key else None,
        secret_key=settings.secret_key.get_secret_value() if settings.secret_key else None,
        region=settings.region,
        endpoint_override=endpoint.netloc if endpoint else None,
        scheme=endpoint.scheme if endpoint else "https",
        force_virtual_addressing=not settings.path_style,
        connect_timeout=settings.connect_timeout_s,
        request_timeout=settings.read_timeout_s,
    )


def lake_dataset(settings: S3SinkSettings) -> ds.Dataset:
    root = f"{settings.bucket}/{settings.key_prefix}".rstrip("/")
    return ds.dataset(root, filesystem=lake_filesystem(settings), format="parquet", partitioning=PARTITIONS)


def counts_by_day_and_status(dataset: ds.Dataset) -> pa.Table:
    """(dt, club_status, ratings) with unmatched customers as '(unmatched)', sorted by day."""
    table = dataset.to_table(columns=["dt", "club_status"])
    status = pc.fill_null(table.column("club_status").cast(pa.string()), UNMATCHED)
    keyed = pa.table({"dt": table.column("dt"), "club_status": status})
    counts = keyed.group_by(["dt", "club_status"]).aggregate([([], "count_all")])
    return counts.rename_columns(["dt", "club_status", "ratings"]).sort_by([("dt", "ascending")])


def render(counts: pa.Table) -> str:
    """A pivot: one line per day, one column per club status, totals at the right and the bottom."""
    seen = set(counts.column("club_status").to_pylist())
    columns = [s for s in STATUSES if s in seen] + sorted(seen - {*STATUSES, UNMATCHED})
    columns += [UNMATCHED] if UNMATCHED in seen else []
    cells: dict[str, dict[str, int]] = {}
    for row in counts.to_pylist():
        cells.setdefault(str(row["dt"]), {})[row["club_status"]] = row["ratings"]
    cells["total"] = {c: sum(day.get(c, 0) for day in cells.values()) for c in columns}
    header = ["day", *columns, "total"]
    lines = [header] + [
        [day, *(str(v.get(c, 0)) for c in columns), str(sum(v.values()))] for day, v in cells.items()
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(
            cell.rjust(w) if i else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    return "\n".join([text[0], "-" * len(text[0]), *text[1:-1], "-" * len(text[0]), text[-1]])


def main() -> int:
    try:
        settings = load_settings(S3SinkSettings)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    where = f"s3://{settings.bucket}/{settings.key_prefix}"
    try:
        root = f"{settings.bucket}/{settings.key_prefix}".rstrip("/")
        if lake_filesystem(settings).get_file_info(root).type == fs.FileType.NotFound:
            print(f"{where}: no objects yet (the S3 sink writes them as enriched ratings arrive)")
            return 0
        dataset = lake_dataset(settings)
        files = len(dataset.files)
        counts = counts_by_day_and_status(dataset)
        rating_ids = dataset.to_table(columns=["rating_id"]).column("rating_id")
    except (OSError, pa.ArrowException) as err:
        print(f"error: cannot read {where}: {err}", file=sys.stderr)
        return 1
    print(f"{where}: {files} objects")
    if files:
        print(render(counts))
    print(f"ratings: {len(rating_ids)}, distinct rating_id: {pc.count_distinct(rating_ids).as_py()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
