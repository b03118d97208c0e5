"""Pools: first-ready, the forced-sync twin, seeds, batches, misuse, cleanup."""

from __future__ import annotations

import itertools
import re
import time
import warnings
from typing import Any

import anyio
import anyio.lowlevel
import gymnasium
import numpy as np
import pytest
from envs import Counter, DictObservation, Failing, Gated, open_gate
from support import WORKERS, modes, worker_processes, worker_threads

import aioenv
from aioenv import CLOSE, RESET

pytestmark = pytest.mark.trio  # every test here runs on trio as well (see conftest)


async def drain(pool: aioenv.WorkerPool[Any]) -> None:
    async for _ in pool:
        pass


async def test_first_ready_fast_workers_never_wait_for_a_slow_one(gate: str) -> None:
    slow = aioenv.ProcessWorker(lambda: Gated(gate))
    fast = [aioenv.ThreadWorker(Counter), aioenv.ProcessWorker(Counter)]
    async with aioenv.AsyncWorkerPool([slow, *fast]) as pool:
        pool.reset()
        for _ in range(3):
            await pool.get_state()
        pool.send_action(1, 0)  # blocks in the env until the gate opens
        pool.send_action(1, 1)
        pool.send_action(1, 2)
        seen = {1: 0, 2: 0}
        with anyio.fail_after(30):
            while min(seen.values()) < 50:
                _, worker_id = await pool.get_state()  # type: ignore[misc]
                assert worker_id != 0, "the gated worker cannot have finished"
                seen[worker_id] += 1
                pool.send_action(1, worker_id)
        open_gate(gate)
        with anyio.fail_after(30):
            rest = sorted([worker_id async for _, worker_id in pool])
        assert rest == [0, 1, 2]  # the slow state arrives once released; nothing was lost


def _policy(state: dict[str, Any]) -> int:
    return (state["t"] * 7 + int(state["draw"] * 100)) % 5


async def _scenario(
    pool: aioenv.WorkerPool[Any], episodes: int
) -> tuple[dict[int, list[Any]], list[int]]:
    """Run ``episodes`` episodes per worker with a deterministic policy; return each worker's
    trajectory and the global order states came back in."""
    trajectories: dict[int, list[Any]] = {i: [] for i in range(len(pool))}
    finished = dict.fromkeys(range(len(pool)), 0)
    order: list[int] = []
    pool.reset()
    async for state, worker_id in pool:
        state = {k: v for k, v in state.items() if k != "pid"}
        trajectories[worker_id].append(state)
        order.append(worker_id)
        if state["t"] >= 4:
            finished[worker_id] += 1
            if finished[worker_id] < episodes:
                pool.send_action(RESET, worker_id)
        else:
            pool.send_action(_policy(state), worker_id)
    return trajectories, order


async def test_forced_sync_pool_runs_the_same_program_to_the_same_result(mode: Any) -> None:
    def env() -> Counter:
        return Counter(limit=4)

    async with aioenv.make_pool(env, 4, seed=123, force_sync=True) as pool:
        assert isinstance(pool, aioenv.SyncWorkerPool)
        sync_result, sync_order = await _scenario(pool, episodes=3)
    async with aioenv.make_pool(env, 4, mode=modes(mode, 4), seed=123) as pool:
        assert isinstance(pool, aioenv.AsyncWorkerPool)
        async_result, _ = await _scenario(pool, episodes=3)
    assert sync_result == async_result
    for trajectory in sync_result.values():
        assert len(trajectory) == 3 * 5
    # Forced sync is deterministic down to the global order: actions' send order.
    async with aioenv.make_pool(env, 4, seed=123, force_sync=True) as pool:
        _, again = await _scenario(pool, episodes=3)
    assert again == sync_order
    assert sync_order[:4] == [0, 1, 2, 3]


def test_an_option_of_kinds_the_mode_makes_none_of_names_the_mode_not_a_call() -> None:
    """The error names the option, the kinds it is for and the mode, not a function the
    caller may never have called (AioVectorEnv and SB3's AioVecEnv check through it)."""
    with pytest.raises(
        TypeError,
        match=r"option 'idle_spin' applies to process workers, and "
        r"mode='thread' makes none",
    ) as raised:
        aioenv.make_pool(Counter, 2, mode="thread", idle_spin=0.001)
    assert "make_pool" not in str(raised.value)
    with pytest.raises(TypeError, match=r"mode='thread' makes none") as raised:
        aioenv.AioVectorEnv(
            lambda: gymnasium.make("CartPole-v1"), 2, mode="thread", idle_spin=0.001
        )
    assert "make_pool" not in str(raised.value)


