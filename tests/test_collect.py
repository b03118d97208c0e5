"""collect(): quotas, boundaries, stragglers, versions, cancellation and back-pressure,
checked transition by transition against a deterministic replay of each worker's env; and
pool.drain()."""

from __future__ import annotations

import contextlib
import functools
import gc
import io
import weakref
from typing import Any

import anyio
import envs
import numpy as np
import pytest
import space_envs
from gymnasium.vector.utils import batch_space, iterate
from support import WORKERS, modes

import aioenv
from aioenv.collection._collect import Progress

N = 4
SEED = 7
AUTORESETS = ["disabled", "next_step", "same_step"]


def choose(observation: np.ndarray) -> int:
    """The test policy for one observation: deterministic, and not constant."""
    return int((int(observation[1]) + (observation[0] > 0.5)) % 3)


def policy(batch: aioenv.Batch[Any]) -> np.ndarray:
    observations = batch.observations
    return (observations[:, 1].astype(np.int64) + (observations[:, 0] > 0.5)) % 3


def replay(worker_id: int, episodes: int = 120) -> list[tuple[Any, ...]]:
    """Worker ``worker_id``'s transitions, played with ``choose`` on a plain env seeded as
    ``make_pool(seed=SEED)`` seeds it: ``(episode, step, obs, action, reward, terminated,
    truncated, next_obs)`` in order."""
    env = envs.Walk()
    observation, _ = env.reset(seed=aioenv.worker_seeds(SEED, N)[worker_id])
    rows = []
    for episode in range(episodes):
        if episode:
            observation, _ = env.reset()
        for step in range(100):
            action = choose(observation)
            after, reward, terminated, truncated, _ = env.step(action)
            rows.append((episode, step, observation, action, reward, terminated, truncated, after))
            observation = after
            if terminated or truncated:
                break
    return rows


REPLAYS = {worker_id: replay(worker_id) for worker_id in range(N)}


def rows_of(parts: list[aioenv.Trajectories]) -> dict[int, list[tuple[Any, ...]]]:
    """Every returned transition by worker, sorted by (episode, step); checks the ids."""
    found: dict[int, list[tuple[Any, ...]]] = {w: [] for w in range(N)}
    for part in parts:
        for i in range(len(part)):
            worker_id, episode_id = int(part.worker_id[i]), int(part.episode_id[i])
            assert episode_id % N == worker_id
            found[worker_id].append(
                (
                    episode_id // N,
                    int(part.step[i]),
                    part.observations[i],
                    int(part.actions[i]),
                    float(part.rewards[i]),
                    bool(part.terminated[i]),
                    bool(part.truncated[i]),
                    part.next_observations[i],
                )
            )
    return {w: sorted(rows, key=lambda row: row[:2]) for w, rows in found.items()}


def assert_replay_prefix(parts: list[aioenv.Trajectories]) -> dict[int, int]:
    """The transitions returned over ``parts`` are, for each worker, exactly the first ones
    of its replay: none lost, none twice, each one right. Returns how many per worker."""
    counts = {}
    for worker_id, rows in rows_of(parts).items():
        expected = REPLAYS[worker_id][: len(rows)]
        assert len(expected) == len(rows), "the replay is too short for this test"
        for got, want in zip(rows, expected, strict=True):
            assert got[:2] == want[:2], f"worker {worker_id}: {got[:2]} where {want[:2]} was due"
            np.testing.assert_array_equal(got[2], want[2])
            assert got[3:7] == want[3:7], f"worker {worker_id} at {got[:2]}"
            np.testing.assert_array_equal(got[7], want[7])
        counts[worker_id] = len(rows)
    return counts


def walk_pool(mode: Any, autoreset: str = "disabled", **options: Any) -> aioenv.WorkerPool[Any]:
    return aioenv.make_pool(
        envs.Walk, N, mode=modes(mode, N), seed=SEED, autoreset=autoreset, **options
    )


def episode_counts(part: aioenv.Trajectories) -> list[int]:
    ends = (part.terminated | part.truncated) & ~part.open
    return [int(np.count_nonzero(ends & (part.worker_id == w))) for w in range(N)]


