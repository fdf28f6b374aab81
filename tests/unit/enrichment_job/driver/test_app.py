"""Where the enrichment job's join runs."""

from enrichment_job.driver.app import join_place
from enrichment_job.marker import BatchMarker


def test_auto_joins_in_tasks_on_a_cluster_and_where_the_job_name_last_committed_in_tasks() -> None:
    in_tasks = BatchMarker.decode({"batch_id": 7, "join_in": "tasks"})
    on_driver = BatchMarker.decode({"batch_id": 7})
    assert join_place("auto", "spark://127.0.0.1:7077", None) == "tasks"
    assert join_place("auto", "yarn", on_driver) == "tasks"  # a driver's job name cuts over to tasks
    assert join_place("auto", "local[2]", None) == "driver"
    assert join_place("auto", "local[2]", on_driver) == "driver"
    assert join_place("auto", "local[2]", in_tasks) == "tasks"  # it cannot go back to the driver
    # as set, whatever the master; the driver after tasks is refused by the pipeline (JoinMoved)
    assert join_place("driver", "spark://127.0.0.1:7077", in_tasks) == "driver"
    assert join_place("tasks", "local[2]", None) == "tasks"