async def test_force_sync_takes_the_options_of_the_kinds_mode_names() -> None:
    # A debug run flips force_sync=True on the program's own call: the options of the
    # kinds its mode names are taken (the sync workers need none of them), not refused.
    async with aioenv.make_pool(
        Counter, 2, mode=["thread", "process"], force_sync=True, context="spawn", envs_per_process=2
    ) as pool:
        assert [worker.kind for worker in pool.workers] == ["sync", "sync"]
        assert len((await pool.reset_all()).states) == 2
    with pytest.raises(TypeError, match="context.*process"):  # still none of its kinds'
        aioenv.make_pool(Counter, 2, mode="thread", force_sync=True, context="spawn")


async def test_sync_pool_returns_states_in_send_order_even_when_they_finish_otherwise(
    gate: str,
) -> None:
    slow = aioenv.ProcessWorker(lambda: Gated(gate))
    fast = aioenv.ThreadWorker(Counter)
    async with aioenv.get_worker_pool([slow, fast], force_sync=True) as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        pool.send_action(1, 0)
        pool.send_action(1, 1)
        assert await pool.get_state(timeout=0.2) is None  # worker 1 is done but not first
        open_gate(gate)
        with anyio.fail_after(30):
            first = await pool.get_state()
            second = await pool.get_state()
        assert first is not None and first[1] == 0
        assert second is not None and second[1] == 1


async def test_seeds_differ_per_worker_repeat_per_run_and_continue_across_episodes(
    mode: Any,
) -> None:
    async def first_two_episodes(seed: int) -> dict[int, list[float]]:
        draws: dict[int, list[float]] = {}
        async with aioenv.make_pool(Counter, 3, mode=modes(mode, 3), seed=seed) as pool:
            for _ in range(2):
                pool.reset()
                async for state, worker_id in pool:
                    draws.setdefault(worker_id, []).append(state["draw"])
        return draws

    run_a = await first_two_episodes(seed=2024)
    run_b = await first_two_episodes(seed=2024)
    run_c = await first_two_episodes(seed=2025)
    assert run_a == run_b  # two runs with one seed: identical per worker
    assert run_a != run_c
    firsts = [draws[0] for draws in run_a.values()]
    assert len(set(firsts)) == 3  # different workers differ
    for draws in run_a.values():
        assert draws[0] != draws[1]  # the second reset continues the RNG: episodes differ


async def test_worker_seeds_come_from_a_seed_sequence_and_only_seed_the_first_reset() -> None:
    seeds = aioenv.worker_seeds(7, 4)
    assert len(set(seeds)) == 4
    spawned = np.random.SeedSequence(7).spawn(4)
    assert seeds == [int(child.generate_state(1, dtype=np.uint32)[0]) for child in spawned]
    assert seeds == aioenv.worker_seeds(7, 4)
    assert aioenv.worker_seeds(None, 2) == [None, None]
    state = np.random.get_state()
    async with aioenv.make_pool(Counter, 4, mode="sync", seed=7) as pool:
        pool.reset()
        got = {worker_id: state["seed"] async for state, worker_id in pool}
        assert got == dict(enumerate(seeds))
        pool.reset()
        got = {worker_id: state["seed"] async for state, worker_id in pool}
        assert got == dict.fromkeys(range(4))
    assert np.all(np.random.get_state()[1] == state[1])  # global RNG untouched


async def test_gymnasium_seeding_matches_gymnasium(mode: Any) -> None:
    seeds = aioenv.worker_seeds(99, 2)
    async with aioenv.make_pool("CartPole-v1", 2, mode=modes(mode, 2), seed=99) as pool:
        pool.reset()
        async for step, worker_id in pool:
            expected, _ = gymnasium.make("CartPole-v1").reset(seed=seeds[worker_id])
            np.testing.assert_array_equal(step.observation, expected)


async def test_a_reset_seeded_with_a_numpy_int_seeds_each_env_as_an_int_does(mode: Any) -> None:
    # A seed drawn with numpy reached the envs as it was, and gymnasium refuses any seed
    # but a Python int: an EnvError blaming the env (with restarts, new envs seeded else).
    async with aioenv.make_pool("CartPole-v1", 2, mode=modes(mode, 2), seed=99) as pool:
        pool.reset(seed=np.int64(5))
        async for step, worker_id in pool:
            expected, _ = gymnasium.make("CartPole-v1").reset(seed=5 + worker_id)
            np.testing.assert_array_equal(step.observation, expected)


