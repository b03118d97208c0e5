"""Envs stepped in line (``mode="inline"``) and the default's choice between stepping in
line and child processes (``mode="auto"``).

What inline envs answer is checked against ``SyncVectorEnv`` by the combination matrix
(``test_combinations``); here: the choice, its figures and its rules, and what inline envs
do beside lockstep stepping (the pipelined calls, errors, closing, what needs a pool)."""

from __future__ import annotations

import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np
import pytest
from envs import RaisesOnTwo
from gymnasium.vector import SyncVectorEnv
from support import cpu_seconds, wait_until

import aioenv
from aioenv.vector import _choice
from aioenv.vector._grouping import busy_cores
from aioenv.vector._probe import Probe

# Serial (alone, after the parallel part of make test): the default's choice times a
# probe env, and one test measures a hog's CPU time.
pytestmark = pytest.mark.serial


def _probe(step_seconds: float | None, *, is_async: bool = False) -> Probe:
    return Probe({}, None, None, None, step_seconds, is_async)


def _choose(step: float | None, num_envs: int, cores: int = 2, **options: Any) -> Any:
    return _choice.choose_mode("auto", _probe(step), num_envs, None, options, cores)


def test_cheap_envs_step_in_line_and_costly_ones_in_a_child_per_core() -> None:
    cheap = _choose(12e-6, 16)  # a CartPole step: the hand-off costs more than 8 steps
    assert (cheap.mode, cheap.envs_per_worker) == ("inline", 16)
    costly = _choose(600e-6, 8)  # an Atari step: two children of four
    assert (costly.mode, costly.envs_per_worker) == ("process", 4)
    assert _choose(5.0, 1).mode == "inline"  # one env is never faster in a child
    for cores in (4, 16):
        many = _choose(600e-6, 32, cores=cores)
        children = 32 // many.envs_per_worker
        assert many.mode == "process" and 2 <= children <= cores
        assert not 32 % many.envs_per_worker  # the envs split evenly


