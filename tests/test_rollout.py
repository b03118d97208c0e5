"""Rollouts inside workers (pool.set_policy, pool.rollout) and per-worker env updates
(pool.call with PerWorker): segments checked transition by transition against a plain
replay of each worker's env, versions, one policy copy per process, restarts,
cancellation, the forced-sync twin, Ray actors, and bad input."""

from __future__ import annotations

import collections
import functools
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import envs
import gymnasium
import numpy as np
import pytest
import space_envs
from envs import RecordingPolicy, UnpicklableHere, Walk, WalkInPlace, choose_walk
from gymnasium.vector.utils import batch_space, iterate
from support import modes

import aioenv

N = 4
SEED = 11
AUTORESETS = ["disabled", "next_step", "same_step"]


def replay(worker_id: int, rows: int = 80) -> list[tuple[Any, ...]]:
    """Worker ``worker_id``'s first transitions, played with ``choose_walk`` on a plain env
    seeded as ``make_pool(seed=SEED)`` seeds it, reset at each episode's end:
    ``(step, observation, action, reward, terminated, truncated, next_observation)``."""
    env = Walk()
    observation, _ = env.reset(seed=aioenv.worker_seeds(SEED, N)[worker_id])
    out: list[tuple[Any, ...]] = []
    step = 0
    while len(out) < rows:
        action = choose_walk(observation)
        after, reward, terminated, truncated, _ = env.step(action)
        out.append((step, observation, action, reward, terminated, truncated, after))
        step += 1
        observation = after
        if terminated or truncated:
            observation, _ = env.reset()
            step = 0
    return out


REPLAYS = {worker_id: replay(worker_id) for worker_id in range(N)}


def rows_of(part: aioenv.Trajectories, worker_id: int) -> list[tuple[Any, ...]]:
    mine = np.flatnonzero(part.worker_id == worker_id)
    return [
        (
            int(part.step[i]),
            part.observations[i],
            int(part.actions[i]),
            float(part.rewards[i]),
            bool(part.terminated[i]),
            bool(part.truncated[i]),
            part.next_observations[i],
        )
        for i in mine
    ]


def assert_rows(got: list[tuple[Any, ...]], want: list[tuple[Any, ...]], where: str) -> None:
    assert len(got) == len(want), where
    for index, (row, expected) in enumerate(zip(got, want, strict=True)):
        assert row[0] == expected[0], f"{where}, row {index}: step {row[0]} != {expected[0]}"
        np.testing.assert_array_equal(row[1], expected[1])
        assert row[2:6] == expected[2:6], f"{where}, row {index}"
        np.testing.assert_array_equal(row[6], expected[6])


def assert_episode_ids(parts: list[aioenv.Trajectories]) -> None:
    """Ids are ``k * N + worker`` for the k-th episode of a worker; an episode cut by a
    segment's end is open there and goes on, with the same id, in the next segment."""
    for worker_id in range(N):
        ordinal, last_step = -1, -1
        for part in parts:
            mine = np.flatnonzero(part.worker_id == worker_id)
            for i in mine:
                step = int(part.step[i])
                ordinal += step == 0
                assert step == 0 or step == last_step + 1
                assert int(part.episode_id[i]) == ordinal * N + worker_id
                last_step = step
            if len(mine):
                done = part.terminated[mine] | part.truncated[mine]
                ends = np.flatnonzero(done)
                cut = ends[-1] + 1 if len(ends) else 0
                assert not part.open[mine][:cut].any()
                assert part.open[mine][cut:].all()


def walk_pool(mode: Any, **options: Any) -> aioenv.WorkerPool[Any]:
    return aioenv.make_pool(Walk, N, mode=modes(mode, N), seed=SEED, **options)


# Segments ------------------------------------------------------------------------------
@pytest.mark.parametrize("autoreset", AUTORESETS)
async def test_segments_have_exact_lengths_and_replay_each_env(mode: Any, autoreset: str) -> None:
    async with walk_pool(mode, autoreset=autoreset) as pool:
        assert await pool.set_policy(choose_walk) == 0
        parts = [await pool.rollout(7), await pool.rollout(5), await pool.rollout(1)]
        stats = pool.episode_stats()
    for part, length in zip(parts, (7, 5, 1), strict=True):
        assert len(part) == N * length
        assert [int(np.count_nonzero(part.worker_id == w)) for w in range(N)] == [length] * N
        assert (part.policy_version == 0).all()
        assert np.all(np.diff(part.worker_id) >= 0)
    for worker_id in range(N):
        got = [row for part in parts for row in rows_of(part, worker_id)]
        assert_rows(got, REPLAYS[worker_id][:13], f"worker {worker_id}")
        ends = [row for row in REPLAYS[worker_id][:13] if row[4] or row[5]]
        assert stats[worker_id].episodes == len(ends)
        episode_returns = []
        total = 0.0
        for row in REPLAYS[worker_id][:13]:
            total += row[3]
            if row[4] or row[5]:
                episode_returns.append(total)
                total = 0.0
        if episode_returns:
            assert stats[worker_id].last_return == pytest.approx(episode_returns[-1])
            assert stats[worker_id].total_return == pytest.approx(sum(episode_returns))
    assert_episode_ids(parts)