@pytest.mark.parametrize(
    "option", ["num_workers", "envs_per_worker", "max_episode_steps", "max_restarts", "min_size"]
)
async def test_counts_given_as_numpy_ints_are_taken_as_ints(option: str) -> None:
    # RL code passes counts drawn from arrays (np.int64): each was refused as no count,
    # "num_workers must be an int >= 1, got 2", as a seed once was.
    counts: dict[str, Any] = {
        "num_workers": 2,
        "envs_per_worker": 2,
        "max_episode_steps": 3,
        "max_restarts": 1,
        "min_size": 2,
    }
    counts[option] = np.int64(counts[option])
    min_size = counts.pop("min_size")
    async with aioenv.make_pool("CartPole-v1", mode="sync", **counts) as pool:
        assert len(pool.workers) == 2
        assert pool.max_episode_steps == 3 and type(pool.max_episode_steps) is int
        pool.reset()
        with anyio.fail_after(30):
            batch = await pool.get_batch(min_size=min_size)
        assert len(batch) == 2


@pytest.mark.parametrize("seed", ["42", 1.5, True, -1], ids=["str", "float", "bool", "negative"])
async def test_reset_refuses_a_seed_that_is_no_seed_before_any_env_resets(seed: Any) -> None:
    # A negative or float seed reached the envs, whose refusal a pool with restarts took
    # for the env's failure (the env rebuilt, seeded else); True seeded them as 1.
    message = f"^reset\\(\\) seed must be a non-negative int or None, got {re.escape(repr(seed))}$"
    async with aioenv.make_pool("CartPole-v1", 2, mode="sync", restart="on_failure") as pool:
        with pytest.raises(ValueError, match=message):
            pool.reset(seed=seed)
        with pytest.raises(ValueError, match=message.replace("reset", "set_seeds")):
            await pool.set_seeds([3, seed])
        pool.reset(seed=3)  # nothing was sent or seeded: this reset is the first
        async for step, worker_id in pool:
            expected, _ = gymnasium.make("CartPole-v1").reset(seed=3 + worker_id)
            np.testing.assert_array_equal(step.observation, expected)
            assert "aioenv" not in step.info


async def test_get_batch_stacks_gymnasium_fields(mode: Any) -> None:
    async with aioenv.make_pool("CartPole-v1", 4, mode=modes(mode, 4), seed=0) as pool:
        pool.reset()
        batch = await pool.get_batch(min_size=4)
        assert len(batch) == 4
        assert sorted(batch.worker_ids.tolist()) == [0, 1, 2, 3]
        assert batch.observations.shape == (4, 4)
        assert batch.observations.dtype == np.float32
        assert batch.rewards.tolist() == [0.0] * 4
        assert not batch.dones.any()
        for row, (step, worker_id) in enumerate(batch):
            np.testing.assert_array_equal(batch.observations[row], step.observation)
            assert worker_id == batch.worker_ids[row]
        for worker_id in batch.worker_ids.tolist():
            pool.send_action(1, worker_id)
        batch = await pool.get_batch(min_size=2, max_size=3)
        assert 2 <= len(batch) <= 3
        assert batch.rewards.tolist() == [1.0] * len(batch)
        assert batch.terminated.dtype == np.bool_
        assert all(isinstance(info, dict) for info in batch.infos)
        await drain(pool)


async def test_get_batch_stacks_dict_observations_with_gymnasium_utilities() -> None:
    async with aioenv.make_pool(DictObservation, 3, mode=["sync", "thread", "process"]) as pool:
        pool.reset()
        batch = await pool.get_batch(min_size=3)
        for worker_id in batch.worker_ids.tolist():
            pool.send_action(worker_id, worker_id)
        batch = await pool.get_batch(min_size=3)
        observations = batch.observations
        assert set(observations) == {"position", "mode"}
        assert observations["position"].shape == (3, 2)
        assert observations["mode"].tolist() == batch.worker_ids.tolist()


async def test_batch_fields_need_gymnasium_states() -> None:
    async with aioenv.make_pool(Counter, 2, mode="sync") as pool:
        pool.reset()
        batch = await pool.get_batch(min_size=2)
        assert [state["t"] for state in batch.states] == [0, 0]
        with pytest.raises(TypeError, match="Batch.states"):
            _ = batch.observations


@pytest.mark.loops
async def test_get_batch_timeout_returns_what_is_ready(gate: str) -> None:
    workers = [aioenv.ThreadWorker(lambda: Gated(gate)), aioenv.SyncWorker(Counter)]
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        pool.send_action(1, 0)
        pool.send_action(1, 1)
        batch = await pool.get_batch(min_size=2, timeout=0.1)
        assert batch.worker_ids.tolist() == [1]
        batch = await pool.get_batch(min_size=1, timeout=0.05)
        assert len(batch) == 0  # nothing ready by the deadline: an empty batch, no hang
        open_gate(gate)
        batch = await pool.get_batch()
        assert batch.worker_ids.tolist() == [0]