@pytest.mark.parametrize("autoreset", ["disabled", "next_step"])
async def test_rows_keep_their_observations_where_the_env_writes_over_its_array(
    mode: Any, autoreset: str
) -> None:
    # WalkInPlace writes every observation into one array of its own, which workers whose
    # envs step in this process hand out as it is: each row owns a copy of it, where every
    # row held that one array and read the observation last written into it.
    async with aioenv.make_pool(
        envs.WalkInPlace, N, mode=modes(mode, N), seed=SEED, autoreset=autoreset
    ) as pool:
        collector = aioenv.Collector(pool, policy)
        parts = [await collector.collect(num_steps=5 * N) for _ in range(2)]
    assert_replay_prefix(parts)


# Quotas and boundaries -------------------------------------------------------------------
@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_exact_episodes_per_worker_in_worker_order(mode: Any, autoreset: str) -> None:
    async with walk_pool(mode, autoreset) as pool:
        collector = aioenv.Collector(pool, policy)
        first = await collector.collect(num_episodes=3, per_worker=True)
        second = await collector.collect(num_episodes=2, per_worker=True)
    for part, quota in ((first, 3), (second, 2)):
        assert episode_counts(part) == [quota] * N
        assert np.all(np.diff(part.worker_id) >= 0), "rows are in worker order"
        assert not part.open.any()
        assert part.num_episodes == quota * N
    counts = assert_replay_prefix([first, second])
    for worker_id, count in counts.items():  # exactly five whole episodes, nothing more
        assert REPLAYS[worker_id][count - 1][0] == 4
        assert REPLAYS[worker_id][count][0] == 5


@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_num_steps_ending_on_episode_boundaries(mode: Any, autoreset: str) -> None:
    async with walk_pool(mode, autoreset) as pool:
        collector = aioenv.Collector(pool, policy)
        parts = [await collector.collect(num_steps=25) for _ in range(3)]
    for part in parts:
        assert len(part) >= 25
        assert not part.open.any()
        for rows in part.episode_slices():  # whole episodes: from step 0 to an end
            assert part.step[rows][0] == 0
            assert part.terminated[rows][-1] or part.truncated[rows][-1]
            assert not (part.terminated[rows][:-1] | part.truncated[rows][:-1]).any()
    assert_replay_prefix(parts)


@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_num_steps_returning_open_episodes(mode: Any, autoreset: str) -> None:
    async with walk_pool(mode, autoreset) as pool:
        collector = aioenv.Collector(pool, policy)
        parts = [await collector.collect(num_steps=9, boundary="step") for _ in range(4)]
    for part in parts:
        assert len(part) >= 9
        assert len(part.finished()) + len(part.unfinished()) == len(part)
        for rows in part.episode_slices():
            ended = part.terminated[rows][-1] or part.truncated[rows][-1]
            assert ended != part.open[rows][-1]
    assert any(part.open.any() for part in parts), "some call returned an open episode"
    assert_replay_prefix(parts)  # an open episode goes on in a later call, nothing repeated


async def test_num_steps_per_worker_counts_each_worker(mode: Any) -> None:
    async with walk_pool(mode) as pool:
        part = await aioenv.Collector(pool, policy).collect(num_steps=8, per_worker=True)
    for worker_id in range(N):
        assert np.count_nonzero(part.worker_id == worker_id) >= 8
    assert_replay_prefix([part])


async def test_num_episodes_in_total_returns_exactly_that_many(mode: Any) -> None:
    async with walk_pool(mode) as pool:
        collector = aioenv.Collector(pool, policy)
        parts = [await collector.collect(num_episodes=5) for _ in range(3)]
    assert [part.num_episodes for part in parts] == [5, 5, 5]
    assert_replay_prefix(parts)


# Stragglers ------------------------------------------------------------------------------
async def test_fraction_stops_early_and_keeps_unfinished_episodes(mode: Any, gate: str) -> None:
    kinds = modes(mode, N)
    kinds = [kinds] * N if isinstance(kinds, str) else kinds
    seeds = aioenv.worker_seeds(SEED, N)
    # A blocking straggler needs a thread or process of its own: on a sync or async
    # worker it would hold up the caller or the whole event loop.
    straggler = 0 if kinds[0] in ("thread", "process") else None
    workers = [
        WORKERS[kind](functools.partial(envs.Walk, gate if i == straggler else None), seed=s)
        for i, (kind, s) in enumerate(zip(kinds, seeds, strict=True))
    ]
    async with aioenv.get_worker_pool(workers) as pool:
        collector = aioenv.Collector(pool, policy)
        first = await collector.collect(num_episodes=3, per_worker=True, fraction=0.75)
        assert sum(count == 3 for count in episode_counts(first)) >= 3
        assert all(count <= 3 for count in episode_counts(first))
        if straggler is not None:
            assert episode_counts(first)[straggler] == 0  # stuck in its first step
        envs.open_gate(gate)
        second = await collector.collect(num_episodes=3, per_worker=True)
    assert episode_counts(second) == [3] * N
    assert_replay_prefix([first, second])