# Not "same_step": there the env's reset writes over the final observation it carries
# before the step is answered, by hand as in a segment (as in gymnasium's vector envs).
@pytest.mark.parametrize("autoreset", ["disabled", "next_step"])
async def test_rows_keep_their_observations_where_the_env_writes_over_its_array(
    mode: Any, autoreset: str
) -> None:
    async with aioenv.make_pool(
        WalkInPlace, N, mode=modes(mode, N), seed=SEED, autoreset=autoreset
    ) as pool:
        await pool.set_policy(choose_walk)
        first = await pool.rollout(7)
        pool.send_action(REPLAYS[0][7][2], 0)  # worker 0's next step by hand
        await pool.get_state()
        second = await pool.rollout(4)
    for worker_id in range(N):
        assert_rows(rows_of(first, worker_id), REPLAYS[worker_id][:7], f"worker {worker_id}")
    assert_rows(rows_of(second, 0), REPLAYS[0][8:12], "worker 0, from a step by hand")


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_rows_keep_their_graphs_where_the_env_writes_over_its_nodes(kind: str) -> None:
    # A Graph's GraphInstance (a named tuple of arrays) is copied as a Box's array is,
    # where the rows kept the env's own, so every row showed its last step's nodes.
    async with aioenv.make_pool(envs.GraphInPlace, 2, mode=kind) as pool:
        await pool.set_policy(lambda observation: 0)
        part = await pool.rollout(3)
    for name, want in (("observations", [0, 1, 2]), ("next_observations", [1, 2, 3])):
        graphs = getattr(part, name)
        assert all(type(graph) is gymnasium.spaces.GraphInstance for graph in graphs)
        assert [float(graph.nodes[0, 0]) for graph in graphs] == want * 2, name


async def test_a_time_limit_truncates_episodes_inside_segments() -> None:
    async with walk_pool("thread", max_episode_steps=2) as pool:
        await pool.set_policy(choose_walk)
        part = await pool.rollout(6)
    assert (part.step <= 1).all()
    ends = part.terminated | part.truncated
    assert (ends == (part.step == 1)).all()


async def test_a_seed_starts_every_env_afresh_as_reset_seeds_it() -> None:
    async with walk_pool("thread") as pool:
        await pool.set_policy(choose_walk)
        await pool.rollout(3)
        part = await pool.rollout(4, seed=100)
    for worker_id in range(N):
        env = Walk()
        observation, _ = env.reset(seed=100 + worker_id)
        rows = rows_of(part, worker_id)
        assert rows[0][0] == 0
        np.testing.assert_array_equal(rows[0][1], observation)


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_segment_goes_on_from_a_reset_or_step_sent_by_hand(kind: str) -> None:
    async with walk_pool(kind) as pool:
        await pool.set_policy(choose_walk)
        await pool.rollout(3)
        resets = await pool.reset_all()
        after_reset = await pool.rollout(2)
        for worker_id in range(N):
            pool.send_action(0, worker_id)
        stepped = (await pool.get_batch(min_size=N)).sorted()
        after_step = await pool.rollout(1)
    for worker_id in range(N):
        rows = rows_of(after_reset, worker_id)
        assert rows[0][0] == 0
        np.testing.assert_array_equal(rows[0][1], resets.observations[worker_id])
        state = stepped.states[worker_id]
        row = rows_of(after_step, worker_id)[0]
        if state.terminated or state.truncated:
            assert row[0] == 0  # that episode ended: the segment starts with a reset
        else:  # the hand step was the transition after the segment's last row
            last = rows[-1]
            assert row[0] == (1 if last[4] or last[5] else last[0] + 2)
            np.testing.assert_array_equal(row[1], state.observation)


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_worker_of_several_envs_goes_on_from_a_step_sent_by_hand(kind: str) -> None:
    # A batch worker answers a step whose episodes go on without making a Step per env;
    # the next segment must still start from that step, not from a reset.
    async with aioenv.make_pool(Walk, 2, mode=kind, envs_per_worker=2, seed=SEED) as pool:
        await pool.set_policy(choose_walk)
        await pool.reset_all()
        for worker_id in range(2):
            pool.send_action(np.zeros(2, np.int64), worker_id)
        stepped = (await pool.get_batch(min_size=2)).sorted()
        part = await pool.rollout(1)
    for worker_id in range(2):
        batch = stepped.states[worker_id]
        assert not batch.dones.any()  # Walk's episodes last at least 2 steps
        rows = rows_of(part, worker_id)
        assert len(rows) == 2  # env 0's row, then env 1's
        for env, row in enumerate(rows):
            assert row[0] == 1  # the episode's second observation, not a reset's first
            np.testing.assert_array_equal(row[1], batch.observations[env])