async def test_get_batch_that_can_never_fill_raises() -> None:
    async with aioenv.make_pool(Counter, 2, mode="thread") as pool:
        pool.reset()
        with pytest.raises(aioenv.NoActionInFlight, match="min_size=3"):
            await pool.get_batch(min_size=3)
        with pytest.raises(ValueError, match="max_size"):
            await pool.get_batch(min_size=2, max_size=1)
        await drain(pool)


async def test_get_batch_returns_good_states_before_raising_an_error() -> None:
    workers = [aioenv.SyncWorker(Counter), aioenv.SyncWorker(lambda: Failing("step"))]
    async with aioenv.SyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=2)
        pool.send_action(1, 0)
        pool.send_action(13, 1)  # raises in the env
        batch = await pool.get_batch(min_size=1)
        assert batch.worker_ids.tolist() == [0]
        with pytest.raises(aioenv.EnvError) as caught:
            await pool.get_batch(min_size=1)
        assert caught.value.worker_id == 1


@pytest.mark.loops
async def test_get_state_timeout_returns_none(gate: str) -> None:
    async with aioenv.AsyncWorkerPool([aioenv.ProcessWorker(lambda: Gated(gate))]) as pool:
        pool.reset()
        await pool.get_state()
        pool.send_action(1, 0)
        assert await pool.get_state(timeout=0.05) is None
        assert await pool.get_state(timeout=0) is None
        open_gate(gate)
        result = await pool.get_state(timeout=30)
        assert result is not None and result[1] == 0


async def test_env_error_in_a_pool_names_the_worker_and_others_keep_working(mode: Any) -> None:
    kinds = modes(mode, 3)
    kinds = [kinds] * 3 if isinstance(kinds, str) else kinds
    workers = [
        WORKERS[kind](env)
        for kind, env in zip(
            kinds, [Counter, lambda: Failing("step", "bad step 7"), Counter], strict=True
        )
    ]
    async with aioenv.AsyncWorkerPool(workers) as pool:
        pool.reset()
        await pool.get_batch(min_size=3)
        for worker_id in range(3):
            pool.send_action(13, worker_id)
        errors, states = [], {}
        for _ in range(3):
            try:
                state, worker_id = await pool.get_state()  # type: ignore[misc]
                states[worker_id] = state
            except aioenv.EnvError as error:
                errors.append(error)
        assert len(errors) == 1
        assert errors[0].worker_id == 1
        assert f"{workers[1].kind} worker 1" in str(errors[0])
        assert "bad step 7" in str(errors[0])
        assert sorted(states) == [0, 2]
        assert states[0]["total"] == 13


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_nan_timeout_is_refused_as_a_negative_one_is(gate: str, kind: str) -> None:
    # NaN is no number >= 0: taken as it was, it set no deadline, so a call meant to wait
    # a bounded time waited as long as the env took.
    async with aioenv.AsyncWorkerPool([WORKERS[kind](lambda: Gated(gate))]) as pool:
        pool.reset()
        await pool.get_state()
        pool.send_action(1, 0)  # blocks in the env until the gate opens
        for call in (pool.get_state, pool.get_batch):
            with anyio.fail_after(10), pytest.raises(ValueError, match=">= 0, got nan"):
                await call(timeout=float("nan"))
        open_gate(gate)
        result = await pool.get_state(timeout=30)
        assert result is not None and result[1] == 0


async def test_misuse_is_an_immediate_clear_error(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 2, mode=modes(mode, 2)) as pool:
        with pytest.raises(aioenv.NoActionInFlight, match="send_action"):
            await pool.get_state()
        with pytest.raises(aioenv.NoActionInFlight):
            await pool.get_batch()
        with pytest.raises(aioenv.UnknownWorker, match="0..1"):
            pool.send_action(1, 2)
        with pytest.raises(aioenv.UnknownWorker):
            pool.send_action(1, -1)
        with pytest.raises(aioenv.UnknownWorker):
            pool.send_action(1, "0")  # type: ignore[arg-type]
        pool.send_action(RESET, np.int64(0))  # numpy ints are fine ids
        with pytest.raises(aioenv.StateNotTaken, match="worker 0"):
            pool.send_action(1, 0)
        with pytest.raises(aioenv.StateNotTaken, match="nothing was sent"):
            pool.reset()
        assert (await pool.get_state()) is not None
        with pytest.raises(ValueError, match="timeout"):
            await pool.get_state(timeout=-1)
    with pytest.raises(aioenv.ClosedError):
        pool.send_action(1, 0)
    with pytest.raises(aioenv.ClosedError):
        pool.reset()
    with pytest.raises(aioenv.ClosedError):
        await pool.get_state()
    with pytest.raises(aioenv.ClosedError):
        await pool.get_batch()
    await pool.aclose()  # idempotent


