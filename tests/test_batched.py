"""Workers that step several envs together (``envs_per_worker=k``): one message per batch,
BatchStep states, the same episodes as one env per worker."""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np
import pytest
from envs import BigObservation, Misshapen, RaisesOnTwo, Structured, Walk
from support import POOL_MODES, modes

import aioenv
from aioenv.core._environment import PLAIN_STEP, BatchStep, Step
from aioenv.core._messages import EpisodeOptions, Failure
from aioenv.env_side._runner import EnvRunner
from aioenv.wire._frames import FrameDecoder, decode_batch_step, encode_batch_step

K = 3

#: Coroutine (async) workers run their env's coroutines one env per worker.
BATCHING_MODES = {name: mode for name, mode in POOL_MODES.items() if "async" not in name}


@pytest.fixture(params=list(BATCHING_MODES))
def mode(request: pytest.FixtureRequest) -> Any:
    """The pool configurations whose workers can step several envs together."""
    return BATCHING_MODES[request.param]


def test_async_workers_say_they_step_one_env_each() -> None:
    with pytest.raises(TypeError, match="envs_per_worker.*sync and thread and process"):
        aioenv.make_pool(Structured, 2, mode="async", envs_per_worker=K)


def test_a_worker_given_an_env_instance_cannot_step_it_as_several_envs() -> None:
    # One env per worker listed as an instance: envs_per_worker=K would step that one
    # object as K envs (each step of a row would move the others' episode on).
    envs = [gymnasium.make("CartPole-v1") for _ in range(2)]
    with pytest.raises(TypeError, match=f"{K} separate envs, got an instance of TimeLimit"):
        aioenv.make_pool(envs, mode=["sync", "thread"], envs_per_worker=K)


def test_an_env_instance_listed_for_two_workers_is_refused() -> None:
    # Both workers would step that one object (two threads at once, for thread workers).
    env = gymnasium.make("CartPole-v1")
    with pytest.raises(TypeError, match="2 separate envs, got an instance of TimeLimit"):
        aioenv.make_pool([env, env], mode=["sync", "thread"])


def flat(observation: Any, row: int) -> list[np.ndarray]:
    """The arrays of one row of a (possibly nested) stacked observation, in a fixed order."""
    if isinstance(observation, dict):
        return [a for key in sorted(observation) for a in flat(observation[key], row)]
    if isinstance(observation, tuple):
        return [a for part in observation for a in flat(part, row)]
    return [np.asarray(observation[row])]


def flat_single(observation: Any) -> list[np.ndarray]:
    if isinstance(observation, dict):
        return [a for key in sorted(observation) for a in flat_single(observation[key])]
    if isinstance(observation, tuple):
        return [a for part in observation for a in flat_single(part)]
    return [np.asarray(observation)]


def same(xs: list[np.ndarray], ys: list[np.ndarray]) -> bool:
    return len(xs) == len(ys) and all(np.array_equal(x, y) for x, y in zip(xs, ys, strict=True))


