"""The contracts between the driver and its tasks: the marker's one encoding, and what it tells
the ratings' recovery."""

from enrichment_job.tasks.plan import PartitionMarker


def test_a_marker_reads_back_as_it_was_written() -> None:
    marker = PartitionMarker("run-1", 41, 3, 7, 12_345, 12_300, 1_796_000_000_000, 10, 2, 1, 4)
    assert PartitionMarker.decode(marker.encode()) == marker
    assert PartitionMarker.key("enrichment", 3) == b"enrichment/ratings/3"
    assert PartitionMarker.key("enrichment", 3) != PartitionMarker.key("enrichment", 30)


def test_a_marker_tells_the_recovery_its_partition_s_offsets_and_watermark() -> None:
    marker = PartitionMarker("run-1", 41, 3, 7, 12_345, 12_300, 1_796_000_000_000)
    recovery = marker.as_recovery()
    assert (recovery.batch_id, recovery.watermark_ms) == (41, 1_796_000_000_000)
    assert (recovery.waiting_from, recovery.consumed_to) == ({3: 12_300}, {3: 12_345})
    nothing_waits = PartitionMarker("run-1", 41, 3, 7, 12_345, None, 1_796_000_000_000)
    assert nothing_waits.as_recovery().waiting_from == {}
