"""What flows into the jobs, parsed: ratings and Debezium change events, from Kafka's bytes to
typed columns, with the reason for each record that cannot be read.

- `schemas`: the records' schemas (ratings, change events, customer versions).
- `json_columns`: JSON text and Arrow columns.
- `rating_values`: ratings' values to fields and a dead-letter reason, without a Spark job.
- `change_events`: change events parsed into one Arrow table, and the database's clock over them.
- `transforms`: the parses and checks as Spark SQL expressions (no Python per record).
"""

__all__ = ["change_events", "json_columns", "rating_values", "schemas", "transforms"]