async def test_fraction_needs_per_worker_quotas() -> None:
    async with walk_pool("sync") as pool:
        with pytest.raises(ValueError, match="per_worker"):
            await aioenv.collect(pool, policy, num_episodes=2, fraction=0.5)
        with pytest.raises(ValueError, match="exactly one"):
            await aioenv.collect(pool, policy, num_episodes=2, num_steps=3)


# Versions --------------------------------------------------------------------------------
#: The most rows whose actions one ``num_steps`` call chose that the next call can return:
#: each worker's open episode (a Walk episode is at most 6 steps), the action in flight
#: included. A later call of more rows than this returns some chosen at its own version,
#: however the workers' replies were timed.
_MOST_CARRIED = N * 6


async def test_each_transition_carries_the_version_that_chose_its_action(mode: Any) -> None:
    chosen: dict[tuple[int, tuple[float, ...]], int] = {}

    def recording(batch: aioenv.Batch[Any]) -> np.ndarray:
        for observation, worker_id in zip(batch.observations, batch.worker_ids, strict=True):
            chosen[(int(worker_id), tuple(observation))] = collector.policy_version
        return policy(batch)

    async with walk_pool(mode) as pool:
        collector = aioenv.Collector(pool, recording)
        parts = []
        # The last call is longer than what the one before can leave it (see _MOST_CARRIED),
        # so some of its actions are chosen at its own version however the timing goes.
        for version, steps in ((0, 20), (3, 20), (4, _MOST_CARRIED + 6)):
            collector.policy_version = version
            parts.append(await collector.collect(num_steps=steps))
        with pytest.raises(ValueError, match="decrease"):
            collector.policy_version = 2
    for part in parts:
        for i in range(len(part)):
            key = (int(part.worker_id[i]), tuple(part.observations[i]))
            assert part.policy_version[i] == chosen[key]
    assert set(parts[0].policy_version.tolist()) == {0}
    assert 4 in parts[2].policy_version.tolist()
    assert_replay_prefix(parts)


async def test_the_function_form_keeps_the_pool_s_collector() -> None:
    async with walk_pool("thread") as pool:
        first = await aioenv.collect(pool, policy, num_steps=10, policy_version=1)
        second = await aioenv.collect(pool, policy, num_steps=_MOST_CARRIED + 6, policy_version=2)
    assert set(first.policy_version.tolist()) == {1}
    assert 2 in second.policy_version.tolist()
    assert_replay_prefix([first, second])


async def test_a_refused_call_of_the_function_form_leaves_the_policy_and_its_version() -> None:
    def other(batch: aioenv.Batch[Any]) -> list[int]:
        return [2] * len(batch)

    entered, release = anyio.Event(), anyio.Event()
    taken: list[aioenv.Trajectories] = []

    async def waiting(batch: aioenv.Batch[Any]) -> np.ndarray:
        entered.set()
        await release.wait()
        return policy(batch)

    async def first_call() -> None:
        taken.append(await aioenv.collect(pool, waiting, num_steps=10, policy_version=1))

    async with walk_pool("thread") as pool:
        async with anyio.create_task_group() as group:
            group.start_soon(first_call)
            await entered.wait()  # the first call is collecting, its policy called
            with pytest.raises(RuntimeError, match="already collecting"):
                await aioenv.collect(pool, other, num_steps=10, policy_version=5)
            release.set()
        collector = pool._collector
        with pytest.raises(ValueError, match="num_steps"):
            await aioenv.collect(pool, other, num_steps=0, policy_version=6)
        with pytest.raises(ValueError, match="decrease"):
            await aioenv.collect(pool, other, num_steps=10, policy_version=0)
        assert collector.policy is waiting and collector.policy_version == 1
    assert set(taken[0].policy_version.tolist()) == {1}
    assert_replay_prefix(taken)