@pytest.mark.parametrize("kind", ["thread", "process"])
@pytest.mark.parametrize("envs_per_worker", [1, 2])
async def test_a_segment_after_a_reset_by_hand_gives_its_episode_a_new_id(
    kind: str, envs_per_worker: int
) -> None:
    # The last segment's episode was left open; the episode a reset by hand began (and a
    # step by hand went on with) is another one and must not carry the open one's id.
    async with aioenv.make_pool(
        Walk, 2, mode=kind, envs_per_worker=envs_per_worker, seed=SEED
    ) as pool:
        await pool.set_policy(choose_walk)
        first = await pool.rollout(1)
        await pool.reset_all()
        action = 0 if envs_per_worker == 1 else np.zeros(envs_per_worker, np.int64)
        for worker_id in range(2):
            pool.send_action(action, worker_id)
        await pool.get_batch(min_size=2)
        second = await pool.rollout(1)
    assert first.open.all() and second.open.all()  # Walk's episodes last 2 steps or more
    assert (second.step == 1).all()
    assert not set(first.episode_id.tolist()) & set(second.episode_id.tolist())


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_episode_stats_count_an_episode_played_partly_by_hand_whole(kind: str) -> None:
    # Rows 0-2 in a segment, 3-5 by hand, 6-9 in a segment: each episode that ends counts
    # with its every reward and step, wherever they were played.
    async with walk_pool(kind, autoreset="same_step") as pool:
        await pool.set_policy(choose_walk)
        await pool.rollout(3)
        for row in range(3, 6):
            for worker_id in range(N):
                pool.send_action(REPLAYS[worker_id][row][2], worker_id)
            await pool.get_batch(min_size=N)
        await pool.rollout(4)
        stats = pool.episode_stats()
    for worker_id in range(N):
        episodes, total, length = [], 0.0, 0
        for row in REPLAYS[worker_id][:10]:
            total, length = total + row[3], length + 1
            if row[4] or row[5]:
                episodes.append((total, length))
                total, length = 0.0, 0
        assert stats[worker_id].episodes == len(episodes), f"worker {worker_id}"
        assert stats[worker_id].total_return == pytest.approx(sum(r for r, _ in episodes))
        assert stats[worker_id].total_length == sum(n for _, n in episodes), f"worker {worker_id}"


async def test_several_envs_per_worker_each_play_the_segment() -> None:
    async with aioenv.make_pool(Walk, 2, mode="process", envs_per_worker=2, seed=SEED) as pool:
        await pool.set_policy(choose_walk)
        first = await pool.rollout(5)
        second = await pool.rollout(3)
    for part, length in ((first, 5), (second, 3)):
        assert len(part) == 2 * 2 * length
        assert [int(np.count_nonzero(part.worker_id == w)) for w in range(2)] == [2 * length] * 2
    lanes = 4
    for part in (first, second):
        assert set((part.episode_id % lanes).tolist()) == {0, 1, 2, 3}
        for rows in part.episode_slices():  # contiguous episodes, each in step order
            steps = part.step[rows]
            assert (np.diff(steps) == 1).all()


def choose_walk_mode(observation: dict[str, Any]) -> int:
    return (int(observation["mode"]) + 1) % 3


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_dict_observations_of_workers_of_several_envs_are_stacked_by_key(kind: str) -> None:
    # As gymnasium batches a Dict space (and as workers of one env give them): a dict of
    # arrays, one row per transition, not an array of dicts.
    parts = []
    for envs_per_worker in (1, 2):
        async with aioenv.make_pool(
            envs.DictObservation, 4 // envs_per_worker, mode=kind, envs_per_worker=envs_per_worker
        ) as pool:
            await pool.set_policy(choose_walk_mode)
            parts.append(await pool.rollout(3))
    for part in parts:
        for observations in (part.observations, part.next_observations):
            assert isinstance(observations, dict) and sorted(observations) == ["mode", "position"]
            assert observations["position"].shape == (12, 2)
            assert observations["position"].dtype == np.float32
            assert observations["mode"].shape == (12,)
    for name in ("observations", "next_observations"):
        for key in ("mode", "position"):
            one, several = getattr(parts[0], name)[key], getattr(parts[1], name)[key]
            np.testing.assert_array_equal(one, several)
            assert one.dtype == several.dtype


def echoed(observation: Any) -> Any:
    return observation  # space_envs.Echo's action space is its observation space


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_actions_numpy_cannot_stack_are_an_array_with_one_entry_per_row(kind: str) -> None:
    # A hybrid action (a Tuple of a Discrete, a Box and a Text): as Trajectories promises
    # of columns other than observations, a 1-D array with one action per row, where
    # numpy's array of the rows raised (inhomogeneous shape) once every segment was played.
    async with aioenv.make_pool(functools.partial(space_envs.echo, "Tuple"), 2, mode=kind) as pool:
        await pool.set_policy(echoed)
        part = await pool.rollout(4)
    actions, observations = part.actions, part.observations
    assert isinstance(actions, np.ndarray) and actions.shape == (8,)
    for row, action in enumerate(actions):
        assert action[0] == observations[0][row] and action[2] == observations[2][row]
        np.testing.assert_array_equal(action[1], observations[1][row])


