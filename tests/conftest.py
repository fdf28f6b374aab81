import os

import pytest

# The secured stack's tests need a stack started in that mode (`make test-secured`, which sets
# STACK_KAFKA_SECURITY=scram), and PostgreSQL's a stack on PostgreSQL (`make test-postgres`,
# STACK_SOURCE=postgres); every other test needs the default one.
collect_ignore = [] if os.environ.get("STACK_KAFKA_SECURITY") == "scram" else ["integration/secured"]
if os.environ.get("STACK_SOURCE") != "postgres":
    collect_ignore.append("integration/postgres")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart the whole stack run last, so the others share one running stack."""
    items.sort(key=lambda item: item.get_closest_marker("restarts_stack") is not None)
