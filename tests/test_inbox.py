"""The inbox's order of outcomes when some leave it out of turn (taken by worker, forgiven,
paused), and the bound on what it keeps for that order."""

from __future__ import annotations

from aioenv.workers._inbox import Inbox, Outcome


def _deliver(inbox: Inbox, worker_ids: range) -> None:
    for worker_id in worker_ids:
        inbox.owe(worker_id)
        inbox.deliver(Outcome(worker_id, f"state {worker_id}"))


def _drain(inbox: Inbox) -> list[int | None]:
    taken = []
    while (outcome := inbox.pop_next()) is not None:
        taken.append(outcome.worker_id)
    return taken


def test_arrival_order_survives_outcomes_taken_out_of_turn() -> None:
    inbox = Inbox(ordered=False)
    _deliver(inbox, range(10))
    assert inbox.pop(3) is not None
    inbox.forgive(5)
    inbox.pause(7)
    assert inbox.pop_next() is not None  # 0, taken while 7 is paused
    inbox.resume(7)
    assert _drain(inbox) == [1, 2, 4, 6, 7, 8, 9]
    assert inbox.num_ready() == 0 and inbox.num_owed == 0


def test_a_worker_delivering_again_is_taken_once_in_its_new_turn() -> None:
    inbox = Inbox(ordered=False)
    _deliver(inbox, range(3))
    assert inbox.pop(0) is not None
    _deliver(inbox, range(1))  # worker 0 again, after 1 and 2
    assert _drain(inbox) == [1, 2, 0]


def test_take_skips_outcomes_taken_out_of_turn_and_stops_before_an_error() -> None:
    inbox = Inbox(ordered=False)
    _deliver(inbox, range(4))
    inbox.owe(4)
    inbox.deliver(Outcome(4, None, RuntimeError("env failed")))
    _deliver(inbox, range(5, 7))
    assert inbox.pop(1) is not None
    assert [outcome.worker_id for outcome in inbox.take(10)] == [0, 2, 3]
    error = inbox.take(10)
    assert [outcome.worker_id for outcome in error] == [4] and error[0].error is not None
    assert [outcome.worker_id for outcome in inbox.take(1)] == [5]
    assert [outcome.worker_id for outcome in inbox.take(10)] == [6]


def test_outcomes_only_ever_taken_by_worker_leave_nothing_behind() -> None:
    """A loop that always names its worker never takes from the front of the arrival
    order: what the inbox keeps for that order stays bounded all the same."""
    inbox = Inbox(ordered=False)
    for _ in range(10_000):
        _deliver(inbox, range(4))
        for worker_id in range(4):
            assert inbox.pop(worker_id) is not None
    assert len(inbox._arrivals) < 100
    _deliver(inbox, range(3))
    assert _drain(inbox) == [0, 1, 2]


def test_serving_fairly_takes_the_worker_served_longest_ago_first() -> None:
    """A pool that mixes in-line workers with others: an outcome handed in again at once
    (worker 0's) goes behind outcomes that came in after it from workers served before."""
    inbox = Inbox(ordered=False)
    inbox.serve_fairly()
    _deliver(inbox, range(3))
    assert _drain(inbox) == [0, 1, 2]  # never served: arrival order
    _deliver(inbox, range(1))  # worker 0, served first, hands in again at once
    _deliver(inbox, range(2, 3))
    _deliver(inbox, range(1, 2))
    assert [outcome.worker_id for outcome in inbox.take(10)] == [0, 1, 2]
    _deliver(inbox, range(2, 3))
    _deliver(inbox, range(1))
    assert inbox.oldest_on_its_way() is None
    inbox.owe(1)
    assert inbox.oldest_on_its_way() == inbox.last_served(1) == 4
    assert _drain(inbox) == [0, 2]  # 0 was served before 2