@pytest.mark.parametrize("kind", ["thread", "process"])
@pytest.mark.parametrize("space", ["Text", "Sequence", "Graph", "OneOf", "Tuple", "DictOfRows"])
async def test_observations_of_workers_of_several_envs_are_batched_as_one_env_workers_give_them(
    kind: str, space: str
) -> None:
    # Spaces gymnasium batches as a tuple with one item per row (and a Tuple or a Dict
    # nesting them): the same rows, in the same form, however the envs are grouped, where
    # workers of several envs raised numpy's inhomogeneous-shape ValueError (Graph) or
    # gave another form (a numpy array of strings for Text, of arrays for Sequence).
    parts = []
    for envs_per_worker in (1, 2):
        env = functools.partial(space_envs.echo, space)
        async with aioenv.make_pool(
            env, 4 // envs_per_worker, mode=kind, envs_per_worker=envs_per_worker
        ) as pool:
            await pool.set_policy(echoed)
            parts.append(await pool.rollout(3, seed=SEED))
    single = space_envs.make_space(space)
    one, several = parts
    for name in ("observations", "next_observations"):
        assert type(getattr(several, name)) is type(getattr(one, name)), name
        rows = [list(iterate(batch_space(single, 12), getattr(part, name))) for part in parts]
        for lane in range(4):
            mine = [np.flatnonzero(part.episode_id % 4 == lane) for part in parts]
            want = [space_envs.digest(rows[0][i]) for i in mine[0]]
            assert [space_envs.digest(rows[1][i]) for i in mine[1]] == want, (name, lane)
    assert several.select(np.arange(12)[::-1]).observation_space is not None


# Versions ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["thread", "process", "mixed"])
async def test_transitions_carry_the_version_of_the_policy_that_chose_them(kind: str) -> None:
    mode = ["process", "thread", "sync"] if kind == "mixed" else kind
    async with walk_pool(mode) as pool:
        assert pool.policy_version is None
        assert await pool.set_policy(choose_walk) == 0
        first = await pool.rollout(3)
        assert await pool.set_policy(choose_walk) == 1
        second = await pool.rollout(3)
        assert await pool.set_policy(choose_walk, version=7) == 7
        third = await pool.rollout(2)
        assert pool.policy_version == 7
        for bad in (7, 3):
            with pytest.raises(ValueError, match="versions must increase"):
                await pool.set_policy(choose_walk, version=bad)
        assert pool.policy_version == 7
    assert (first.policy_version == 0).all()
    assert (second.policy_version == 1).all()
    assert (third.policy_version == 7).all()


# One copy per process --------------------------------------------------------------------
def marks(directory: Path, what: str) -> collections.Counter[str]:
    """How many ``what`` marks each pid left."""
    return collections.Counter(p.name.split("-")[1] for p in directory.glob(f"{what}-*"))


async def test_a_policy_is_unpickled_once_per_child_and_shared_by_its_slots(
    tmp_path: Path,
) -> None:
    policy = RecordingPolicy(str(tmp_path))
    async with aioenv.make_pool(Walk, 4, mode="process", envs_per_process=2, seed=SEED) as pool:
        pids = {worker.pid for worker in pool.workers}  # type: ignore[attr-defined]
        assert len(pids) == 2
        await pool.set_policy(policy)
        await pool.rollout(4)
        await pool.rollout(4)  # a later segment reuses the copy: nothing is sent again
        unpickled = marks(tmp_path, "unpickled")
        called = marks(tmp_path, "called")
        assert unpickled == {str(pid): 1 for pid in pids}
        assert called == {str(pid): 1 for pid in pids}  # one object per child, both slots
        await pool.set_policy(policy)  # a new version: one new copy per child
        await pool.rollout(2)
        assert marks(tmp_path, "unpickled") == {str(pid): 2 for pid in pids}


async def test_in_process_workers_share_the_policy_object_itself(tmp_path: Path) -> None:
    policy = RecordingPolicy(str(tmp_path))
    async with walk_pool(["thread", "sync", "async"]) as pool:
        await pool.set_policy(policy)
        await pool.rollout(3)
    assert not marks(tmp_path, "unpickled")
    assert {p.name for p in tmp_path.glob("called-*")} == {f"called-{os.getpid()}-{id(policy)}"}