def test_the_rule_takes_the_placement_it_estimates_fastest() -> None:
    step, cost = 300e-6, _choice._children_cost
    chosen = _choose(step, 16, cores=8)
    estimate = cost(step, chosen.envs_per_worker, 16 // chosen.envs_per_worker)
    for per_worker in (1, 2, 4, 8, 16):
        if 16 // per_worker <= 8:
            assert estimate <= cost(step, per_worker, 16 // per_worker)
    assert estimate * _choice.MARGIN < 16 * step


def test_the_choice_names_its_figures() -> None:
    reason = _choose(125e-6, 8).reason
    assert "125 µs" in reason
    assert "8 in line ~1.00 ms" in reason
    assert "2 child processes of 4" in reason


def test_what_needs_a_pool_or_a_process_is_not_stepped_in_line() -> None:
    choose = _choice.choose_mode
    assert _choose(1e-6, 8, step_timeout=1.0).mode == "process"
    assert "step_timeout" in _choose(1e-6, 8, step_timeout=1.0).reason
    assert _choose(1e-6, 8, seed=3, max_episode_steps=5).mode == "inline"
    assert _choose(None, 8).mode == "process"  # the probe could not be timed
    assert choose("auto", _probe(None, is_async=True), 8, None, {}, 2).mode == "coroutine"
    assert choose("thread", _probe(None), 8, None, {}, 2).mode == "thread"  # given: kept


def test_pool_options_rule_out_in_line_but_not_the_rules_children() -> None:
    """shared_memory=, step_timeout= and the like need workers: the envs get the children the
    rule places without them (as many, as full); where it would step them in line, the
    pool groups them as mode="process" does. The reason names the options and figures."""
    asked = {"shared_memory": True, "step_timeout": 5.0}
    for step, n, cores in ((600e-6, 8, 2), (600e-6, 32, 16), (300e-6, 16, 8), (100e-6, 16, 4)):
        plain = _choose(step, n, cores)
        assert plain.mode == "process"
        choice = _choose(step, n, cores, **asked)
        assert (choice.mode, choice.envs_per_worker) == ("process", plain.envs_per_worker)
        assert choice.reason.startswith(
            "auto (process): shared_memory= is a pool option, which only a pool of workers "
            "applies, and step_timeout= sets a deadline, which a step in the calling thread "
            "cannot be held to"
        )
        assert "they step in the child processes the rule places without them" in choice.reason
        assert plain.reason.split("): ")[1] in choice.reason  # the same figures
    for step, n in ((12e-6, 16), (32e-6, 8)):  # CartPole, HalfCheetah: in line would win
        cheap = _choose(step, n, 2, **asked)
        assert (cheap.mode, cheap.envs_per_worker) == ("process", 0)  # the pool's grouping
        assert "grouped as mode='process' groups them, though in line would be faster" in (
            cheap.reason
        )
        assert f"{n} in line ~" in cheap.reason
    for grouping in ({"envs_per_worker": 2}, {"envs_per_process": 2}, {"episode_timeout": 9.0}):
        given = _choose(600e-6, 8, 2, shared_memory=True, **grouping)
        assert (given.mode, given.envs_per_worker) == ("process", 0)  # the pool groups them
        assert f"grouped as {next(iter(grouping))}= says" in given.reason
    untimed = _choose(None, 8, 2, **asked)
    assert (untimed.mode, untimed.envs_per_worker) == ("process", 0)


def test_the_reason_says_which_options_moved_the_envs_to_children_and_why() -> None:
    needs = (
        "shared_memory= is a pool option, which only a pool of workers applies, so the envs cannot "
        "step in line (mode='inline' has no pool); "
    )
    cheap = _choose(12e-6, 16, 2, shared_memory=True).reason
    assert cheap.startswith(f"auto (process): {needs}they step in child processes, grouped as ")
    costly = _choose(600e-6, 8, 2, shared_memory=True).reason
    assert costly.startswith(f"auto (process): {needs}they step in the child processes the rule")
    untimed = _choose(None, 8, 2, shared_memory=True).reason
    assert untimed == (
        f"auto (process): {needs}the probe env could not be stepped to time it, so they step "
        "in child processes, grouped as mode='process' groups them."
    )
    grouped = _choose(600e-6, 8, 2, shared_memory=True, envs_per_worker=2).reason
    assert grouped == (
        "auto (process): envs_per_worker= and shared_memory= are pool options, which only a "
        "pool of "
        "workers applies, so the envs cannot step in line (mode='inline' has no pool); they "
        "step in child processes, grouped as envs_per_worker= says."
    )


def test_pool_options_leave_busy_cores_out_as_the_rule_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_choice, "usable_cores", lambda: 2)
    monkeypatch.setattr(_choice, "busy_cores", lambda: 1.0)  # a CPU hog on one core
    choice = _choice.choose_mode("auto", _probe(600e-6), 8, None, {"shared_memory": True})
    # one core left: one child would not beat stepping in line, so the pool groups them
    assert (choice.mode, choice.envs_per_worker) == ("process", 0)
    assert "1 child process of 8" in choice.reason and "1 of 2 cores busy" in choice.reason
    monkeypatch.setattr(_choice, "usable_cores", lambda: 4)
    choice = _choice.choose_mode("auto", _probe(600e-6), 8, None, {"shared_memory": True})
    assert (choice.mode, choice.envs_per_worker) == ("process", 4)  # 3 cores left: 2 of 4
    assert "1 of 4 cores busy" in choice.reason


def test_a_restartable_vector_env_gets_a_child_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_choice, "usable_cores", lambda: 2)
    monkeypatch.setattr(_choice, "busy_cores", lambda: 0.0)  # a quiet machine
    with aioenv.AioVectorEnv([_Slow] * 4, restart="on_failure", step_timeout=30.0) as envs:
        assert envs.mode == "process"
        assert list(envs.group_sizes) == [2, 2]  # a child per core, through the engine
        envs.reset(seed=0)
        observations, *_ = envs.step(np.zeros(4, np.int64))
        assert observations.shape == (4, 1)


def test_pipelined_use_is_placed_by_the_lockstep_rule_in_groups_that_fit_the_batch() -> None:
    choose = _choice.choose_mode
    cheap = choose("auto", _probe(12e-6), 16, 8, {}, 2)  # CartPole: recv steps in line
    assert (cheap.mode, cheap.envs_per_worker) == ("inline", 16)
    assert "each recv() of batch_size=8 steps its envs in line" in cheap.reason
    costly = choose("auto", _probe(600e-6), 8, 4, {}, 2)  # Atari: as in lockstep
    assert (costly.mode, costly.envs_per_worker) == ("process", 4)
    assert "in the children while the script computes" in costly.reason
    odd = choose("auto", _probe(600e-6), 8, 2, {}, 2)  # a recv returns whole groups
    assert odd.mode == "process" and not 2 % odd.envs_per_worker
    for bad in (0, 2.0, True, 9):  # refused by the vector env, not chosen for
        assert choose("auto", _probe(12e-6), 8, bad, {}, 2).reason == _choose(12e-6, 8).reason


def test_the_default_pipelines_cheap_envs_in_line() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 4, batch_size=2) as envs:
        assert envs.mode == "inline"
        envs.async_reset(seed=0)
        assert envs.recv()[4]["env_id"].tolist() == [0, 1]
        envs.send(np.zeros(2, np.int64))
        assert envs.recv()[4]["env_id"].tolist() == [2, 3]  # the envs sent to first


