"""An env that fails on command, for the fault suite and the soak.

Faults come from the constructor (``init_fault``, ``reset_fault``, ``step_fault`` at step
``fault_at``) or ride on the action itself (``{"id": n, "fault": "raise"}``), so a driver
knows exactly which request should fail. With ``once`` (a file path) a constructor fault
fires only the first time, so a restarted env comes back healthy. An action's ``"began"``
(a file path) is created as its step begins, before any fault: a driver can wait for a
step to be under way.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any, ClassVar

import gymnasium
import numpy as np

PROCESS_ONLY = {"exit", "sigkill", "sigsegv", "hang"}


class FaultyEnv(gymnasium.Env[np.ndarray, Any]):
    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(
        self,
        *,
        init_fault: str | None = None,
        reset_fault: str | None = None,
        step_fault: str | None = None,
        fault_at: int = 1,
        once: str | None = None,
        gate: str | None = None,
        ignore_sigterm: bool = False,
        episode_length: int = 50,
    ) -> None:
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float64)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.reset_fault = reset_fault
        self.step_fault = step_fault
        self.fault_at = fault_at
        self.once = once
        self.gate = gate
        self.episode_length = episode_length
        self.armed_reset_fault: str | None = None
        self.t = 0
        if ignore_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if init_fault is not None:
            self._fault(init_fault)

    def _obs(self, action_id: float) -> np.ndarray:
        return np.array([self.t, action_id, self.draw], dtype=np.float64)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        if self.reset_fault is not None:
            self._fault(self.reset_fault)
        if self.armed_reset_fault is not None:
            fault, self.armed_reset_fault = self.armed_reset_fault, None
            self._fault(fault)
        self.t = 0
        self.draw = float(self.np_random.random())
        return self._obs(-1), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        action_id = -1
        if isinstance(action, dict):
            action_id = action.get("id", -1)
            if action.get("began"):
                Path(action["began"]).touch()
            if action.get("arm_reset_fault"):
                self.armed_reset_fault = action["arm_reset_fault"]
            if action.get("fault"):
                result = self._fault(action["fault"], action.get("arg", 0.0))
                if result is not None:
                    return result
        if self.step_fault is not None and self.t == self.fault_at:
            result = self._fault(self.step_fault)
            if result is not None:
                return result
        info = {"action_id": action_id}
        return self._obs(action_id), 1.0, self.t >= self.episode_length, False, info

    def close(self) -> None:
        if self.gate is not None and self.step_fault == "hang_close":
            self._wait_gate()

    def _wait_gate(self, limit: float = 120.0) -> None:
        deadline = time.monotonic() + limit
        while not (self.gate and os.path.exists(self.gate)) and time.monotonic() < deadline:
            time.sleep(0.005)

    def _fault(self, fault: str, arg: float = 0.0) -> Any:
        if self.once is not None:
            if Path(self.once).exists():
                return None
            Path(self.once).touch()
        if fault == "raise":
            raise RuntimeError(f"injected fault at t={self.t}")
        if fault == "sleep":
            time.sleep(arg)
            return None
        if fault == "hang":  # a process worker's hang: only a kill ends it
            time.sleep(3600)
        if fault == "gated_hang":  # a thread worker's hang, released by the test's gate
            self._wait_gate()
            return None
        if fault == "exit":
            os._exit(7)
        if fault == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        if fault == "sigsegv":  # a native crash: a fault on this thread, whichever it is
            # (os.kill would be a signal to the process, which a thread that blocks it, as
            # a Ray actor's threads do, passes on while it goes on running)
            ctypes.string_at(0)
        if fault == "garbage":
            return ("not", "a", "step")
        raise ValueError(f"unknown fault {fault!r}")


class AsyncFaultyEnv:
    """:class:`FaultyEnv` as a coroutine env (async ``reset``/``step`` returning gymnasium's
    tuples): a ``sleep`` or ``hang`` fault awaits on the event loop instead of blocking it
    (a hang until cancelled)."""

    def __init__(self, **kwargs: Any) -> None:
        self.env = FaultyEnv(**kwargs)
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space

    async def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        await asyncio.sleep(0)
        return self.env.reset(seed=seed, options=options)  # type: ignore[no-any-return]

    async def step(self, action: Any) -> Any:
        if isinstance(action, dict) and action.get("fault") in ("sleep", "hang"):
            await asyncio.sleep(action.get("arg", 0.0) if action["fault"] == "sleep" else 3600)
            action = {key: value for key, value in action.items() if key not in ("fault", "arg")}
        await asyncio.sleep(0)
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()