# Failures --------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["thread", "process", "mixed"])
async def test_a_failed_segment_is_dropped_whole_and_the_restarted_env_plays_it_again(
    kind: str,
) -> None:
    mode = ["process", "thread", "sync"] if kind == "mixed" else kind
    factory = envs_factory(explode_at=10)
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        factory, N, mode=modes(mode, N), seed=SEED, restart="on_failure", on_failure=failures.append
    ) as pool:
        await pool.set_policy(choose_walk)
        first = await pool.rollout(8)  # steps 1..8 of each env
        second = await pool.rollout(8)  # step 10 explodes: the rebuilt env plays all 8
        assert pool.restarts == N, [f"{type(error).__name__}: {error}" for error in failures]
        counted = sum(stats.episodes for stats in pool.episode_stats())
        third = await pool.rollout(2)
    assert len(first) == len(second) == N * 8 and len(third) == N * 2
    # The episodes the failures cut short count as ended, besides those the rows end.
    cut = sum(bool(first.open[first.worker_id == worker_id][-1]) for worker_id in range(N))
    ended = sum(int(np.count_nonzero(p.terminated | p.truncated)) for p in (first, second))
    assert cut and counted == ended + cut
    for worker_id in range(N):
        assert_rows(rows_of(first, worker_id), REPLAYS[worker_id][:8], f"worker {worker_id}")
        rows = rows_of(second, worker_id)
        assert rows[0][0] == 0, "the rebuilt env starts a new episode"
    assert_episode_ids([first, second, third])
    assert not (first.episode_id[:, None] == second.episode_id[None, :]).any()


def raising_policy(observation: Any) -> int:
    raise KeyError("no action for this observation")


@pytest.mark.parametrize(
    ("kind", "per_worker"),
    [("sync", 1), ("thread", 1), ("process", 1), ("async", 1), ("process", 2)],
)
async def test_a_policy_that_raises_is_the_callers_error_and_restarts_nothing(
    kind: str, per_worker: int
) -> None:
    """A policy that raises fails the rollout at once with its error, naming the worker and
    the policy, and the envs are kept: it was taken for the env's failure, so under
    restart="on_failure" every env was rebuilt until its restart budget was spent."""
    failures: list[aioenv.WorkerError] = []
    batched = {"envs_per_worker": per_worker} if per_worker > 1 else {}
    async with walk_pool(kind, restart="on_failure", on_failure=failures.append, **batched) as pool:
        await pool.set_policy(raising_policy)
        with pytest.raises(aioenv.EnvError, match=r"worker \d ") as raised:
            await pool.rollout(3)
        assert pool.restarts == 0 and not failures
        assert "the policy raised KeyError during rollout" in str(raised.value)
        await pool.set_policy(choose_walk)
        assert len(await pool.rollout(3)) == N * per_worker * 3


@pytest.mark.parametrize("kind", ["sync", "process"])
async def test_a_rollout_of_envs_that_are_not_gymnasiums_is_refused_and_restarts_nothing(
    kind: str,
) -> None:
    """rollout() on custom Environments raises at once that it needs gymnasium envs, where
    under restart="on_failure" that refusal was taken for each env's failure and every env
    was rebuilt until its restart budget was spent."""
    async with aioenv.make_pool(envs.Counter, 2, mode=kind, restart="on_failure") as pool:
        await pool.set_policy(choose_walk)
        with pytest.raises(aioenv.EnvError, match=r"worker \d ") as raised:
            await pool.rollout(2)
        assert pool.restarts == 0
        assert "the request raised TypeError during rollout" in str(raised.value)
        assert "needs gymnasium envs" in str(raised.value)


def envs_factory(**options: Any) -> Any:
    return lambda: Walk(**options)


async def test_a_sync_worker_restarted_in_a_rollout_answers_it() -> None:
    """A sync worker plays the segment it is asked again after its restart in line (or
    fails it, once its restarts are spent), so the rollout returns or raises: it waited for
    ever, since the answer came before it waited for one."""
    async with aioenv.make_pool(
        envs_factory(explode_at=2), 2, mode="sync", seed=SEED, restart="on_failure", max_restarts=2
    ) as pool:
        await pool.set_policy(choose_walk)
        with anyio.fail_after(20):  # was: a hang
            assert len(await pool.rollout(1)) == 2
            assert len(await pool.rollout(1)) == 2  # each env's second step explodes
            assert pool.restarts == 2
            with pytest.raises(aioenv.EnvError, match=r"sync worker 0 .*Walk exploded"):
                await pool.rollout(2)  # explodes in each new env: the budget is spent


@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_worker_that_fails_for_good_raises_and_the_others_segments_are_kept(
    kind: str,
) -> None:
    sources = [envs_factory(), envs_factory(explode_at=2), envs_factory(), envs_factory()]
    async with aioenv.make_pool(sources, mode=kind, seed=SEED) as pool:
        await pool.set_policy(choose_walk)
        with pytest.raises(aioenv.EnvError, match=r"worker 1 .*Walk exploded") as caught:
            await pool.rollout(3)
        kept = caught.value.trajectories  # type: ignore[attr-defined]
        assert sorted(set(kept.worker_id.tolist())) == [0, 2, 3]
        assert len(kept) == 3 * 3
        for worker_id in (0, 2, 3):
            assert_rows(rows_of(kept, worker_id), REPLAYS[worker_id][:3], f"worker {worker_id}")
        again = await pool.rollout(2, worker_ids=[0, 2, 3])
        assert len(again) == 3 * 2