def timeless(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` without the episode's wall-clock duration, which no two runs share."""
    if isinstance(info.get("episode"), dict):
        info = {**info, "episode": {k: v for k, v in info["episode"].items() if k != "t"}}
    return info


async def reference(seed: int, autoreset: str, actions: list[list[int]]) -> list[list[Any]]:
    """Per env of one batched worker with ``seed``: the states of a one-env sync worker
    with that env's seed, driven by the same actions (its column of ``actions``)."""
    seeds = aioenv.worker_seeds(seed, K)
    runs: list[list[Any]] = []
    for column, env_seed in enumerate(seeds):
        worker = aioenv.SyncWorker(Structured, seed=env_seed)
        pool = aioenv.SyncWorkerPool([worker], autoreset=autoreset)  # type: ignore[arg-type]
        states = [(await pool.reset_all()).states[0]]
        for row in actions:
            pool.send_action(row[column], 0)
            state, _ = await pool.get_state()  # type: ignore[misc]
            states.append(state)
        await pool.aclose()
        runs.append(states)
    return runs


@pytest.mark.parametrize("autoreset", ["next_step", "same_step", "disabled"])
async def test_a_batched_worker_steps_the_same_episodes_as_one_env_per_worker(
    mode: Any, autoreset: str
) -> None:
    rng = np.random.default_rng(3)
    actions = rng.integers(0, 2, (14, K)).tolist()  # several episodes of 6 steps each
    async with aioenv.make_pool(
        Structured, 2, mode=modes(mode, 2), envs_per_worker=K, seed=11, autoreset=autoreset
    ) as pool:
        assert [worker.num_envs for worker in pool.workers] == [K, K]
        got: dict[int, list[BatchStep[Any]]] = {0: [], 1: []}
        for state, worker_id in (await pool.reset_all()).sorted():
            got[worker_id].append(state)
        for row in actions:
            for worker_id in (0, 1):
                pool.send_action(np.array(row), worker_id)
            for _ in range(2):
                state, worker_id = await pool.get_state()  # type: ignore[misc]
                got[worker_id].append(state)
    for worker_id, worker_seed in enumerate(aioenv.worker_seeds(11, 2)):
        expected = await reference(worker_seed, autoreset, actions)  # type: ignore[arg-type]
        for t, batch in enumerate(got[worker_id]):
            assert isinstance(batch, BatchStep) and len(batch) == K
            for env in range(K):
                step = expected[env][t]
                assert same(flat(batch.observations, env), flat_single(step.observation))
                assert batch.rewards[env] == step.reward
                assert batch.terminated[env] == step.terminated
                assert batch.truncated[env] == step.truncated
                assert timeless(batch.infos.get(env, {})) == timeless(step.info)
                if step.final_observation is not None:
                    final = batch.final_observations[env]
                    assert same(flat_single(final), flat_single(step.final_observation))
                else:
                    assert env not in batch.final_observations


async def test_reset_seeds_count_envs_across_workers(mode: Any) -> None:
    async with aioenv.make_pool("CartPole-v1", 2, mode=modes(mode, 2), envs_per_worker=K) as pool:
        batch = (await pool.reset_all(seed=100)).sorted()
        got = np.concatenate([state.observations for state in batch.states])
    expected = [gymnasium.make("CartPole-v1").reset(seed=100 + i)[0] for i in range(2 * K)]
    np.testing.assert_array_equal(got, np.stack(expected))


async def test_a_masked_reset_resets_only_those_envs() -> None:
    async with aioenv.make_pool(Structured, 1, mode="process", envs_per_worker=K) as pool:
        first = (await pool.reset_all(seed=1)).states[0]
        pool.send_action(np.array([0, 1, 0]), 0)
        stepped, _ = await pool.get_state()  # type: ignore[misc]
        mask = np.array([False, True, False])
        pool.send_action(aioenv.Reset(seed=[None, 7, None], options={"reset_mask": mask}), 0)
        masked, _ = await pool.get_state()  # type: ignore[misc]
    expected_reset = Structured()
    observation, _ = expected_reset.reset(seed=7)
    assert same(flat(masked.observations, 1), flat_single(observation))
    for env in (0, 2):  # untouched: their last observation, from the step
        assert same(flat(masked.observations, env), flat(stepped.observations, env))
    assert not same(flat(first.observations, 1), flat(masked.observations, 1))
    assert set(masked.infos) <= {1}  # only the reset env's info


@pytest.mark.parametrize(
    "bad",
    [
        aioenv.Reset(seed=[1, 2]),
        aioenv.Reset(options={"reset_mask": np.array([True, False])}),
        aioenv.Reset(options={"reset_mask": [True, False, True]}),
    ],
    ids=["seeds", "mask_shape", "mask_list"],
)
async def test_a_reset_whose_seeds_or_mask_do_not_fit_is_the_callers_error(
    mode: Any, bad: aioenv.Reset
) -> None:
    """A reset of K envs given 2 seeds, or a mask of another shape or not an array, raises
    at once, naming the worker and the reset, and leaves the envs as they were: it was
    taken for the env's failure, so with restart="on_failure" the envs were rebuilt until
    their budget was spent (a mask), or rebuilt and reset with seeds of their own (2 seeds)
    with no error."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        Walk,
        1,
        mode=modes(mode, 1),
        envs_per_worker=K,
        restart="on_failure",
        on_failure=failures.append,
    ) as pool:
        first = (await pool.reset_all()).states[0]
        pool.send_action(bad, 0)
        with pytest.raises(aioenv.EnvError, match=r"worker 0 ") as raised:
            await pool.get_state()
        assert pool.restarts == 0 and not failures
        assert "the reset sent raised" in str(raised.value)
        pool.send_action(np.zeros(K, np.int64), 0)
        stepped, _ = await pool.get_state()  # type: ignore[misc]
        np.testing.assert_array_equal(stepped.observations[:, 0], first.observations[:, 0])
        assert (stepped.observations[:, 1] == 1).all() and not stepped.infos


async def test_an_env_error_names_its_env_and_a_restart_rebuilds_the_batch(mode: Any) -> None:
    async with aioenv.make_pool(
        RaisesOnTwo, 1, mode=modes(mode, 1), envs_per_worker=K, seed=0
    ) as pool:
        await pool.reset_all()
        pool.send_action(np.array([0, 2, 0]), 0)
        with pytest.raises(aioenv.EnvError, match="env 1 of the batch") as raised:
            await pool.get_state()
        assert raised.value.exception_type == "ValueError"
    async with aioenv.make_pool(
        RaisesOnTwo, 1, mode=modes(mode, 1), envs_per_worker=K, seed=0, restart="on_failure"
    ) as pool:
        await pool.reset_all()
        pool.send_action(np.array([0, 0, 0]), 0)
        await pool.get_state()
        pool.send_action(np.array([0, 2, 0]), 0)
        cut, _ = await pool.get_state()  # type: ignore[misc]
        assert pool.restarts == 1
        # Every env of the batch was replaced: each episode ends, truncated, at its last
        # observation; the new envs' resets follow.
        np.testing.assert_array_equal(cut.observations, np.ones((K, 1), np.float32))
        assert cut.truncated.all() and not cut.terminated.any() and not cut.rewards.any()
        assert all("env 1 of the batch" in cut.infos[env]["aioenv"]["reason"] for env in range(K))
        pool.send_action(np.array([0, 0, 0]), 0)
        restarted, _ = await pool.get_state()  # type: ignore[misc]
        np.testing.assert_array_equal(restarted.observations, np.zeros((K, 1), np.float32))
        assert not restarted.truncated.any()
        assert all(restarted.infos[env]["aioenv"]["restarted"] for env in range(K))


async def test_a_batch_of_the_wrong_size_is_the_callers_error_and_restarts_nothing(
    mode: Any,
) -> None:
    """A batch of K + 1 actions to a worker of K envs raises at once, naming the worker and
    the actions, and leaves the envs as they were: it was taken for the env's failure, so
    with restart="on_failure" the envs were rebuilt and their episodes cut short."""
    failures: list[aioenv.WorkerError] = []
    async with aioenv.make_pool(
        Walk,
        1,
        mode=modes(mode, 1),
        envs_per_worker=K,
        restart="on_failure",
        on_failure=failures.append,
    ) as pool:
        first = (await pool.reset_all()).states[0]
        pool.send_action(np.zeros(K + 1, np.int64), 0)
        with pytest.raises(aioenv.EnvError, match=r"worker 0 .*the actions sent raised Value"):
            await pool.get_state()
        pool.send_action(np.zeros(K, np.int64), 0)
        stepped, _ = await pool.get_state()  # type: ignore[misc]
        assert pool.restarts == 0 and not failures
        np.testing.assert_array_equal(stepped.observations[:, 0], first.observations[:, 0])
        assert (stepped.observations[:, 1] == 1).all() and not stepped.infos


async def test_an_observation_the_batch_cannot_hold_names_the_env_that_gave_it(
    mode: Any,
) -> None:
    async with aioenv.make_pool(Misshapen, 1, mode=modes(mode, 1), envs_per_worker=K) as pool:
        await pool.reset_all()
        pool.send_action(np.array([0, 0, 2]), 0)
        with pytest.raises(aioenv.EnvError, match="batching the envs' states of env 2 of the"):
            await pool.get_state()


@pytest.mark.parametrize("shared_memory", [True, False])
async def test_big_batched_observations_through_shared_memory_or_the_socket(
    shared_memory: bool,
) -> None:
    shape = (32, 32, 3)
    async with aioenv.make_pool(
        lambda: BigObservation(shape),
        2,
        mode="process",
        envs_per_worker=K,
        envs_per_process=2,
        shared_memory=shared_memory,
    ) as pool:
        await pool.reset_all()
        held = []
        for _ in range(3):
            for worker_id in (0, 1):
                pool.send_action(np.array([1, 2, 3]), worker_id)
            batch = await pool.get_batch(min_size=2)
            held.extend(batch.states)
        # The states own their arrays (copy=True): what was taken earlier is unchanged.
        for index, state in enumerate(held):
            expected = BigObservation(shape)
            expected.t = index // 2 + 1
            np.testing.assert_array_equal(state.observations, np.stack([expected._obs()] * K))
            np.testing.assert_array_equal(state.rewards, [1.0, 2.0, 3.0])


def test_a_batch_step_round_trips_through_the_protocol() -> None:
    batch = BatchStep(
        {"x": np.arange(6, dtype=np.int16).reshape(3, 2), "y": (np.ones(3),)},
        np.array([0.5, -1.0, 2.0]),
        np.array([True, False, False]),
        np.array([False, False, True]),
        {2: {"k": "v"}},
        {0: {"x": np.zeros(2), "y": (1.0,)}},
        {0: {"done": True}},
    )
    frames = FrameDecoder().feed(encode_batch_step(9, batch, slot=4))
    assert [(kind, seq, slot) for kind, seq, slot, _ in frames] == [(20, 9, 4)]
    decoded = decode_batch_step(frames[0][3])
    np.testing.assert_array_equal(decoded.observations["x"], batch.observations["x"])
    np.testing.assert_array_equal(decoded.rewards, batch.rewards)
    np.testing.assert_array_equal(decoded.terminated, batch.terminated)
    np.testing.assert_array_equal(decoded.truncated, batch.truncated)
    assert decoded.infos == batch.infos and decoded.final_infos == batch.final_infos
    plain = BatchStep(
        np.zeros((2, 4), np.float32), np.zeros(2), np.zeros(2, bool), np.zeros(2, bool)
    )
    again = decode_batch_step(FrameDecoder().feed(encode_batch_step(1, plain))[0][3])
    assert again.observations.dtype == np.float32 and again.infos == {}
    assert again.rewards.flags.writeable  # copied out of the receive buffer


async def test_force_sync_gives_the_async_pools_data() -> None:
    async def run(force_sync: bool) -> list[Any]:
        async with aioenv.make_pool(
            Structured,
            2,
            mode="process",
            envs_per_worker=K,
            seed=4,
            autoreset="next_step",
            force_sync=force_sync,
        ) as pool:
            out = [s.rewards.tolist() for s in (await pool.reset_all()).sorted().states]
            for t in range(8):
                for worker_id in (0, 1):
                    pool.send_action(np.full(K, t % 2), worker_id)
                batch = (await pool.get_batch(min_size=2)).sorted()
                out.extend(flat(s.observations, 0)[0].tolist() for s in batch.states)
            return out

    assert await run(True) == await run(False)


class _FourTuple(gymnasium.Env[np.ndarray, int]):
    """Answers gymnasium's old 4-tuple from its third step on."""

    observation_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        self.t += 1
        observation = np.full(1, self.t / 10, np.float32)
        if self.t >= 3:
            return observation, 1, False, {}
        return observation, np.int64(1), np.bool_(False), np.bool_(False), {"t": self.t}


def _rows_against_steps(env: Any, autoreset: str, limit: int | None) -> tuple[int, int]:
    """Step ``env`` by ``step`` and by ``step_row`` side by side and check they give the
    same answer, bookkeeping and errors; how many episode ends and resets the rows
    answered as plain tuples."""
    episode = EpisodeOptions(autoreset=autoreset, max_episode_steps=limit)
    by_step, by_row = EnvRunner(env, 5, episode), EnvRunner(env, 5, episode)
    by_step.reset()
    by_row.reset()
    plain_ends = plain_resets = 0
    for action in [0, 1, 2, 0, 1, 1, 0, 2, 1, 0, 0, 1, 2, 2, 0]:
        resetting = by_row.needs_reset
        expected, got = by_step.step(action), by_row.step_row(action)
        if isinstance(expected, Failure):
            assert isinstance(got, Failure)
            assert (got.during, got.message) == (expected.during, expected.message)
            return plain_ends, plain_resets
        # A plain row wherever the step is a Step with no final observation to carry.
        assert (type(got) is tuple) == (expected.final_info is None)
        if type(got) is tuple:
            assert type(got[1]) is float and all(type(flag) is bool for flag in got[2:4])
            plain_ends += got[2] or got[3]
            plain_resets += resetting
            got = Step(*got)
        for field in ("reward", "terminated", "truncated", "info", "final_info"):
            assert getattr(got, field) == getattr(expected, field)
        np.testing.assert_array_equal(got.observation, expected.observation)
        assert (by_row.steps_in_episode, by_row.needs_reset) == (
            by_step.steps_in_episode,
            by_step.needs_reset,
        )
    assert env is Walk  # _FourTuple fails by its third step
    return plain_ends, plain_resets


@pytest.mark.parametrize("limit", [None, 3])
@pytest.mark.parametrize("autoreset", ["next_step", "same_step", "disabled"])
@pytest.mark.parametrize("env", [Walk, _FourTuple])
def test_a_batch_row_is_the_step_of_one_env(env: Any, autoreset: str, limit: int | None) -> None:
    # A worker of several envs takes each env's step as a plain tuple (no Step per env)
    # wherever it carries no final observation: while its episode goes on, at its end
    # but under autoreset "same_step", and for a reset that autoreset "next_step" makes:
    # the same answer, bookkeeping and errors as a one-env step.
    _rows_against_steps(env, autoreset, limit)


def test_under_next_step_autoreset_an_episodes_end_and_its_reset_are_plain_rows() -> None:
    # The cases the plain way is for, in a test of their own: `make test` runs a cover of
    # the parametrized test's cases, which need not hold them. aioenv's own time limit
    # takes the long way (a Step), so there is none here.
    plain_ends, plain_resets = _rows_against_steps(Walk, "next_step", None)
    assert plain_ends > 0 and plain_resets > 0
    # A step that is not gymnasium's 5-tuple fails the plain way as it fails a one-env step.
    _rows_against_steps(_FourTuple, "next_step", None)


class _Answers(gymnasium.Env[np.ndarray, int]):
    """Episodes of three steps with numpy rewards and flags and no info at the second step;
    a reset's info says its seed and options."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1), {"seed": seed, "options": options}

    def step(self, action: int) -> Any:
        self.t += 1
        info = None if self.t == 2 else {"t": self.t}
        observation = np.full(1, self.t + action, np.float64)
        return observation, np.float32(action), np.bool_(self.t == 3), False, info


@pytest.mark.parametrize("autoreset", ["next_step", "disabled"])
def test_a_gymnasium_envs_steps_and_resets_in_line_are_its_plans_answers(autoreset: str) -> None:
    # handle() answers a built gymnasium env's steps and resets with no plan, driver or
    # adapter, making each Step without its __init__ (from PLAIN_STEP): the same states
    # with the same fields (done included) and types, and the same bookkeeping, as the
    # plans give through gymnasium's adapter and Step().
    assert {**vars(Step(None)), "info": None} == PLAIN_STEP
    episode = EpisodeOptions(autoreset=autoreset)
    in_line, by_plan = EnvRunner(_Answers, 5, episode), EnvRunner(_Answers, 5, episode)
    in_line.build()
    by_plan.build()
    assert in_line.gym is not None
    by_plan.gym = None  # as a custom Environment's runner: every call through the adapter
    requests = [aioenv.RESET, 1, 0, 1, 0, aioenv.Reset(seed=3, options={"level": 2})]
    for request in [*requests, 1, 1, 1, aioenv.RESET, 0]:
        got, expected = in_line.handle(request), by_plan.handle(request)
        assert type(got) is Step and vars(got).keys() == vars(expected).keys()
        for field, want in vars(expected).items():
            value = getattr(got, field)
            assert type(value) is type(want)
            assert np.array_equal(value, want) if field == "observation" else value == want
        assert (in_line.steps_in_episode, in_line.needs_reset) == (
            by_plan.steps_in_episode,
            by_plan.needs_reset,
        )
        assert in_line.last is got


def _no_simulator() -> Any:
    raise RuntimeError("no simulator here")


@pytest.mark.parametrize("call", ["step", "step_row"])
def test_a_step_to_an_env_that_failed_to_build_answers_the_builds_failure(call: str) -> None:
    # A slot whose env could not be built (or unpickled) answers every request with that
    # failure, a step before any reset too, and stays unbuilt.
    runner = EnvRunner(_no_simulator, 5, EpisodeOptions())
    for _ in range(2):
        failure = getattr(runner, call)(0)
        assert isinstance(failure, Failure)
        assert (failure.during, failure.exception_type) == ("construction", "RuntimeError")
        assert failure.message == "no simulator here" and runner.env is None