def test_the_default_steps_one_env_in_line_and_says_so() -> None:
    with aioenv.AioVectorEnv("CartPole-v1", 1) as envs:
        assert envs.mode == "inline"
        assert repr(envs) == "AioVectorEnv(num_envs=1, mode='inline')"
        assert envs.mode_choice.reason.startswith("auto (inline): a step takes")
        with pytest.raises(AttributeError, match="no pool; pass mode="):
            _ = envs.pool


class _Slow(gymnasium.Env[np.ndarray, int]):
    """A step that takes 3 ms: worth a child process of its own."""

    observation_space = gymnasium.spaces.Box(0, 1, (1,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(1, np.float32), {}

    def step(self, action: int) -> Any:
        time.sleep(0.003)
        return np.zeros(1, np.float32), 0.0, False, False, {}


def test_the_default_puts_slow_envs_in_a_child_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_choice, "usable_cores", lambda: 2)
    monkeypatch.setattr(_choice, "busy_cores", lambda: 0.0)  # a quiet machine
    with aioenv.AioVectorEnv([_Slow] * 4) as envs:
        assert envs.mode == "process"
        assert envs.group_sizes == (2, 2)
        envs.reset(seed=0)
        envs.step(np.zeros(4, np.int64))


def test_inline_refuses_what_needs_workers() -> None:
    with pytest.raises(TypeError, match="step_timeout= sets a deadline.*pass mode="):
        aioenv.AioVectorEnv("CartPole-v1", 2, mode="inline", step_timeout=1.0)


def test_inline_pipelined_calls_give_what_lockstep_gives() -> None:
    reference = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1")] * 3)
    with aioenv.AioVectorEnv("CartPole-v1", 3, mode="inline") as envs, closing(reference):
        envs.async_reset(seed=4)
        observations, *_, infos = envs.recv()
        np.testing.assert_array_equal(observations, reference.reset(seed=4)[0])
        np.testing.assert_array_equal(infos["env_id"], [0, 1, 2])
        for t in range(30):
            actions = np.array([t % 2, 1, 0])
            envs.send(actions)
            ours = envs.recv()
            theirs = reference.step(actions)
            for a, b in zip(ours[:4], theirs[:4], strict=True):
                np.testing.assert_array_equal(a, b)
            envs.step_async(actions)
            np.testing.assert_array_equal(envs.step_wait()[0], reference.step(actions)[0])


def _float64_cart_pole() -> gymnasium.Env[Any, Any]:
    """CartPole behind a wrapper that gives float64 observations for its float32 Box."""
    env = gymnasium.make("CartPole-v1")
    return gymnasium.wrappers.TransformObservation(
        env, lambda observation: observation.astype(np.float64), env.observation_space
    )


def test_inline_observations_have_the_spaces_dtype_as_gymnasiums_batches_do() -> None:
    reference = SyncVectorEnv([_float64_cart_pole] * 2)
    with aioenv.AioVectorEnv([_float64_cart_pole] * 2, mode="inline") as envs, closing(reference):
        assert envs.observation_space == reference.observation_space  # float32
        ours, theirs = envs.reset(seed=1)[0], reference.reset(seed=1)[0]
        ours_step, theirs_step = envs.step(np.array([0, 1]))[0], reference.step(np.array([0, 1]))[0]
        envs.send(np.array([1, 0]), [0, 1])
        received, lockstep = envs.recv()[0], reference.step(np.array([1, 0]))[0]
        for a, b in ((ours, theirs), (ours_step, theirs_step), (received, lockstep)):
            assert a.dtype == b.dtype == np.float32
            np.testing.assert_array_equal(a, b)


def test_an_inline_env_error_is_the_envs_own_and_the_envs_stay_usable() -> None:
    with aioenv.AioVectorEnv([RaisesOnTwo] * 3, mode="inline") as envs:
        envs.reset(seed=0)
        with pytest.raises(ValueError, match="action 2 is not allowed here") as raised:
            envs.step(np.array([0, 2, 0]))
        # where it happened: a note on Python 3.11+, the cause on 3.10 (no notes there)
        notes = "".join(getattr(raised.value, "__notes__", [])) or str(raised.value.__cause__)
        assert "env 1" in notes
        observations, *_ = envs.step(np.array([0, 1, 0]))
        np.testing.assert_array_equal(observations[:, 0], [2, 1, 2])


class _Closing(RaisesOnTwo):
    closed: ClassVar[list[int]] = []

    def close(self) -> None:
        _Closing.closed.append(id(self))


def test_inline_envs_are_closed_once() -> None:
    envs = aioenv.AioVectorEnv([_Closing] * 3, mode="inline")
    _Closing.closed.clear()  # the probe env was closed by now
    envs.reset()
    envs.close()
    envs.close()
    assert len(_Closing.closed) == 3
    with pytest.raises(aioenv.VectorEnvClosed):
        envs.step(np.zeros(3, np.int64))


@pytest.mark.parametrize("mode", ["inline", "thread"])
def test_env_instances_are_left_open_by_the_probe_and_closed_by_close(mode: str) -> None:
    given = [_Closing(), _Closing()]
    _Closing.closed.clear()
    with aioenv.AioVectorEnv(given, mode=mode) as envs:
        assert _Closing.closed == []  # the probe read the first one's spaces, left it open
        envs.reset()
    assert sorted(_Closing.closed) == sorted(map(id, given))


def test_inline_attributes_and_calls_reach_every_env() -> None:
    with aioenv.AioVectorEnv([RaisesOnTwo] * 2, mode="inline") as envs:
        envs.reset(seed=0)
        envs.step(np.array([1, 1]))
        assert envs.get_attr("t") == (1, 1)
        envs.set_attr("t", [5, 6])
        assert envs.get_attr("t") == (5, 6)
        envs.set_attr("t", 7)
        assert envs.call("get_wrapper_attr", "t") == (7, 7)
        assert envs.np_random_seed == (0, 1)


def test_inline_envs_left_open_are_closed_at_interpreter_exit(tmp_path: Path) -> None:
    marks = tmp_path / "closed"
    script = f"""
import gymnasium, aioenv

class Marked(gymnasium.Wrapper):
    def close(self):
        open({str(marks)!r}, "a").write("x")
        super().close()

envs = aioenv.AioVectorEnv([lambda: Marked(gymnasium.make("CartPole-v1"))] * 3, mode="inline")
envs.reset(seed=0)
open({str(marks)!r}, "w").write("")  # the probe env's close is not counted
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    assert marks.read_text() == "xxx"  # every env, once, though close() was never called


#: A reading just under what takes a core.
BUSY_BELOW = _choice.BUSY_SHARE - 0.01


def _choose_on(
    monkeypatch: pytest.MonkeyPatch, cores: int, busy: float, step: float, n: int
) -> Any:
    """The default's choice on ``cores`` cores of which other work keeps ``busy`` busy."""
    watched: list[bool] = []

    def busy_cores() -> float:
        watched.append(True)
        return busy

    monkeypatch.setattr(_choice, "usable_cores", lambda: cores)
    monkeypatch.setattr(_choice, "busy_cores", busy_cores)
    choice = _choice.choose_mode("auto", _probe(step), n, None, {})
    return choice, bool(watched)


def test_cores_that_other_work_keeps_busy_are_left_out_of_the_choice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Atari beside a CPU-heavy job on 2 cores: one core left, so the envs step in line.
    beside, watched = _choose_on(monkeypatch, 2, 1.0, 600e-6, 8)
    assert watched and (beside.mode, beside.envs_per_worker) == ("inline", 8)
    assert beside.reason.endswith("; 1 of 2 cores busy with other work when it was made")
    # A quiet machine's daemons do not take a core.
    quiet, _ = _choose_on(monkeypatch, 2, BUSY_BELOW, 600e-6, 8)
    assert (quiet.mode, quiet.envs_per_worker) == ("process", 4)
    assert "busy" not in quiet.reason
    # 16 cores, 4 of them busy: no more children than the 12 left.
    many, _ = _choose_on(monkeypatch, 16, 4.0, 600e-6, 32)
    assert many.mode == "process" and 32 // many.envs_per_worker <= 12
    assert "4 of 16 cores busy" in many.reason
    # Every core busy: still placed (one core's worth), never zero cores.
    crowded, _ = _choose_on(monkeypatch, 2, 2.0, 600e-6, 8)
    assert crowded.mode == "inline" and "2 of 2 cores busy" in crowded.reason
    # Envs that step in line anyway do not wait to watch the machine.
    cheap, watched = _choose_on(monkeypatch, 2, 1.0, 12e-6, 16)
    assert cheap.mode == "inline" and not watched
    # Nor does a choice for cores given by the caller.
    given = _choice.choose_mode("auto", _probe(600e-6), 8, None, {}, 2)
    assert given.mode == "process"


def test_a_cpu_heavy_job_reads_as_a_busy_core() -> None:
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert wait_until(lambda: cpu_seconds(hog.pid) >= 0.2, timeout=30), "it never ran"
        readings = [busy_cores(0.1) for _ in range(3)]
    finally:
        hog.kill()
        hog.wait()
    assert max(readings) >= _choice.BUSY_SHARE, readings
