"""make bench-backfill's command line: its defaults are the goal's, and a create outside the flow
is refused before anything connects."""

import pytest

from infra.bench.backfill import parse


def test_the_defaults_are_the_goal_s_history_and_rate() -> None:
    args = parse([])
    assert (args.history, args.rate, args.view.name) == (1_000_000, 5_000, "stars_by_status.sql")
    assert 0 <= args.create_after < args.flow


@pytest.mark.parametrize("create_after", ["-1", "150", "200"])
def test_a_create_outside_the_flow_is_refused(create_after: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse(["--flow", "150", "--create-after", create_after])
    assert exited.value.code == 2
    assert "--create-after must fall within --flow" in capsys.readouterr().err
