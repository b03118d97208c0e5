"""Rollout budgets (``episode_timeout``): an episode gets so many seconds from its reset's
answer to its end, its env's time and the wait for the policy alike. Past them it ends as
an episode cut short ends (truncated, reward 0, the last observation as final, the reason
``"episode_timeout"`` under ``info["aioenv"]``): a step in flight is abandoned and its env
restarted; else the next action is not sent. A budget's end is no failure.

The envs here never end an episode by themselves, and their slow steps wait for events
that are never set (or far longer than the budget), so which episode runs out is certain."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pytest
from envs import Breakable
from support import worker_threads

import aioenv
from aioenv.core._environment import Step
from aioenv.engine._start import ChildStart

AUTORESETS = ["disabled", "next_step", "same_step"]
BUDGET = 0.5
#: A budget is wall time, so a test of a budget's end lets that time pass. The budget runs
#: from the answer that opened the episode, handed out before the wait begins, so the
#: budget itself is the wait the rule needs; the 10 ms cover the loop clock's granularity
#: (uvloop's counts whole milliseconds, and its timers may fire up to one early).
SLACK = 0.01
REASON = {"restarted": True, "reason": "episode_timeout"}
GO, HANG, SLOW = 0, 3, 4


class Waiting(gymnasium.Env[np.ndarray, int]):
    """A coroutine env: observation ``[t, generation]`` (steps in the episode; envs built
    before this one in this process). Action 0 steps at once (reward 1); 3 waits for an
    event nobody sets (its task is cancelled when the env is dropped); 4 awaits
    ``slow`` seconds, then steps. Episodes never end by themselves."""

    built: ClassVar[int] = 0

    def __init__(self, slow: float = 0.1) -> None:
        self.observation_space = gymnasium.spaces.Box(0, 10**6, (2,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(5)
        self.generation = Waiting.built
        Waiting.built += 1
        self.slow = slow
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.generation], np.float64)

    async def reset(  # type: ignore[override]
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {"reset": True}

    async def step(self, action: int) -> Any:  # type: ignore[override]
        if int(action) == HANG:
            await asyncio.Event().wait()
        if int(action) == SLOW:
            await asyncio.sleep(self.slow)
        self.t += 1
        return self._obs(), 1.0, False, False, {"t": self.t}


class SlowSync(Breakable):
    """:class:`~envs.Breakable` whose action 4 sleeps ``slow`` seconds, then steps."""

    def __init__(self, slow: float = 0.5) -> None:
        super().__init__()
        self.action_space = gymnasium.spaces.Discrete(5)
        self.slow = slow

    def step(self, action: int) -> Any:
        if int(action) == SLOW:
            time.sleep(self.slow)
            action = GO
        return super().step(action)


def env_for(kind: str) -> Any:
    """An env whose action 3 hangs past any budget here (for thread and process workers
    a sleep short enough that an abandoned thread ends within the test's leak check)."""
    if kind == "coroutine":
        return Waiting
    return lambda: Breakable(hang=3.0)


def assert_cut_short(state: Step[Any], last: np.ndarray, autoreset: str) -> None:
    """``state`` ends, out of its budget, the episode whose last observation was ``last``."""
    assert (state.reward, state.terminated, state.truncated) == (0.0, False, True)
    if autoreset == "same_step":  # the next episode's reset is carried, as an autoreset's
        np.testing.assert_array_equal(state.final_observation, last)
        assert state.final_info == {"aioenv": REASON}
        assert state.observation[0] == 0 and state.info["reset"] is True
        assert state.info["aioenv"] == REASON
    else:
        np.testing.assert_array_equal(state.observation, last)
        assert state.info == {"aioenv": REASON}


def env_of(pool: aioenv.WorkerPool[Any], state: Step[Any]) -> float:
    """Which env answered ``state``: its worker's process for a process worker (a new
    env is a new process), else its generation (envs built before it in this process)."""
    pid = getattr(pool.workers[0], "pid", None)
    return float(pid) if pid is not None else float(state.observation[1])


async def step(pool: aioenv.WorkerPool[Any], action: int) -> Step[Any]:
    pool.send_action(action, 0)
    state, _ = await pool.get_state()  # type: ignore[misc]
    return state  # type: ignore[no-any-return]


async def next_episode(pool: aioenv.WorkerPool[Any], autoreset: str) -> Step[Any]:
    """The next episode's reset after one that ended truncated (not under same-step
    autoreset, whose truncated step carries it): by hand, or the next step's answer."""
    return await step(pool, aioenv.RESET if autoreset == "disabled" else GO)  # type: ignore[arg-type]


@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize("kind", ["thread", "process", "coroutine"])
async def test_a_step_in_flight_past_the_budget_is_abandoned_and_its_env_restarted(
    kind: str, autoreset: str
) -> None:
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        env_for(kind),
        1,
        mode=kind,
        autoreset=autoreset,
        episode_timeout=BUDGET,
        on_failure=failures.append,
    ) as pool:
        first = await step(pool, aioenv.RESET)  # type: ignore[arg-type]
        old_env = env_of(pool, first)
        cut = await step(pool, HANG)
        assert_cut_short(cut, first.observation, autoreset)
        # The new env's reset: carried by the cut-short step, or answering the next request.
        new = cut if autoreset == "same_step" else await next_episode(pool, autoreset)
        assert new.observation[0] == 0 and new.info["reset"] is True
        assert new.info["aioenv"] == REASON  # the restarted env's reset says why it came
        assert env_of(pool, new) != old_env  # a new env: the old one was busy
        assert (pool.restarts, failures, pool.removed) == (0, [], {})
        stats = pool.episode_stats()[0]
        assert (stats.episodes, stats.last_length, stats.last_return) == (1, 1, 0.0)