async def test_a_rollout_every_worker_of_which_fails_keeps_no_rows_of_their_own_dtypes() -> None:
    # No worker answered a segment: the error's trajectories have no rows, each column of
    # its documented dtype, where every column was float64 and repr() raised TypeError.
    async with aioenv.make_pool([envs_factory(explode_at=2)] * 2, mode="thread") as pool:
        await pool.set_policy(choose_walk)
        with pytest.raises(aioenv.EnvError, match=r"worker 0 .*Walk exploded") as caught:
            await pool.rollout(3)
    kept = caught.value.trajectories  # type: ignore[attr-defined]
    assert len(kept) == 0 and kept.num_episodes == 0 and "0 transitions" in repr(kept)
    for name in ("worker_id", "episode_id", "step", "policy_version"):
        assert getattr(kept, name).dtype == np.int64, name
    for name in ("terminated", "truncated", "open"):
        assert getattr(kept, name).dtype == np.bool_, name
    assert kept.rewards.dtype == np.float64


@pytest.mark.parametrize("kind", ["thread", "process", "mixed"])
async def test_a_rollout_on_some_workers_keeps_its_segments_from_a_loop_stepping_the_others(
    kind: str, gate: str
) -> None:
    """A task steps workers 0 and 1 by hand (``async for``) while another plays a rollout
    on worker 2: the loop gets only its own workers' states and ends, and the rollout its
    segment. The loop took the segment as a state, and the rollout then waited for ever."""
    mode = ["process", "thread"] if kind == "mixed" else kind
    async with aioenv.make_pool(envs_factory(gate=gate), 3, mode=modes(mode, 3)) as pool:
        await pool.set_policy(choose_walk)
        await pool.reset_all()
        taken: list[Any] = []
        played: list[aioenv.Trajectories] = []

        async def by_hand() -> None:
            pool.send_action(0, 0)
            pool.send_action(0, 1)
            async for state, worker_id in pool:
                taken.append((type(state), worker_id))
                if len(taken) < 4:
                    pool.send_action(0, worker_id)

        async def rollout() -> None:
            played.append(await pool.rollout(5, worker_ids=[2]))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                group.start_soon(by_hand)
                group.start_soon(rollout)
                await anyio.wait_all_tasks_blocked()  # every env waits at its step's gate
                envs.open_gate(gate)
        assert len(taken) == 5  # the two first states and three more
        assert all(cls is aioenv.Step and worker_id in (0, 1) for cls, worker_id in taken)
        assert len(played[0]) == 5 and set(played[0].worker_id.tolist()) == {2}
        assert pool.paused == () and pool.num_pending == 0


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process", "mixed"])
async def test_a_cancelled_rollout_leaves_the_pool_usable_and_drops_the_late_segments(
    kind: str, gate: str
) -> None:
    mode = ["process", "thread"] if kind == "mixed" else kind
    factory = envs_factory(gate=gate)
    async with aioenv.make_pool(factory, N, mode=modes(mode, N), seed=SEED) as pool:
        await pool.set_policy(choose_walk)
        with anyio.move_on_after(0.3) as scope:
            await pool.rollout(5)  # every env waits at its first step for the gate
        assert scope.cancelled_caught
        assert pool.num_pending == 0
        envs.open_gate(gate)
        part = await pool.rollout(3)  # the envs finish the forgotten segment first
        assert await pool.drain() == []
        await pool.reset_all()  # the pool works by hand again too
    assert len(part) == N * 3
    for worker_id in range(N):
        got = rows_of(part, worker_id)
        assert_rows(got, REPLAYS[worker_id][5:8], f"worker {worker_id}")


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process", "mixed"])
@pytest.mark.parametrize("answered", [False, True])
async def test_a_segment_after_a_cancelled_rollout_gives_its_episode_a_new_id(
    kind: str, answered: bool, gate: str
) -> None:
    # The cancelled rollout's segments are dropped, but the envs played them: worker 0's
    # next rows are of an episode begun in them (REPLAYS[0][6] is at step 2), not of the
    # one the first rollout left open. ``answered``: worker 0's segment came in (and was
    # dropped with the rest) before the cancel, else it was still in flight.
    mode = ["process", "thread"] if kind == "mixed" else kind
    gated = envs_factory(gate=gate)
    sources = [envs_factory() if answered else gated] + [gated] * (N - 1)
    async with aioenv.make_pool(sources, mode=modes(mode, N), seed=SEED) as pool:
        await pool.set_policy(choose_walk)
        envs.open_gate(gate)
        first = await pool.rollout(1)
        os.remove(gate)
        with anyio.move_on_after(0.3) as scope:
            await pool.rollout(5)  # the gated envs wait at their first step
        assert scope.cancelled_caught
        envs.open_gate(gate)
        part = await pool.rollout(3)  # the envs finish the forgotten segment first
    assert_rows(rows_of(part, 0), REPLAYS[0][6:9], "worker 0")
    assert REPLAYS[0][6][0] == 2 and first.open.all()
    assert not set(first.episode_id.tolist()) & set(part.episode_id.tolist())


