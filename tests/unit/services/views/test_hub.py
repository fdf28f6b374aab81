"""The SSE data of a change: the key named by its columns, then the row; subscribers' writes
taking turns with the rest of the event loop."""

import asyncio
import json

import pytest

from services.views.hub import Turns, change_data
from services.views.store import Change


@pytest.mark.parametrize(
    ("key", "columns", "named"),
    [
        ("[12345]", ("user_id",), {"user_id": 12345}),  # spelled as it is
        ("[null]", ("user_id",), {"user_id": None}),
        ("[-1.5e3]", ('a "quoted" name',), {'a "quoted" name': -1500.0}),
        ('["a,b"]', ("club_status",), {"club_status": "a,b"}),  # strings are parsed
        ('["gold","web",1700000000000]', ("club_status", "channel", "hour"), None),
    ],
)
def test_the_key_is_named_by_its_columns_and_the_row_follows_as_it_is(
    key: str, columns: tuple[str, ...], named: dict[str, object] | None
) -> None:
    row = '{"user_id": 12345, "ratings": 2}'
    data = change_data(Change("v", key, columns, row))
    expected = named if named is not None else dict(zip(columns, json.loads(key), strict=True))
    assert json.loads(data) == {"key": expected, "row": {"user_id": 12345, "ratings": 2}}
    assert data.endswith(f',"row":{row}}}')


def test_a_deleted_row_is_null() -> None:
    assert json.loads(change_data(Change("v", "[7]", ("user_id",), None))) == {
        "key": {"user_id": 7},
        "row": None,
    }


async def _takes(turns: Turns, name: str, times: int, seen: list[tuple[str, int]], turn: list[int]) -> None:
    for _ in range(times):
        await turns.take()
        seen.append((name, turn[0]))


def _count_turns(loop: asyncio.AbstractEventLoop, turn: list[int], stop: asyncio.Event) -> None:
    """Counts the loop's turns: a callback scheduled with call_soon runs in the next one."""
    turn[0] += 1
    if not stop.is_set():
        loop.call_soon(_count_turns, loop, turn, stop)


def test_one_write_a_turn_and_the_waiting_writes_in_the_order_they_asked() -> None:
    async def run() -> list[tuple[str, int]]:
        turns, seen, turn, stop = Turns(per_turn=1), [], [0], asyncio.Event()
        _count_turns(asyncio.get_running_loop(), turn, stop)
        await asyncio.gather(*(_takes(turns, name, 3, seen, turn) for name in "abc"))
        stop.set()
        return seen

    seen = asyncio.run(run())
    assert len({t for _, t in seen}) == len(seen) == 9  # never two writes in one turn
    # a's first write finds the turn free and its second asks before b's and c's first; from
    # then on each waits behind one write of each other, never behind two of one
    assert [name for name, _ in seen] == list("aabcabcbc")


def test_a_waiting_subscriber_that_goes_leaves_the_others_waiting_for_their_turn() -> None:
    async def run() -> list[str]:
        turns, seen, turn = Turns(per_turn=1), [], [0]
        tasks = {
            name: asyncio.create_task(_takes(turns, name, times, seen, turn))
            for name, times in (("a", 2), ("gone", 1), ("stays", 2))
        }
        await asyncio.sleep(0)  # a has written once; a, gone and stays wait in that order
        tasks["gone"].cancel()
        await asyncio.wait_for(asyncio.gather(tasks["a"], tasks["stays"]), 1)
        return [name for name, _ in seen]

    assert asyncio.run(run()) == ["a", "a", "stays", "stays"]