async def test_pool_rejects_bad_workers() -> None:
    worker = aioenv.SyncWorker(Counter)
    with pytest.raises(ValueError, match="at least one"):
        aioenv.AsyncWorkerPool([])
    with pytest.raises(TypeError, match="make_pool"):
        aioenv.AsyncWorkerPool([Counter()])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="already belongs"):
        aioenv.AsyncWorkerPool([worker, worker])
    async with aioenv.AsyncWorkerPool([worker]) as pool:
        with pytest.raises(ValueError, match="already belongs"):
            aioenv.SyncWorkerPool([worker])
        with pytest.raises(aioenv.NoActionInFlight, match="pool.get_state"):
            await worker.get_state()
        assert len(pool) == 1


def test_make_pool_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="mode\\[1\\]"):
        aioenv.make_pool(Counter, 2, mode=["thread", "gpu"])
    with pytest.raises(ValueError, match="2 workers"):
        aioenv.make_pool(Counter, 2, mode=["thread"])
    with pytest.raises(ValueError, match="got mode=None; choose one of 'sync'"):
        aioenv.make_pool(Counter, 2, mode=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="context.*process"):
        aioenv.make_pool(Counter, 2, mode="thread", context="spawn")
    with pytest.raises(TypeError, match="unknown option 'colour'"):
        aioenv.make_pool(Counter, 2, colour="red")
    with pytest.raises(TypeError, match="factory"):
        aioenv.make_pool(Counter(), 2, mode="thread")
    with pytest.raises(ValueError, match="num_workers"):
        aioenv.make_pool(Counter, 0)


@pytest.mark.parametrize(
    ("mode", "option", "message"),
    [
        ("sync", "max_episode_steps", "max_episode_steps must be None or an int >= 1, got True"),
        ("sync", "envs_per_worker", "envs_per_worker must be an int >= 1, got True"),
        ("process", "envs_per_process", "envs_per_process must be an int >= 1, got True"),
        ("sync", "cleanup_time", "cleanup_time must be a number >= 0, got True"),
        ("sync", "restart_backoff", "restart_backoff must be a number >= 0, got True"),
    ],
    ids=["max_episode_steps", "envs_per_worker", "envs_per_process", "cleanup_time", "backoff"],
)
def test_make_pool_refuses_a_bool_for_a_number_as_it_does_for_every_option(
    mode: str, option: str, message: str
) -> None:
    # max_episode_steps=True was taken as 1: every episode truncated after its first step.
    with pytest.raises(ValueError, match=f"^{message}$"):
        aioenv.make_pool(Counter, 2, mode=mode, **{option: True})
    assert not worker_processes()


@pytest.mark.parametrize("seed", ["42", 1.5, True, -1], ids=["str", "float", "bool", "negative"])
def test_make_pool_refuses_a_seed_that_is_no_seed_as_a_worker_does(seed: Any) -> None:
    message = f"^seed must be a non-negative int or None, got {re.escape(repr(seed))}$"
    with pytest.raises(ValueError, match=message):
        aioenv.SyncWorker(Counter, seed=seed)
    with pytest.raises(ValueError, match=message):  # seed=True seeded the pool as seed=1
        aioenv.make_pool(Counter, 2, mode="sync", seed=seed)


async def test_make_pools_cleanup_time_is_its_workers_own_too() -> None:
    # A worker closes within the least of its own cleanup time and its pool's: a pool's
    # longer one than the default reaches its workers (a slow env's close is waited for).
    async with aioenv.make_pool(Counter, 2, mode="sync", cleanup_time=42.0) as pool:
        assert pool.cleanup_time == 42.0
        assert [worker.cleanup_time for worker in pool.workers] == [42.0, 42.0]


async def test_close_sentinel_closes_just_that_worker(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 3, mode=modes(mode, 3)) as pool:
        pool.reset()
        await pool.get_batch(min_size=3)
        pool.send_action(CLOSE, 1)
        with pytest.raises(aioenv.ClosedError, match="worker 1"):
            pool.send_action(1, 1)
        pool.reset()  # resets the open workers only
        batch = await pool.get_batch(min_size=2)
        assert sorted(batch.worker_ids.tolist()) == [0, 2]
        pool.send_action(1, 0)
        pool.send_action(1, 2)
        assert sorted([wid async for _, wid in pool]) == [0, 2]
        await pool.workers[1].aclose()
        if pool.workers[1].kind == "process":
            assert pool.workers[1].pid not in worker_processes()  # type: ignore[attr-defined]


