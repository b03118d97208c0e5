"""Restarts of envs stepped in line (``mode="inline"``, and the default's choice for cheap
envs): an env that raises is rebuilt and its episode cut short exactly as a process worker
of that env does it, under the same restart budget, and given up as a pool gives up its
worker; deadlines still move the envs to children."""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import pytest
from envs import Walk

import aioenv
from aioenv.vector import _choice
from aioenv.vector._probe import Probe

pytestmark = pytest.mark.timeout(120)

AUTORESETS = ["next_step", "same_step", "disabled"]
SEED = 11  # the envs' seeds, and so their restarts' (restart_seed)
EXPLODING = 1  # the env whose 7th step call raises (Walk's explode_at), every time it is built
STEPS = 24  # enough for the env to explode, be rebuilt, and explode again
GIVE_UP_AT_ONCE = {"restart": "on_failure", "max_restarts": 0}  # the first failure gives up


class _ResetFails(Walk):
    """A Walk whose every reset raises: a crash loop, whatever is restarted."""

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        raise RuntimeError("the simulator does not start")


#: Env 1 of the runs: a Walk whose 7th step call raises (each time it is built).
EXPLODES = functools.partial(Walk, explode_at=7)


def _factories(exploding: Any = EXPLODES) -> list[Any]:
    return [Walk, exploding, Walk]


def _options(mode: str) -> dict[str, Any]:
    # The process path to compare with: one env per worker, as each env in line is supervised.
    return {"envs_per_worker": 1} if mode == "process" else {}


def _unnamed(value: Any) -> Any:
    """``value`` (infos) with the worker's name taken out of restart reasons: "EnvError:
    process worker 1 (...): the env raised ..." and "EnvError: inline env 1 (...): ..."
    say the same thing."""
    if isinstance(value, dict):
        return {key: _unnamed(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unnamed(item) for item in value]
    if isinstance(value, np.ndarray) and value.dtype == object:
        return [_unnamed(item) for item in value]
    if isinstance(value, str):
        return re.sub(r"^EnvError: .*?: the env raised", "EnvError: the env raised", value)
    return value


def _run(mode: str, autoreset: str, factories: list[Any], **options: Any) -> list[Any]:
    """Every transition of a fixed run, and the failures reported; ``options``: the
    vector env's grouping (by default, each env a worker of its own)."""
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        factories,
        mode=mode,
        autoreset_mode=autoreset,
        restart="on_failure",
        seed=SEED,
        on_failure=failures.append,
        **(options or _options(mode)),
    ) as envs:
        assert envs.mode == mode
        transitions: list[Any] = [envs.reset(seed=0)]
        for t in range(STEPS):
            actions = np.array([t % 3, (t + 1) % 3, 2])
            result = envs.step(actions)
            transitions.append(result)
            ended = np.logical_or(result[2], result[3])
            if autoreset == "disabled" and ended.any():
                transitions.append(envs.reset(options={"reset_mask": ended}))
    assert [type(error) for error in failures] == [aioenv.EnvError] * len(failures)
    return [_unnamed(transitions), len(failures)]


@pytest.mark.parametrize("autoreset", AUTORESETS)
def test_an_inline_env_that_raises_is_rebuilt_and_cut_short_as_in_a_process(
    autoreset: str,
) -> None:
    inline, failures = _run("inline", autoreset, _factories())
    process, process_failures = _run("process", autoreset, _factories())
    assert failures == process_failures >= 2  # rebuilt, and exploded again
    np.testing.assert_equal(inline, process)  # the same transitions and infos, every one
    # The env's failures end its episodes truncated, with no reward (a Walk's is >= 0.1).
    cut = [step for step in inline if len(step) == 5 and step[3][EXPLODING] and not step[1][1]]
    assert len(cut) == failures
    # The other envs are untouched: their steps are those of a run where no env fails.
    calm, _ = _run("inline", autoreset, _factories(Walk))
    steps = [step for step in inline if len(step) == 5]
    calm_steps = [step for step in calm if len(step) == 5]
    assert len(steps) == len(calm_steps) == STEPS
    for ours, theirs in zip(steps, calm_steps, strict=True):
        for column in range(4):
            np.testing.assert_equal(ours[column][[0, 2]], theirs[column][[0, 2]])


@pytest.mark.parametrize("autoreset", AUTORESETS)
def test_envs_grouped_in_a_child_are_restarted_there_env_by_env_as_in_line(
    autoreset: str,
) -> None:
    # One child steps all three envs (through the engine): the env that raises is rebuilt
    # in the child by the same rule, and its neighbours in the child are untouched.
    inline, failures = _run("inline", autoreset, _factories())
    grouped, grouped_failures = _run("process", autoreset, _factories(), envs_per_worker=3)
    assert failures == grouped_failures >= 2
    np.testing.assert_equal(inline, grouped)