async def test_a_policy_that_cannot_be_called_is_refused_at_once_leaving_the_collector() -> None:
    refused = r"^collect\(\) needs a callable policy, got 'greedy'$"
    async with walk_pool("thread") as pool:
        with pytest.raises(TypeError, match=refused):
            await aioenv.collect(pool, "greedy", num_steps=10)  # type: ignore[arg-type]
        first = await aioenv.collect(pool, policy, num_steps=10, policy_version=1)
        collector = pool._collector
        with pytest.raises(TypeError, match=refused):
            await aioenv.collect(pool, "greedy", num_steps=10, policy_version=5)  # type: ignore[arg-type]
        assert collector.policy is policy and collector.policy_version == 1
        second = await aioenv.collect(pool, policy, num_steps=_MOST_CARRIED + 6)
    assert_replay_prefix([first, second])


async def test_a_policy_returning_no_actions_per_row_is_refused_saying_what_it_returned() -> None:
    async with walk_pool("thread") as pool:
        with pytest.raises(TypeError, match=r"the policy returned 0 \(int\), not \d+ actions"):
            await aioenv.collect(pool, lambda batch: 0, num_steps=10)
        with pytest.raises(
            TypeError, match=r"the policy returned None \(NoneType\), not \d+ actions"
        ):
            await aioenv.collect(pool, lambda batch: None, num_steps=10)


def echo_rows(batch: aioenv.Batch[Any]) -> list[Any]:
    return [state.observation for state in batch.states]  # Echo's actions are observations


ROWS_SPACES = ["Text", "Sequence", "Graph", "OneOf", "custom", "Tuple", "DictOfRows"]


@pytest.mark.parametrize("space", ROWS_SPACES)
async def test_rows_of_spaces_batched_as_a_tuple_of_rows_are_selected_row_by_row(
    space: str,
) -> None:
    # gymnasium batches these as a tuple with one item per row (a Tuple or a Dict nesting
    # one as its part): select(), finished() and unfinished() take those items, where they
    # took each item's own parts as if it were a Tuple space's (TypeError, IndexError).
    env = functools.partial(space_envs.echo, space)
    async with aioenv.make_pool(env, 2, mode="thread", seed=SEED) as pool:
        part = await aioenv.collect(pool, echo_rows, num_steps=7, boundary="step")
        single = pool.workers[0].observation_space
    order = np.arange(len(part))[::-1]
    for rows, taken in (
        (~part.open, part.finished()),
        (part.open, part.unfinished()),
        (order, part.select(order)),
    ):
        indices = np.arange(len(part))[rows]
        assert len(taken) == len(indices)
        for name in ("observations", "actions", "next_observations"):
            got = iterate(batch_space(single, len(taken)), getattr(taken, name))
            every = list(iterate(batch_space(single, len(part)), getattr(part, name)))
            want = [space_envs.digest(every[i]) for i in indices]
            assert [space_envs.digest(row) for row in got] == want, name


# Deterministic twin ----------------------------------------------------------------------
@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_force_sync_gives_the_same_arrays_as_the_async_pool(
    mode: Any, autoreset: str
) -> None:
    async def run(force_sync: bool) -> list[aioenv.Trajectories]:
        async with walk_pool(mode, autoreset, force_sync=force_sync) as pool:
            collector = aioenv.Collector(pool, policy)
            first = await collector.collect(num_episodes=3, per_worker=True)
            collector.policy_version = 1
            return [first, await collector.collect(num_steps=6, per_worker=True)]

    for got, want in zip(await run(False), await run(True), strict=True):
        for field in aioenv.Trajectories.__dataclass_fields__:
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), field)


@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_views_of_shared_memory_are_kept_as_the_observations_they_were(
    autoreset: str,
) -> None:
    # With copy=False a process worker's large observation is a view of shared memory that
    # its next step overwrites: each row keeps the observation its action was chosen for.
    async with aioenv.make_pool(
        envs.BigObservation, 2, mode="process", copy=False, autoreset=autoreset
    ) as pool:
        data = await aioenv.collect(pool, lambda batch: [0] * len(batch), num_episodes=4)
    assert len(data) == 4 * 3  # BigObservation's episodes last 3 steps
    for row, step in enumerate(data.step.tolist()):
        observations = data.observations[row], data.next_observations[row]
        np.testing.assert_array_equal(observations[0], envs.expected_big_observation(step))
        np.testing.assert_array_equal(observations[1], envs.expected_big_observation(step + 1))