async def test_async_iteration_yields_until_nothing_is_in_flight(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 3, mode=modes(mode, 3)) as pool:
        pool.reset()
        steps = 0
        async for state, worker_id in pool:
            if state["t"] < 3:
                pool.send_action(1, worker_id)
            steps += 1
        assert steps == 3 * 4


@pytest.mark.loops
@pytest.mark.parametrize("ending", ["raise", "cancel"])
async def test_context_exit_cleans_up_after_errors_and_cancellation(
    mode: Any, ending: str, gate: str
) -> None:
    kinds = modes(mode, 3)
    kind_list = [kinds] * 3 if isinstance(kinds, str) else kinds
    with warnings.catch_warnings(record=True) as caught, anyio.CancelScope() as scope:
        warnings.simplefilter("always")
        try:
            async with aioenv.make_pool(
                lambda: Gated(gate), 3, mode=kinds, cleanup_time=0.5
            ) as pool:
                pool.reset()
                await pool.get_batch(min_size=3)
                for worker_id, kind in enumerate(kind_list):
                    # An async worker steps a blocking env on the loop itself: it would block
                    # the test (tests/test_coroutine.py cancels coroutine steps in flight).
                    if kind not in ("sync", "async"):
                        pool.send_action(1, worker_id)  # in flight, blocked on the gate
                if ending == "raise":
                    raise RuntimeError("the training loop failed")
                scope.cancel()
                if kinds in ("sync", "async"):
                    await anyio.sleep(10)  # a sync pool has nothing in flight to wait for
                await pool.get_state()
                pytest.fail("cancelled: never reached")
        except RuntimeError as error:
            assert ending == "raise" and "training loop" in str(error)
    open_gate(gate)  # the abandoned thread steps can finish now, and their threads end
    assert scope.cancel_called == (ending == "cancel")
    assert not worker_processes()
    abandoned = [w for w in caught if "cannot be killed" in str(w.message)]
    assert len(abandoned) == kind_list.count("thread")
    with pytest.raises(aioenv.ClosedError):
        pool.send_action(1, 0)


@pytest.mark.loops
async def test_cancelled_get_state_loses_nothing(mode: Any) -> None:
    async with aioenv.make_pool(Counter, 4, mode=modes(mode, 4)) as pool:
        pool.reset()
        await anyio.lowlevel.checkpoint()
        taken: list[int] = []
        for _ in range(200):
            with anyio.move_on_after(0):
                result = await pool.get_state()
                assert result is not None
                taken.append(result[1])
            if len(taken) == 4:
                break
            await anyio.sleep(0.001)
        taken += [worker_id async for _, worker_id in pool]
        assert sorted(taken) == [0, 1, 2, 3]


async def test_async_for_in_two_tasks_ends_in_both_once_nothing_is_in_flight(mode: Any) -> None:
    """Two tasks looping ``async for`` over one pool: the loop that waited while the other
    took the last state ends as well (no worker has an action in flight), rather than
    raising NoActionInFlight."""
    async with aioenv.make_pool(Counter, 2, mode=modes(mode, 2)) as pool:
        await pool.reset_all()
        budget = [4]  # actions the loops send between them, after the first two
        taken: dict[str, list[int]] = {"a": [], "b": []}

        async def loop(name: str) -> None:
            async for _, worker_id in pool:
                taken[name].append(worker_id)
                if budget[0]:
                    budget[0] -= 1
                    pool.send_action(1, worker_id)

        pool.send_action(1, 0)
        pool.send_action(1, 1)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(loop, "a")
                group.start_soon(loop, "b")
        assert len(taken["a"] + taken["b"]) == 6  # the first two states and four more
        assert not pool.num_pending


async def test_aclose_wakes_waiters_with_closed_error(gate: str) -> None:
    workers = [aioenv.ProcessWorker(lambda: Gated(gate), cleanup_time=0.5)]
    async with aioenv.AsyncWorkerPool(workers) as pool:  # (under trio: its bridge)
        pool.reset()
        await pool.get_state()
        pool.send_action(1, 0)
        errors: list[BaseException] = []

        async def waiter() -> None:
            try:
                await pool.get_state()
            except aioenv.ClosedError as error:
                errors.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(waiter)
            await anyio.wait_all_tasks_blocked()  # the waiter waits in get_state
            await pool.aclose()
        assert len(errors) == 1


