"""Ray actors are created, killed and replaced without holding up the event loop: Ray's
control calls (creating an actor, ``ray.kill``), which wait for Ray's control store, are
never made on a thread that runs an event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from faulty_env import FaultyEnv

import aioenv

pytestmark = [pytest.mark.ray, pytest.mark.usefixtures("ray_local")]


@pytest.fixture
def control_calls_on_a_loop(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The Ray control calls made on a thread running an event loop, by name."""
    import ray
    import ray.actor

    calls: list[str] = []

    def watched(name: str, call: Callable[..., Any]) -> Callable[..., Any]:
        def watching(*args: Any, **kwargs: Any) -> Any:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                pass
            else:
                calls.append(name)
            return call(*args, **kwargs)

        return watching

    monkeypatch.setattr(ray, "kill", watched("ray.kill", ray.kill))
    monkeypatch.setattr(
        ray.actor.ActorClass, "_remote", watched("creating an actor", ray.actor.ActorClass._remote)
    )
    return calls


async def test_starting_replacing_and_closing_actors_leaves_ray_control_calls_off_the_loop(
    control_calls_on_a_loop: list[str],
) -> None:
    worker = aioenv.RayWorker(FaultyEnv, seed=3, num_cpus=0, start_timeout=60.0)
    assert "actor" in worker.name  # naming it does not wait for the actor
    async with aioenv.AsyncWorkerPool([worker], restart="on_failure", step_timeout=2.0) as pool:
        pool.send_action(aioenv.RESET, 0)
        await pool.get_state()
        first = worker.actor_id
        for fault, reason in (("sigkill", "WorkerDied"), ("hang", "WorkerTimeout")):
            pool.send_action({"id": 1, "fault": fault}, 0)
            step, _ = await pool.get_state()  # the episode the fault cut short
            assert step.truncated and reason in step.info["aioenv"]["reason"]
            pool.send_action(aioenv.RESET, 0)
            step, _ = await pool.get_state()  # the new actor's reset
            assert step.info["aioenv"]["restarted"] is True
        pool.send_action({"id": 7}, 0)
        step, _ = await pool.get_state()
        assert step.observation[1] == 7
        assert pool.restarts == 2
        assert worker.actor_id != first
    assert control_calls_on_a_loop == []