async def test_a_pool_that_collect_drove_goes_once_it_is_closed_and_dropped() -> None:
    # The collector collect() keeps for the pool goes with it: nothing else keeps the pool.
    async with aioenv.make_pool("CartPole-v1", 2, mode="thread") as pool:
        await aioenv.collect(pool, lambda batch: [0] * len(batch), num_steps=4)
    gone = weakref.ref(pool)
    del pool
    gc.collect()
    assert gone() is None


# Cancellation and back-pressure ----------------------------------------------------------
@pytest.mark.loops
async def test_a_cancelled_collect_loses_nothing(mode: Any) -> None:
    calls = 0
    blocked = anyio.Event()

    async def stalling(batch: aioenv.Batch[Any]) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 6:
            blocked.set()
            await anyio.Event().wait()  # until cancelled
        return policy(batch)

    async with walk_pool(mode) as pool:
        collector = aioenv.Collector(pool, stalling)
        finished = False

        async def collect_until_cancelled() -> None:
            nonlocal finished
            await collector.collect(num_steps=1000)
            finished = True

        async with anyio.create_task_group() as group:
            group.start_soon(collect_until_cancelled)
            await blocked.wait()
            group.cancel_scope.cancel()
        assert not finished
        returned = []
        for delay in (0.0, 0.001, 0.003, 0.01):  # cancelled wherever it happens to be
            with anyio.move_on_after(delay):
                returned.append(await collector.collect(num_steps=60))
        part = await collector.collect(num_steps=40)
        await pool.drain()  # the pool is still in good order
        pool.reset()
        assert len(await pool.get_batch(min_size=N)) == N
    assert len(part) >= 40
    # What a cancelled call had taken came back in a later call: none lost, none twice.
    assert_replay_prefix([*returned, part])


async def test_a_slow_policy_holds_every_worker_at_one_step(mode: Any) -> None:
    calls = 0
    blocked, release = anyio.Event(), anyio.Event()

    async def slow(batch: aioenv.Batch[Any]) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 5:
            blocked.set()
            await release.wait()
        return policy(batch)

    async with walk_pool(mode) as pool:
        parts: list[Any] = []

        async def collect() -> None:
            parts.append(await aioenv.Collector(pool, slow).collect(num_steps=60))

        async with anyio.create_task_group() as group:
            group.start_soon(collect)
            await blocked.wait()
            before = await pool.get_attr("steps_taken")  # answered once any step in flight ends
            # That no worker runs ahead is watched for a bounded time, 0.2 s: one that
            # could would need only the loop's turns and a round trip (a Walk step takes
            # microseconds, a process's round trip a millisecond or so), which fit in
            # 0.2 s many times over; the get_attr below waits behind any step sent meanwhile.
            await anyio.sleep(0.2)
            assert await pool.get_attr("steps_taken") == before
            release.set()
        (part,) = parts
        assert sum(await pool.get_attr("steps_taken")) <= len(part) + 6 * N
    assert_replay_prefix([part])


async def test_paused_workers_are_skipped_and_a_busy_pool_is_refused(mode: Any) -> None:
    async with walk_pool(mode) as pool:
        pool.reset()
        with pytest.raises(aioenv.StateNotTaken, match="drain"):
            await aioenv.Collector(pool, policy).collect(num_steps=1)
        await pool.drain()
        pool.pause(3)
        collector = aioenv.Collector(pool, policy)
        first = await collector.collect(num_episodes=2, per_worker=True)
        pool.resume(3)
        second = await collector.collect(num_episodes=2, per_worker=True)
    assert episode_counts(first) == [2, 2, 2, 0]
    assert episode_counts(second) == [2] * N