async def test_async_for_raises_closed_error_once_the_pool_closes(gate: str) -> None:
    """A loop waiting in ``async for`` when the pool closes raises ClosedError, as
    ``get_state`` does, rather than end as if every state had been taken; an ``async for``
    over a closed pool raises at once."""
    workers = [aioenv.ProcessWorker(lambda: Gated(gate), cleanup_time=0.5)]
    async with aioenv.AsyncWorkerPool(workers) as pool:  # (under trio: its bridge)
        pool.reset()
        await pool.get_state()
        pool.send_action(1, 0)  # its step waits for the gate: the loop waits for it
        errors: list[BaseException] = []
        taken: list[int] = []

        async def loop() -> None:
            try:
                async for _, worker_id in pool:
                    taken.append(worker_id)
            except aioenv.ClosedError as error:
                errors.append(error)

        async with anyio.create_task_group() as group:
            group.start_soon(loop)
            await anyio.wait_all_tasks_blocked()  # the loop waits in async for
            await pool.aclose()
        assert len(errors) == 1 and taken == []
    with pytest.raises(aioenv.ClosedError):
        async for _ in pool:
            pass


async def test_mixed_pool_runs_every_kind_together() -> None:
    async with aioenv.make_pool(
        "CartPole-v1", 4, mode=["thread", "process", "thread", "process"], seed=1
    ) as pool:
        assert [w.kind for w in pool.workers] == ["thread", "process", "thread", "process"]
        pool.reset()
        episodes = 0
        async for step, worker_id in pool:
            if step.done:
                episodes += 1
                if episodes >= 8:
                    continue
                pool.send_action(RESET, worker_id)
            else:
                pool.send_action(pool.workers[worker_id].action_space.sample(), worker_id)
        assert episodes >= 8
    assert not worker_threads()


def test_a_mixed_pool_that_fails_to_build_leaves_no_process_of_the_kinds_started_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Process workers start together, before the other kinds' workers are made: a later
    # worker that fails (here a thread that cannot start; a Ray actor that cannot be made
    # does the same) stops the children started for the workers after it too.
    def no_thread(self: Any, seed: int | None) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(aioenv.ThreadWorker, "_setup", no_thread)
    with pytest.raises(RuntimeError, match="new thread"):
        aioenv.make_pool(Counter, 3, mode=["thread", "process", "process"])
    # (the autouse leak check: no worker process is left behind)


async def _take(pool: aioenv.WorkerPool[Any], take: str) -> list[tuple[Any, int]]:
    """The next states a loop over ``take`` gets: one from ``get_state``, or a batch's."""
    if take == "get_state":
        return [await pool.get_state()]  # type: ignore[list-item]
    batch = await pool.get_batch()
    return list(zip(batch.states, batch.worker_ids.tolist(), strict=True))


class Ticker:
    """A task that counts how often the event loop's 5 ms timer fires."""

    def __init__(self) -> None:
        self.ticks = 0

    async def run(self) -> None:
        while True:
            await anyio.sleep(0.005)
            self.ticks += 1


@pytest.mark.serial  # it counts states per worker over a time window
@pytest.mark.loops
@pytest.mark.parametrize("take", ["get_state", "get_batch"])
async def test_a_sync_worker_never_starves_the_other_workers_or_the_event_loop(take: str) -> None:
    """A sync worker's state is in the pool as soon as its action is sent, so a loop that
    keeps taking it and sending it the next action never has to wait: the pool still
    lets the event loop run, so the thread and process workers' states come in and the
    loop's timers fire."""
    ticker = Ticker()

    seen = [0, 0, 0]
    async with (
        aioenv.make_pool("CartPole-v1", 3, mode=["sync", "thread", "process"], seed=1) as pool,
        anyio.create_task_group() as group,
    ):
        group.start_soon(ticker.run)
        pool.reset()
        # Bounded by the clock, not by the loop's timers: without its turns the loop
        # could not fire a cancel scope's deadline.
        give_up = time.monotonic() + 60
        while (min(seen) < 50 or ticker.ticks < 3) and time.monotonic() < give_up:
            for step, worker_id in await _take(pool, take):
                seen[worker_id] += 1
                pool.send_action(RESET if step.done else 0, worker_id)
        group.cancel_scope.cancel()
        await drain(pool)
    assert min(seen) >= 50, f"states taken per worker (sync, thread, process): {seen}"
    assert ticker.ticks >= 3, f"the event loop's timer fired {ticker.ticks} times"