@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize("kind", ["sync", "thread", "process", "coroutine"])
async def test_the_wait_for_the_policy_counts_and_the_next_action_is_not_sent(
    kind: str, autoreset: str
) -> None:
    async with aioenv.make_pool(
        Waiting if kind == "coroutine" else Breakable,
        1,
        mode=kind,
        autoreset=autoreset,
        episode_timeout=BUDGET,
    ) as pool:
        first = await step(pool, aioenv.RESET)  # type: ignore[arg-type]
        await asyncio.sleep(BUDGET + SLACK)  # the policy thinks past the budget
        # Action 1 would make the env raise: it is not sent.
        cut = await step(pool, 1 if kind != "coroutine" else GO)
        assert_cut_short(cut, first.observation, autoreset)
        new = cut if autoreset == "same_step" else await next_episode(pool, autoreset)
        assert new.observation[0] == 0 and new.info["reset"] is True  # the next episode's
        assert env_of(pool, new) == env_of(pool, first)  # the same env, never restarted
        assert (pool.restarts, pool.failures) == (0, 0)


@pytest.mark.parametrize("kind", ["thread", "process", "coroutine"])
async def test_budget_ends_are_no_failures_and_spend_no_restart(kind: str) -> None:
    """Restarts off and none allowed: a worker whose episodes all run out of their budget
    goes on, episode after episode."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        env_for(kind),
        1,
        mode=kind,
        restart="never",
        max_restarts=0,
        episode_timeout=BUDGET,
        on_failure=failures.append,
    ) as pool:
        envs = []
        for _ in range(4):
            first = await step(pool, aioenv.RESET)  # type: ignore[arg-type]
            envs.append(env_of(pool, first))
            cut = await step(pool, HANG)
            assert cut.truncated and cut.info["aioenv"] == REASON
        assert len(set(envs)) == 4  # a new env each time
        assert (pool.restarts, pool.failures, failures, pool.removed) == (0, 0, [], {})
        assert pool.active_ids == [0]


async def test_an_inline_sync_worker_checks_its_budget_between_steps() -> None:
    """A sync worker's step cannot be interrupted: one that runs past the budget ends,
    and the next action is not sent."""
    async with aioenv.make_pool(
        lambda: SlowSync(slow=2 * BUDGET), 1, mode="sync", episode_timeout=BUDGET
    ) as pool:
        await pool.reset_all()
        slow = await step(pool, SLOW)
        assert not slow.done and slow.observation[0] == 1  # it ran to its end
        cut = await step(pool, GO)
        assert_cut_short(cut, slow.observation, "disabled")
        first = await step(pool, aioenv.RESET)  # type: ignore[arg-type]
        assert first.observation[0] == 0 and first.observation[1] == slow.observation[1]


async def test_each_episode_gets_its_own_budget() -> None:
    """The budget runs from each episode's reset: steps that take half of it, then a
    reset, then more of them never run out."""
    budget = 2.0
    async with aioenv.make_pool(Waiting, 1, mode="coroutine", episode_timeout=budget) as pool:
        for _ in range(3):
            await step(pool, aioenv.RESET)  # type: ignore[arg-type]
            state = await step(pool, GO)
            assert not state.done
        await asyncio.sleep(budget + SLACK)  # the last episode's budget passes
        assert (await step(pool, GO)).truncated


@pytest.mark.parametrize("kind", ["thread", "process", "coroutine"])
async def test_a_new_episode_is_never_cut_short_by_the_budget_of_the_one_before(
    kind: str,
) -> None:
    """A step answered within its episode's budget is done with that budget: the next
    episode, reset before the first one's budget would have run out, keeps its own whole
    (a step in flight when the first one's would have ended runs on)."""
    budget = 4.0
    slow = 3.0  # from budget / 2 to budget + 1: past the first episode's end, not the next's
    env = (lambda: Waiting(slow=slow)) if kind == "coroutine" else (lambda: SlowSync(slow=slow))
    async with aioenv.make_pool(env, 1, mode=kind, episode_timeout=budget) as pool:
        await step(pool, aioenv.RESET)  # type: ignore[arg-type]
        assert not (await step(pool, GO)).done  # answered at once, well within the budget
        await asyncio.sleep(budget / 2)
        await step(pool, aioenv.RESET)  # type: ignore[arg-type]  # a new episode, a new budget
        state = await step(pool, SLOW)
        assert not state.done and state.info == {"t": 1}  # was: cut short by the first budget
        assert (pool.restarts, pool.failures) == (0, 0)


@pytest.mark.parametrize("autoreset", AUTORESETS)
@pytest.mark.parametrize("mode", ["coroutine", "process"])
def test_the_vector_env_ends_an_episode_past_its_budget_truncated(
    mode: str, autoreset: str
) -> None:
    # Process envs step through the engine, which times their budgets itself.
    failures: list[aioenv.WorkerError] = []
    envs = aioenv.AioVectorEnv(
        Waiting if mode == "coroutine" else env_for(mode),
        2,
        mode=mode,
        autoreset_mode=autoreset,
        episode_timeout=BUDGET,
        on_failure=failures.append,
    )
    try:
        last, _ = envs.reset(seed=0)
        last = last.copy()
        # Env 0 hangs: its step is abandoned when the budget runs out; env 1 steps.
        observations, rewards, terminated, truncated, infos = envs.step(np.array([HANG, GO]))
        assert list(truncated) == [True, False] and not terminated.any()
        assert list(rewards) == [0.0, 1.0]  # (env 1's step fits in its budget)
        marker_infos = infos
        if autoreset == "same_step":
            np.testing.assert_array_equal(infos["final_obs"][0], last[0])
            marker_infos = infos["final_info"]
            assert observations[0, 0] == 0  # the new env's reset
        else:
            np.testing.assert_array_equal(observations[0], last[0])
        assert marker_infos["aioenv"]["reason"][0] == "episode_timeout"
        # Env 1's budget, which began with env 0's, runs out too; so does, under same-step
        # autoreset, that of env 0's new episode, which began with the step just taken:
        # both began before this wait, and time.sleep never returns early.
        time.sleep(BUDGET + SLACK)
        if autoreset == "disabled":
            envs.reset(options={"reset_mask": np.array([True, False])})
        observations, rewards, terminated, truncated, infos = envs.step(np.array([GO, GO]))
        assert list(truncated) == [autoreset == "same_step", True]  # env 1's step is not sent
        np.testing.assert_array_equal(observations[1, 0], 0 if autoreset == "same_step" else 1)
        marker_infos = infos["final_info"] if autoreset == "same_step" else infos
        assert marker_infos["aioenv"]["reason"][1] == "episode_timeout"
        assert failures == []  # a budget's end is no failure
        if mode == "coroutine":
            assert envs.pool.restarts == 0
    finally:
        envs.close()


@pytest.mark.parametrize("kind", ["thread", "coroutine"])
async def test_collect_counts_an_episode_past_its_budget_truncated(kind: str) -> None:
    env = Waiting if kind == "coroutine" else lambda: SlowSync(slow=0.1)
    async with aioenv.make_pool(env, 2, mode=kind, episode_timeout=BUDGET) as pool:
        parts = await aioenv.collect(pool, lambda batch: [SLOW] * len(batch), num_episodes=4)
    ends = parts.truncated | parts.terminated
    assert ends.sum() == 4 and not parts.terminated.any()
    assert set(parts.episode_id[parts.truncated]) == set(parts.episode_id)
    for episode in set(parts.episode_id):
        rows = parts.episode_id == episode
        assert parts.truncated[rows][-1] and not parts.truncated[rows][:-1].any()
        assert parts.rewards[rows][-1] == 0.0  # the step abandoned or not sent


@pytest.mark.parametrize("kind", ["sync", "thread", "process", "coroutine"])
async def test_rollout_segments_end_an_episode_past_its_budget_between_steps(kind: str) -> None:
    env = Waiting if kind == "coroutine" else lambda: SlowSync(slow=0.1)
    async with aioenv.make_pool(env, 1, mode=kind, episode_timeout=BUDGET) as pool:
        await pool.set_policy(_slow_policy)
        parts = await pool.rollout(12, seed=0)
    assert parts.truncated.any() and not parts.terminated.any()
    # Each episode ends at the first step that finds its budget spent (0.1 s each).
    ended = np.flatnonzero(parts.truncated)
    for row in ended[ended + 1 < len(parts)]:
        assert parts.step[row + 1] == 0
    assert len(set(parts.episode_id)) >= 2


def _slow_policy(observation: Any) -> int:
    return SLOW


async def test_a_budget_needs_one_env_per_worker() -> None:
    with pytest.raises(ValueError, match="episode_timeout.*envs_per_worker"):
        aioenv.make_pool(Breakable, 2, mode="sync", envs_per_worker=2, episode_timeout=1.0)


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_budget_with_several_envs_per_worker_is_refused_before_any_worker_starts(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[Any] = []
    monkeypatch.setattr(ChildStart, "start", lambda self, *args: started.append(self))
    with pytest.raises(ValueError, match=f"^{mode} worker .*: episode_timeout.*envs_per_worker"):
        aioenv.make_pool(Breakable, 2, mode=mode, envs_per_worker=2, episode_timeout=1.0)
    assert not started  # no child process was started first, to be killed again
    assert not worker_threads()


@pytest.mark.parametrize("value", [0, -1.0, "1", True])
def test_a_bad_budget_is_refused(value: Any) -> None:
    with pytest.raises(ValueError, match="episode_timeout"):
        aioenv.make_pool(Breakable, 1, mode="sync", episode_timeout=value)


def test_a_vector_env_with_a_budget_gives_each_env_a_worker_of_its_own() -> None:
    """Process workers would group envs by the cores; a budget times one env's episodes."""
    envs = aioenv.AioVectorEnv(Breakable, 4, mode="process", episode_timeout=BUDGET)
    try:
        assert envs.group_sizes == (1, 1, 1, 1)
        envs.reset(seed=0)
        time.sleep(BUDGET + SLACK)  # each env's budget runs from its reset's answer
        _, _, terminated, truncated, infos = envs.step(np.zeros(4, np.int64))
        assert truncated.all() and not terminated.any()
        assert list(infos["aioenv"]["reason"]) == ["episode_timeout"] * 4
    finally:
        envs.close()


def _pids(envs: aioenv.AioVectorEnv) -> list[int]:
    return list(envs.apply(lambda env: os.getpid()))


@pytest.mark.parametrize("autoreset", AUTORESETS)
def test_through_the_engine_a_budget_spent_idle_keeps_the_env_one_spent_in_flight_does_not(
    autoreset: str,
) -> None:
    """The engine's two ways, told apart by the children's pids: an episode whose budget
    ran out between steps ends without its env (the same process) being touched; one
    whose step was in flight loses its child to a new one. Neither is a failure, so a
    restart budget of one restart is never spent, however many budgets end."""
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        env_for("process"),
        2,
        mode="process",
        autoreset_mode=autoreset,
        episode_timeout=BUDGET,
        restart="on_failure",
        max_restarts=1,
        on_failure=failures.append,
    ) as envs:
        with pytest.raises(AttributeError, match="through the engine"):
            _ = envs.pool
        first = _pids(envs)
        for _ in range(2):  # two budgets end in flight: no restart budget is spent
            envs.reset(seed=0)  # each episode's budget runs from here
            _, _, _, truncated, infos = envs.step(np.array([HANG, GO]))
            assert list(truncated) == [True, False]  # env 1 answered within its budget
        replaced = _pids(envs)
        assert replaced[0] not in first and replaced[1] == first[1]
        envs.reset(seed=0)
        time.sleep(BUDGET + SLACK)  # both episodes' budgets run out between steps
        _, rewards, _, truncated, infos = envs.step(np.array([GO, GO]))
        assert truncated.all() and not rewards.any()
        marked = infos["final_info"] if autoreset == "same_step" else infos
        assert list(marked["aioenv"]["reason"]) == ["episode_timeout"] * 2
        assert _pids(envs) == replaced  # the envs went on
        observations, rewards, _, truncated, infos = envs.step(np.array([GO, GO]))
        if autoreset == "same_step":
            assert not truncated.any() and list(rewards) == [1.0, 1.0]
        else:  # the step after answers with the envs' resets, marked
            assert not truncated.any() and not rewards.any() and not observations[:, 0].any()
            assert list(infos["aioenv"]["reason"]) == ["episode_timeout"] * 2
    assert failures == []


def test_through_the_engine_a_budget_ends_a_pipelined_step_it_waits_for() -> None:
    with aioenv.AioVectorEnv(
        env_for("process"), 2, mode="process", episode_timeout=BUDGET, step_timeout=30.0
    ) as envs:
        last, _ = envs.reset(seed=0)
        envs.step_async(np.array([GO, HANG]))
        observations, rewards, _, truncated, infos = envs.step_wait()
        assert list(truncated) == [False, True] and list(rewards) == [1.0, 0.0]
        np.testing.assert_array_equal(observations[1], last[1])
        assert infos["aioenv"]["reason"][1] == "episode_timeout"  # the budget, not the deadline
        envs.step(np.array([GO, GO]))  # env 1's new episode, from a new child
        assert envs.step(np.array([GO, GO]))[0][1, 0] == 1


class HangsOnSecondReset(Breakable):
    """:class:`~envs.Breakable` whose second reset hangs (past any deadline here)."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.resets = getattr(self, "resets", 0) + 1
        if self.resets == 2:
            time.sleep(60)
        return super().reset(seed=seed, options=options)


def test_through_the_engine_the_reset_after_a_budget_is_held_to_the_reset_deadline() -> None:
    # Under same-step autoreset the step handed past the budget is answered by a reset.
    with aioenv.AioVectorEnv(
        HangsOnSecondReset,
        1,
        mode="process",
        autoreset_mode="same_step",
        episode_timeout=BUDGET,
        reset_timeout=2.0,
    ) as envs:
        envs.reset(seed=0)
        time.sleep(BUDGET + SLACK)
        with pytest.raises(aioenv.WorkerTimeout, match=r"request \d+ \(reset\) ran"):
            envs.step(np.array([GO]))


def test_through_the_engine_a_budget_needs_one_env_per_child() -> None:
    with pytest.raises(ValueError, match="episode_timeout.*envs_per_worker"):
        aioenv.AioVectorEnv(
            env_for("process"), 4, mode="process", envs_per_worker=2, episode_timeout=BUDGET
        )


@pytest.mark.ray
@pytest.mark.usefixtures("ray_local")
@pytest.mark.parametrize("autoreset", ["next_step", "same_step"])
async def test_a_ray_actors_step_past_the_budget_is_abandoned(autoreset: str) -> None:
    async with aioenv.make_pool(
        lambda: Breakable(hang=3.0),
        1,
        mode="ray",
        num_cpus=0,
        autoreset=autoreset,
        episode_timeout=BUDGET,
    ) as pool:
        first = await step(pool, aioenv.RESET)  # type: ignore[arg-type]
        cut = await step(pool, HANG)
        assert_cut_short(cut, first.observation, autoreset)
        new = cut if autoreset == "same_step" else await next_episode(pool, autoreset)
        assert new.observation[0] == 0 and new.info["aioenv"] == REASON
        assert (pool.restarts, pool.failures) == (0, 0)


@pytest.mark.parametrize("worker_class", [aioenv.ThreadWorker, aioenv.AsyncEnvWorker])
async def test_a_workers_own_budget_applies_outside_a_pool(worker_class: Any) -> None:
    env = Waiting if worker_class is aioenv.AsyncEnvWorker else lambda: Breakable(hang=3.0)
    async with worker_class(env, episode_timeout=BUDGET) as worker:
        worker.send_action(aioenv.RESET)
        first = await worker.get_state()
        worker.send_action(HANG)
        cut = await worker.get_state()
        assert_cut_short(cut, first.observation, "disabled")
        assert worker.restarts == 0
        worker.send_action(aioenv.RESET)
        assert (await worker.get_state()).info["aioenv"] == REASON  # a new env's reset


@pytest.mark.parametrize("kind", ["sync", "process", "coroutine"])
async def test_a_segment_after_a_budgets_end_starts_a_new_episode(kind: str) -> None:
    """An episode stepped by hand ran out of its budget while idle (its env kept): the
    next segment starts from a reset, not where that env stood."""
    env = Waiting if kind == "coroutine" else Breakable
    budget = 1.0
    async with aioenv.make_pool(env, 1, mode=kind, episode_timeout=budget) as pool:
        await pool.set_policy(_go_policy)
        await step(pool, aioenv.RESET)  # type: ignore[arg-type]
        await step(pool, GO)
        await asyncio.sleep(budget + SLACK)  # idle past the budget
        assert (await step(pool, GO)).truncated
        parts = await pool.rollout(2)
    assert list(parts.step) == [0, 1]
    assert [row[0] for row in parts.observations] == [0, 1]


def _go_policy(observation: Any) -> int:
    return GO


@pytest.mark.parametrize("autoreset", AUTORESETS)
def test_the_budget_rule_every_supervisor_follows(autoreset: str) -> None:
    # A pool's worker and an engine's children time episodes by this one rule: a start
    # opens a budget, an end closes it (unless the step carries the next episode), an
    # episode not timed yet opens one, any other state lets it run on.
    from aioenv.core._supervision import budget_end

    def end(before: float | None, starts: bool, ended: bool) -> float | None:
        return budget_end(before, starts, ended, autoreset, now=100.0, seconds=5.0)

    assert end(None, True, False) == end(103.0, True, False) == 105.0
    assert end(103.0, False, False) == 103.0
    assert end(None, False, False) == 105.0
    carried = autoreset == "same_step"
    assert end(103.0, False, True) == (105.0 if carried else None)
    assert end(None, True, True) == (105.0 if carried else None)
