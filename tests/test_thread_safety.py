"""Thread workers refuse envs that are not safe in threads (those that draw with pygame
while they step, such as CarRacing-v3) with an error naming mode="process", and still run
safe envs (CartPole) at the same time. The rule: aioenv/env_side/_thread_safety.py."""

from __future__ import annotations

import sys
import threading
import types
from typing import Any, ClassVar

import anyio
import gymnasium
import numpy as np
import pytest

import aioenv

#: A module that looks like a pygame-drawing env's (it imports pygame, as CarRacing's
#: does); the pygame in it is a stand-in, so no pygame nor Box2D is needed.
_FAKE_MODULE = "fake_box2d_racing"
_FAKE_SOURCE = """
import numpy as np
import gymnasium

class FakeRacing(gymnasium.Env):
    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, image=True, render_mode=None):
        shape = (8, 8, 3) if image else (3,)
        self.observation_space = gymnasium.spaces.Box(0, 255, shape, np.uint8)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}

    def render(self):
        return pygame.surfarray.array3d(None)
"""


@pytest.fixture(scope="module")
def fake_racing() -> Any:
    module = types.ModuleType(_FAKE_MODULE)
    module.pygame = types.ModuleType("pygame")  # type: ignore[attr-defined]
    sys.modules[_FAKE_MODULE] = module
    exec(compile(_FAKE_SOURCE, f"<{_FAKE_MODULE}>", "exec"), vars(module))
    yield module.FakeRacing  # type: ignore[attr-defined]
    del sys.modules[_FAKE_MODULE]


async def _start(env: Any, mode: Any) -> None:
    with anyio.fail_after(30):
        async with aioenv.make_pool(env, len(mode), mode=mode) as pool:
            pool.reset(seed=0)
            for worker_id in range(len(mode)):  # each worker's reset state, or its error
                assert await pool.get_state(worker_id=worker_id) is not None


@pytest.mark.parametrize("mode", [["thread", "thread"], ["sync", "thread"]])
async def test_thread_workers_refuse_a_pygame_drawing_env(fake_racing: Any, mode: Any) -> None:
    # image observations from a class whose module uses pygame: drawn in every step
    with pytest.raises(aioenv.EnvError) as refused:
        await _start(fake_racing, mode)
    message = str(refused.value)
    assert "thread workers cannot run" in message
    assert f"{_FAKE_MODULE}.FakeRacing" in message and "pygame" in message
    assert "mode='process'" in message
    # a direct ThreadWorker refuses it too
    with pytest.raises(aioenv.EnvError, match="mode='process'"), anyio.fail_after(30):
        async with aioenv.AsyncWorkerPool([aioenv.ThreadWorker(fake_racing)]) as pool:
            await pool.reset_all(seed=0)
    # no image observations (drawing only when rendered, as gymnasium's vector envs
    # expect thread workers to serve): allowed; sync and process workers are not concerned
    await _start(lambda: fake_racing(image=False), ["thread", "thread"])
    await _start(lambda: fake_racing(image=False, render_mode="rgb_array"), ["thread"])
    await _start(fake_racing, ["sync", "sync"])


async def test_metadata_thread_safe_decides(fake_racing: Any) -> None:
    def declared(env: gymnasium.Env[Any, Any], safe: bool) -> gymnasium.Env[Any, Any]:
        wrapped = gymnasium.wrappers.PassiveEnvChecker(env)
        wrapped.metadata = {**env.metadata, "thread_safe": safe}
        return wrapped

    await _start(lambda: declared(fake_racing(), True), ["thread", "thread"])
    with pytest.raises(aioenv.EnvError, match=r"declares metadata\['thread_safe'\] = False"):
        await _start(lambda: declared(gymnasium.make("CartPole-v1"), False), ["thread"])
    assert "thread_safe" not in fake_racing.metadata  # the class's dict is left alone


async def test_metadata_thread_safe_decides_for_a_pettingzoo_env_too() -> None:
    pytest.importorskip("pettingzoo")
    from test_pettingzoo import Dying

    class Unsafe(Dying):
        metadata: ClassVar[dict[str, Any]] = {**Dying.metadata, "thread_safe": False}

    with pytest.raises(aioenv.EnvError, match=r"declares metadata\['thread_safe'\] = False"):
        await _start(Unsafe, ["thread"])


class _Meeting(gymnasium.Wrapper[Any, Any, Any, Any]):
    """Each step waits until the other env steps too: both must be in flight at once."""

    def __init__(self, env: gymnasium.Env[Any, Any], barrier: threading.Barrier) -> None:
        super().__init__(env)
        self.barrier = barrier

    def step(self, action: Any) -> Any:
        self.barrier.wait(timeout=20)  # raises BrokenBarrierError if they do not overlap
        return super().step(action)


@pytest.mark.timeout(60)
async def test_safe_env_keeps_concurrent_thread_workers() -> None:
    barrier = threading.Barrier(2)
    threads: set[int] = set()

    def env() -> gymnasium.Env[Any, Any]:
        threads.add(threading.get_ident())
        return _Meeting(gymnasium.make("CartPole-v1"), barrier)

    with anyio.fail_after(40):
        async with aioenv.make_pool(env, 2, mode="thread") as pool:
            await pool.reset_all(seed=0)
            for _ in range(5):
                for worker_id in (0, 1):
                    pool.send_action(worker_id, worker_id)
                batch = await pool.get_batch(min_size=2)
                assert len(batch) == 2
    assert len(threads) == 2 and not barrier.broken


@pytest.mark.timeout(300)
def test_car_racing_in_threads_is_sync_vector_env_or_refused() -> None:
    pytest.importorskip("Box2D", reason="Box2D is not installed: pip install 'gymnasium[box2d]'")
    n, steps = 4, 8
    actions = np.random.default_rng(1).uniform(-1, 1, (steps, n, 3)).astype(np.float32)
    reference = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make("CarRacing-v3") for _ in range(n)]
    )
    try:
        expected = [reference.reset(seed=0)[0]]
        expected += [reference.step(action)[0] for action in actions]
    finally:
        reference.close()
    try:
        venv = aioenv.AioVectorEnv("CarRacing-v3", n, mode="thread")
    except aioenv.EnvError as refused:
        assert "mode='process'" in str(refused) and "CarRacing" in str(refused)
        return
    try:
        observed = [venv.reset(seed=0)[0]] + [venv.step(action)[0] for action in actions]
    except aioenv.EnvError as refused:
        message = str(refused)
        assert "thread workers cannot run CarRacing-v3" in message, message
        assert "pygame" in message and "mode='process'" in message
        return
    finally:
        venv.close()
    for index, (got, want) in enumerate(zip(observed, expected, strict=True)):
        assert np.array_equal(got, want), f"observation {index} differs from SyncVectorEnv's"