def _given_up(mode: str) -> tuple[int, str, str]:
    """A crash-looping env (every reset raises) with max_restarts=2: what the vector env
    raises, how many failures it reported, and what every later call raises."""
    failures: list[aioenv.WorkerError] = []
    envs = aioenv.AioVectorEnv(
        _factories(_ResetFails),
        mode=mode,
        restart="on_failure",
        max_restarts=2,
        on_failure=failures.append,
        **_options(mode),
    )
    with envs:
        with pytest.raises(RuntimeError, match="the simulator does not start"):
            envs.reset(seed=0)
        later = []
        for again in (
            lambda: envs.step(np.zeros(3, np.int64)),
            lambda: envs.reset(),
            lambda: envs.get_attr("steps_taken"),
            lambda: envs.async_reset(),
        ):
            with pytest.raises(aioenv.WorkerRemoved) as removed:
                again()
            message = str(removed.value)
            assert "env 1 of the AioVectorEnv" in message
            later.append(re.sub(r"\(\w+ worker 1|\(inline env 1", "(the env", message))
    assert len(set(later)) == 1
    return len(failures), type(failures[-1]).__name__, later[0]


def test_a_crash_looping_inline_env_is_given_up_as_in_a_process() -> None:
    inline = _given_up("inline")
    assert inline[0] == 3  # max_restarts + 1 failures in a row, no progress between
    assert inline[:2] == _given_up("process")[:2]


def test_an_env_given_up_in_its_child_is_named_by_its_place_in_the_vector_env() -> None:
    # Envs 2-3 share child 1; env 2 (the first of its child) raises at every reset, so its
    # child gives it up: the exception is its own, noted as env 2's, as with restarts off.
    factories = [Walk, Walk, _ResetFails, Walk]
    envs = aioenv.AioVectorEnv(factories, mode="process", envs_per_worker=2, **GIVE_UP_AT_ONCE)
    with envs, pytest.raises(RuntimeError, match="the simulator does not start") as raised:
        envs.reset(seed=0)
    notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
    assert "raised by env 2, one of envs 2-3 (worker 1)" in notes, notes


def test_every_call_after_an_env_given_up_in_its_child_names_that_env() -> None:
    # Env 2 of child 1 (envs 2-3) is given up; env 3 did not fail.
    envs = aioenv.AioVectorEnv(
        [Walk, Walk, _ResetFails, Walk], mode="process", envs_per_worker=2, **GIVE_UP_AT_ONCE
    )
    with envs:
        with pytest.raises(RuntimeError, match="the simulator does not start"):
            envs.reset(seed=0)
        with pytest.raises(aioenv.WorkerRemoved) as removed:
            envs.step(np.zeros(4, np.int64))
    message = str(removed.value)
    assert message.startswith("env 2 of the AioVectorEnv (process worker 1 (envs 2-3))"), message


def test_the_default_keeps_cheap_restartable_envs_in_line() -> None:
    probe = Probe({}, None, None, None, 12e-6, False)  # a CartPole step
    for options in ({"restart": "on_failure"}, {"restart": "on_failure", "max_restarts": 3}):
        choice = _choice.choose_mode("auto", probe, 16, None, options, 2)
        assert (choice.mode, choice.envs_per_worker) == ("inline", 16)
    with aioenv.AioVectorEnv("CartPole-v1", 16, restart="on_failure", seed=0) as envs:
        assert envs.mode_choice.mode == "inline", envs.mode_choice.reason
        envs.reset(seed=0)
        envs.step(envs.action_space.sample())


def test_a_step_deadline_still_moves_the_envs_to_children_and_says_why() -> None:
    probe = Probe({}, None, None, None, 12e-6, False)
    for deadline in ("step_timeout", "reset_timeout", "episode_timeout"):
        choice = _choice.choose_mode(
            "auto", probe, 16, None, {"restart": "on_failure", deadline: 1.0}, 2
        )
        assert choice.mode == "process"
        assert choice.reason.startswith(
            f"auto (process): {deadline}= sets a deadline, which a step in the calling thread "
            "cannot be held to (it cannot be abandoned; a worker's can), so the envs cannot "
            "step in line; "
        ), choice.reason
        assert "restart" not in choice.reason
    with pytest.raises(TypeError, match="step_timeout= sets a deadline.*pass mode="):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="inline", restart="on_failure", step_timeout=1.0)


def test_restarts_off_keep_the_inline_env_and_report_its_failure() -> None:
    failures: list[aioenv.WorkerError] = []
    with aioenv.AioVectorEnv(
        _factories(), mode="inline", on_failure=failures.append, seed=SEED
    ) as envs:
        envs.reset(seed=0)

        def steps() -> None:
            for _ in range(STEPS):
                envs.step(np.zeros(3, np.int64))

        with pytest.raises(ValueError, match="Walk exploded on purpose"):
            steps()
        assert len(failures) == 1 and isinstance(failures[0], aioenv.EnvError)
        envs.step(np.zeros(3, np.int64))  # the env was kept, as a worker keeps it