@pytest.mark.parametrize("take", ["async for", "get_state", "get_batch"])
async def test_a_sync_worker_restarted_comes_back_while_the_others_keep_answering(
    take: str,
) -> None:
    """In a pool of sync workers, a state is always ready while one is stepped; a failed
    worker's restart runs on the event loop, which the pool still lets run, so the
    worker comes back (its new env's reset answers the action that failed)."""
    failures: list[aioenv.WorkerError] = []
    served: list[int] = []
    async with aioenv.make_pool(
        lambda: Failing("step"), 2, mode="sync", restart="on_failure", on_failure=failures.append
    ) as pool:
        with anyio.fail_after(60):
            pool.reset()
            pool_states = aiter(pool) if take == "async for" else None
            while served.count(0) < 3 and len(served) < 2_000:
                if pool_states is not None:
                    taken = [await anext(pool_states)]
                else:
                    taken = await _take(pool, take)
                for _, worker_id in taken:
                    served.append(worker_id)
                    failing = worker_id == 0 and served.count(0) == 2
                    pool.send_action(13 if failing else 1, worker_id)
            await pool.drain()
    assert len(failures) == 1
    assert served.count(0) == 3, f"worker 0 served {served.count(0)} times in {len(served)}"


@pytest.mark.serial  # it counts a timer's ticks over a time window
@pytest.mark.parametrize("force_sync", [False, True], ids=["sync", "force_sync"])
async def test_a_pool_of_sync_workers_lets_the_event_loops_other_tasks_run(
    force_sync: bool,
) -> None:
    """Every state of a pool of sync workers is ready as soon as its action is sent, so a
    loop over them never waits: the pool still gives the event loop a turn now and then,
    so the program's other tasks and timers run."""
    ticker = Ticker()

    async with (
        aioenv.make_pool(Counter, 2, mode="thread", force_sync=True)
        if force_sync
        else aioenv.make_pool(Counter, 2, mode="sync") as pool,
        anyio.create_task_group() as group,
    ):
        group.start_soon(ticker.run)
        pool.reset()
        give_up = time.monotonic() + 60  # the clock's: the loop's timers are what is tested
        while ticker.ticks < 3 and time.monotonic() < give_up:
            _, worker_id = await pool.get_state()  # type: ignore[misc]
            pool.send_action(1, worker_id)
        group.cancel_scope.cancel()
        await drain(pool)
    assert ticker.ticks >= 3, f"the event loop's timer fired {ticker.ticks} times"


MIXED_WITH_SYNC = [["sync", "thread", "thread", "thread"], ["sync", "thread", "process", "process"]]


async def _serve_mixed(mode: list[str], take: str, count: int) -> list[int]:
    """The worker ids a loop over ``take`` is served, in order, for ``count`` states of a
    pool of ``mode`` (after every worker's reset state: all of them started), sending
    each worker its next action as soon as its state is taken."""
    served: list[int] = []
    random = np.random.default_rng(0)
    async with aioenv.make_pool("CartPole-v1", len(mode), mode=mode, seed=1) as pool:
        with anyio.fail_after(120):
            pool.reset()
            for _, worker_id in await pool.drain():
                pool.send_action(0, worker_id)
            if take == "async for":
                async for step, worker_id in pool:
                    served.append(worker_id)
                    if len(served) == count:
                        break
                    pool.send_action(RESET if step.done else int(random.integers(2)), worker_id)
            while len(served) < count:
                for step, worker_id in await _take(pool, take):
                    served.append(worker_id)
                    pool.send_action(RESET if step.done else int(random.integers(2)), worker_id)
            await pool.drain()
    return served[:count]


@pytest.mark.parametrize("take", ["async for", "get_state", "get_batch"])
@pytest.mark.parametrize("mode", MIXED_WITH_SYNC, ids="-".join)
async def test_a_sync_worker_waits_its_turn_behind_the_others_answers(
    mode: list[str], take: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fair first-ready (the issue a user hit: a sync worker took 98.7% of the states of a
    pool of one sync and three thread workers): a sync worker's state is in the pool as soon as its action is
    sent, yet it is not served again before every other worker served before it, whose
    answer is in the pool or on its way (the pool waits for those, at most IN_LINE_WAIT:
    made long here, so that a loaded machine changes nothing)."""
    monkeypatch.setattr("aioenv.workers._inbox.IN_LINE_WAIT", 30.0)
    served = await _serve_mixed(mode, take, 400)
    turns = [i for i, worker_id in enumerate(served) if worker_id == 0]
    assert len(turns) >= 400 // len(mode) - 1, f"served: {served}"
    for start, end in itertools.pairwise(turns):
        between = set(served[start + 1 : end])
        assert between == set(range(1, len(mode))), f"served between two syncs: {served}"