# Failures --------------------------------------------------------------------------------
@pytest.mark.parametrize("restart", ["never", "on_failure"])
async def test_a_failed_step_ends_its_episode_at_the_last_transition(
    mode: Any, restart: str
) -> None:
    exploding = functools.partial(envs.Walk, None, 5)  # every worker's 5th step raises
    async with aioenv.make_pool(
        exploding, N, mode=modes(mode, N), seed=SEED, restart=restart
    ) as pool:
        collector = aioenv.Collector(pool, policy)
        if restart == "never":
            with pytest.raises(aioenv.EnvError):
                await collector.collect(num_episodes=2, per_worker=True)
            for _ in range(N - 1):  # the others fail too, each raised once
                with contextlib.suppress(aioenv.EnvError):
                    await collector.collect(num_episodes=2, per_worker=True)
        part = await collector.collect(num_episodes=2, per_worker=True)
    for worker_id, rows in rows_of([part]).items():
        first_four, expected = rows[:4], REPLAYS[worker_id][:4]
        for got, want in zip(first_four, expected, strict=True):
            assert got[:2] == want[:2]
            np.testing.assert_array_equal(got[2], want[2])
            assert got[3:6] == want[3:6]
        if restart == "never":  # the failed step has no outcome: the episode ends before it
            assert first_four[3][6], "the transition before the failed step ends its episode"
            following = rows[4:]
        else:  # the env was replaced: the failed step ends the episode, truncated
            episode, step, observation, _, reward, terminated, truncated, after = rows[4]
            assert (episode, step) == REPLAYS[worker_id][4][:2]
            assert (reward, terminated, truncated) == (0.0, False, True)
            np.testing.assert_array_equal(observation, REPLAYS[worker_id][4][2])
            np.testing.assert_array_equal(after, observation)  # the last observation seen
            following = rows[5:]
        if following:
            assert following[0][1] == 0, "the next row starts a new episode"
    assert episode_counts(part) == [2] * N  # a cut episode counts as one


# Progress --------------------------------------------------------------------------------
async def test_progress_is_quiet_off_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    async with walk_pool("sync") as pool:
        await aioenv.collect(pool, policy, num_steps=30, progress=True)
    assert capsys.readouterr().err == ""


def test_progress_shows_steps_episodes_and_mean_return() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    bar = Progress(True, total=10, file=screen, mininterval=0)
    bar.update(4, [1.0, 3.0])
    bar.close()
    shown = screen.getvalue()
    assert "4/10" in shown
    assert "episodes=2" in shown
    assert "mean_return=2.0" in shown
    assert "step/s" in shown or "s/step" in shown


# drain() ---------------------------------------------------------------------------------
async def test_drain_takes_every_pending_state_so_reset_works(mode: Any) -> None:
    async with walk_pool(mode) as pool:
        pool.reset()
        state, worker_id = await pool.get_state()  # type: ignore[misc]
        pool.send_action(choose(state.observation), worker_id)
        with pytest.raises(aioenv.StateNotTaken):
            pool.reset()
        drained = await pool.drain()
        assert [w for _, w in drained] == list(range(N))
        assert all(isinstance(s, aioenv.Step) for s, _ in drained)
        assert await pool.drain() == []
        pool.reset()
        assert len(await pool.get_batch(min_size=N)) == N


async def test_drain_returns_errors_in_place_of_states(mode: Any) -> None:
    async with aioenv.make_pool(
        functools.partial(envs.Failing, "step"), 3, mode=modes(mode, 3)
    ) as pool:
        await pool.reset_all()
        for worker_id, action in enumerate([1, 13, 2]):
            pool.send_action(action, worker_id)
        drained = await pool.drain()
    assert [w for _, w in drained] == [0, 1, 2]
    assert isinstance(drained[1][0], aioenv.EnvError)
    assert drained[0][0]["total"] == 1
    assert drained[2][0]["total"] == 2


async def test_drain_leaves_paused_workers_alone(mode: Any) -> None:
    async with walk_pool(mode) as pool:
        pool.reset()
        pool.pause(2)
        assert [w for _, w in await pool.drain()] == [0, 1, 3]
        pool.resume(2)
        assert [w for _, w in await pool.drain()] == [2]


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_cancelled_drain_takes_nothing(kind: str, gate: str) -> None:
    workers = [WORKERS[kind](envs.Gated(gate)), WORKERS[kind](envs.Counter())]
    async with aioenv.get_worker_pool(workers) as pool:
        await pool.reset_all()
        pool.send_action(1, 0)
        pool.send_action(1, 1)
        with anyio.move_on_after(0.3):
            await pool.drain()
        envs.open_gate(gate)
        drained = await pool.drain()
    assert [(state["t"], w) for state, w in drained] == [(1, 0), (1, 1)]