@pytest.mark.loops
@pytest.mark.parametrize("kind", ["thread", "process"])
async def test_a_rollout_cancelled_while_its_worker_awaits_a_restart_restarts_it_later(
    kind: str,
) -> None:
    failed = anyio.Event()
    async with aioenv.make_pool(
        envs_factory(explode_at=3),
        1,
        mode=kind,
        seed=SEED,
        restart="on_failure",
        restart_backoff=5.0,  # the restart waits: the rollout is cancelled meanwhile
        on_failure=lambda error: failed.set(),
    ) as pool:
        await pool.set_policy(choose_walk)
        await pool.rollout(2)
        async with anyio.create_task_group() as group:
            group.start_soon(pool.rollout, 5)  # its first step explodes
            await failed.wait()
            group.cancel_scope.cancel()
        with anyio.fail_after(20):
            part = await pool.rollout(2)  # the env is rebuilt now, and plays
        assert len(part) == 2 and part.step[0] == 0
        assert pool.restarts == 1


@pytest.mark.loops
async def test_a_segment_past_its_deadline_times_out(gate: str) -> None:
    """The deadline is the whole segment's (here 3 x 2 s), not each transition's."""
    factory = envs_factory(gate=gate)
    async with aioenv.make_pool(factory, 2, mode="process", seed=SEED, step_timeout=2.0) as pool:
        await pool.set_policy(choose_walk)
        envs.open_gate(gate)
        await pool.rollout(2)  # past start-up, whose deadline is another
        os.remove(gate)
        with pytest.raises(aioenv.WorkerTimeout, match=r"process worker 0 .*past its deadline"):
            await pool.rollout(3, worker_ids=[0])
        timeout = pool.removed[0]  # killed for good (no restarts): given up on
        envs.open_gate(gate)
        part = await pool.rollout(3, worker_ids=[1])
        assert len(part) == 3
        with pytest.raises(aioenv.WorkerRemoved, match="process worker 0") as removed:
            await pool.rollout(3, worker_ids=[0])
        assert removed.value.__cause__ is timeout
        rest = await pool.rollout(3)  # the pool goes on with the rest
        assert rest.worker_id.tolist() == [1, 1, 1]


# The forced-sync twin --------------------------------------------------------------------
async def test_force_sync_gives_the_same_data_as_the_async_pool() -> None:
    results = []
    for options in ({"mode": "process"}, {"force_sync": True}):
        async with aioenv.make_pool(Walk, N, seed=SEED, **options) as pool:  # type: ignore[arg-type]
            await pool.set_policy(choose_walk)
            results.append([await pool.rollout(6), await pool.rollout(4, seed=3)])
    for left, right in zip(*results, strict=True):
        for name in (
            "observations", "actions", "rewards", "terminated", "truncated",
            "next_observations", "worker_id", "episode_id", "step", "policy_version", "open",
        ):  # fmt: skip
            np.testing.assert_array_equal(getattr(left, name), getattr(right, name), name)


# Bad input -------------------------------------------------------------------------------
async def test_bad_input_is_a_clear_error_naming_the_worker() -> None:
    lock = threading.Lock()

    def holds_a_lock(observation: Any) -> int:
        with lock:
            return 0

    async with walk_pool(["thread", "process"]) as pool:
        with pytest.raises(RuntimeError, match="set_policy"):
            await pool.rollout(3)
        await pool.set_policy(choose_walk)
        for bad in (0, -1, 2.5, True, None):
            with pytest.raises(ValueError, match="num_steps must be an int >= 1"):
                await pool.rollout(bad)  # type: ignore[arg-type]
        for bad_seed in (-1, 1.5, "3", True):
            with pytest.raises(ValueError, match="rollout.. seed must be a non-negative int"):
                await pool.rollout(2, seed=bad_seed)  # type: ignore[arg-type]
        assert (await pool.rollout(2, seed=np.int64(3))).step[0] == 0  # numpy's ints too
        assert (await pool.rollout(np.int64(2), seed=3)).step[0] == 0  # as num_steps too
        with pytest.raises(TypeError, match="callable"):
            await pool.set_policy(42)
        with pytest.raises(TypeError, match=r"process worker 1 .*could not be pickled"):
            await pool.set_policy(holds_a_lock)
        with pytest.raises(aioenv.EnvError, match=r"process worker 1 .*refuses to be unpickled"):
            await pool.set_policy(UnpicklableHere())
        assert pool.policy_version == 0  # neither bad policy was set
        part = await pool.rollout(2)
        assert (part.policy_version == 0).all()
        pool.send_action(0, 1)
        with pytest.raises(aioenv.StateNotTaken, match="worker 1"):
            await pool.rollout(2)
        await pool.drain()


async def test_thread_workers_take_a_policy_that_cannot_be_pickled() -> None:
    lock = threading.Lock()

    def holds_a_lock(observation: Any) -> int:
        with lock:
            return choose_walk(observation)

    async with walk_pool("thread") as pool:
        await pool.set_policy(holds_a_lock)
        part = await pool.rollout(3)
    assert_rows(rows_of(part, 0), REPLAYS[0][:3], "worker 0")


