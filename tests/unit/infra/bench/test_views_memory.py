"""The views-memory benchmark: its records are what the views job parses (one customer each, the
message as long as asked), and it reads the job's slicing from the job's own log line (its
--help is tested with the backlog-memory benchmark's, whose options it shares)."""

import json

from enrichment_job.kafka.batches import Slices
from infra.bench.views_memory import SLICED_BATCH, enriched


def test_each_record_is_its_own_customer_s_with_a_message_of_the_size_asked() -> None:
    keys, records = zip(*(enriched(i, 1_000) for i in range(3)), strict=True)
    values = [json.loads(r) for r in records]
    assert len({v["user_id"] for v in values}) == 3
    assert [k.decode() for k in keys] == [str(v["user_id"]) for v in values]
    assert all(len(v["message"]) == 1_000 and v["customer_matched"] for v in values)


def test_the_job_s_line_for_a_sliced_batch_is_the_one_it_reads() -> None:
    slices = Slices.__new__(Slices)  # only what describe() reads
    slices.rows, slices.bytes, slices.plan, slices.largest = 1_400, 1_191_000_000, [object()] * 9, 133_500_129
    slices.per_row, slices.max_bytes = 95_000, 134_217_728
    line = f"enrichment_job.views INFO batch 0: {slices.describe()} (VIEWS_JOB_MAX_BATCH_BYTES)"
    found = SLICED_BATCH.search(line)
    assert found is not None and (found.group(1), found.group(2)) == ("10", "133500129")
