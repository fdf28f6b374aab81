import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that restart the whole stack run last, so the others share one running stack."""
    items.sort(key=lambda item: item.get_closest_marker("restarts_stack") is not None)