# Per-worker env updates ------------------------------------------------------------------
async def test_call_gives_each_worker_its_own_value_with_per_worker(mode: Any) -> None:
    async with walk_pool(mode) as pool:
        tasks = [f"task{w}" for w in range(N)]
        previous = await pool.call(
            "set_task", aioenv.PerWorker(tasks), level=aioenv.PerWorker(range(N))
        )
        assert previous == ["default"] * N
        assert await pool.get_attr("task") == [f"task{w}:{w}" for w in range(N)]
        # Between segments: one worker's task alone.
        await pool.set_policy(choose_walk)
        await pool.rollout(2)
        await pool.call("set_task", "hard", worker_ids=[2])
        await pool.call("set_task", aioenv.PerWorker(["x", "y"]), worker_ids=[3, 0])
        await pool.rollout(2)
        assert await pool.get_attr("task") == ["y:0", "task1:1", "hard:0", "x:0"]
        with pytest.raises(ValueError, match="3 values for 4 workers"):
            await pool.call("set_task", aioenv.PerWorker(["a", "b", "c"]))
        assert await pool.get_attr("task") == ["y:0", "task1:1", "hard:0", "x:0"]


# Ray -------------------------------------------------------------------------------------
@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_ray_actors_serve_the_same_rollouts_with_the_policy_put_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    puts: list[Any] = []
    real_put = ray.put
    monkeypatch.setattr(ray, "put", lambda value: puts.append(value) or real_put(value))
    policy = RecordingPolicy(str(tmp_path))
    workers: list[aioenv.Worker[Any]] = [
        *aioenv.RayWorker.hosted(Walk, aioenv.worker_seeds(SEED, N)[:2], 2, num_cpus=0),
        *[aioenv.ThreadWorker(Walk, seed=s) for s in aioenv.worker_seeds(SEED, N)[2:]],
    ]
    async with aioenv.get_worker_pool(workers) as pool:
        assert await pool.set_policy(policy, version=3) == 3
        first = await pool.rollout(5)
        second = await pool.rollout(4)
        assert len(puts) == 1 and isinstance(puts[0], bytes)  # the pickled policy, once
        await pool.set_policy(policy)
        third = await pool.rollout(2)
        assert len(puts) == 2
    assert (first.policy_version == 3).all() and (third.policy_version == 4).all()
    for worker_id in range(N):
        got = [row for part in (first, second, third) for row in rows_of(part, worker_id)]
        assert_rows(got, REPLAYS[worker_id][:11], f"worker {worker_id}")
    unpickled = marks(tmp_path, "unpickled")
    assert len(unpickled) == 1 and list(unpickled.values()) == [2]  # one actor, 2 versions
    called = marks(tmp_path, "called")
    assert called[str(os.getpid())] == 1  # the thread workers share the object


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_a_policy_that_raises_in_a_ray_actor_restarts_nothing() -> None:
    """As for the other kinds (above): the rollout raises the policy's error at once."""

    def raising(observation: Any) -> int:  # local: pickled by value, for the actors
        raise KeyError("no action for this observation")

    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        Walk, 2, mode="ray", num_cpus=0, restart="on_failure", on_failure=failures.append
    ) as pool:
        await pool.set_policy(raising)
        with pytest.raises(aioenv.EnvError, match=r"ray worker \d .*the policy raised KeyE"):
            await pool.rollout(3)
        assert pool.restarts == 0 and not failures
        await pool.set_policy(choose_walk)
        assert len(await pool.rollout(3)) == 2 * 3


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
async def test_a_policy_ray_cannot_put_is_an_error_naming_the_worker() -> None:
    """Ray puts the policy's bytes off the event loop, as its actor call is made: a policy
    that will not pickle fails that call, and set_policy raises an error naming the worker
    (an EnvError, the failure of the request sent); the policy is not set."""
    lock = threading.Lock()

    def holds_a_lock(observation: Any) -> int:
        with lock:
            return 0

    async with aioenv.make_pool(Walk, 2, mode="ray", num_cpus=0) as pool:
        with pytest.raises(aioenv.EnvError, match=r"ray worker 0 .*could not be pickled"):
            await pool.set_policy(holds_a_lock)
        assert pool.policy_version is None
        await pool.set_policy(choose_walk)
        assert len(await pool.rollout(2)) == 2 * 2


@pytest.mark.loops
async def test_a_segment_may_take_step_timeout_per_transition() -> None:
    """With ``step_timeout=0.5`` a segment of 2 envs x 40 steps of 20 ms each takes at
    least 1.6 s, far past one step's deadline, and well within its own (40 s)."""
    async with aioenv.make_pool(
        lambda: envs.Walk(step_seconds=0.02),
        2,
        mode="thread",
        seed=SEED,
        step_timeout=0.5,
        envs_per_worker=2,
    ) as pool:
        await pool.set_policy(choose_walk)
        await pool.rollout(1)  # past start-up, whose deadline is another
        started = time.monotonic()
        part = await pool.rollout(40)
        assert time.monotonic() - started >= 1.6  # the segment did outlast one deadline
        assert len(part) == 2 * 2 * 40
