"""A property of restarts: any sequence of good steps, failing steps and resets gives, in
every autoreset mode, what the rule of an episode cut short says (the failures guide): the
failed step is truncated with reward 0, the last observation (``final_observation`` under
same-step autoreset, whose step carries the new env's reset) and the reason in
``info["aioenv"]``; the new env's reset follows as an autoreset's does."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from typing import Any

import numpy as np
from envs import AsyncBreakable, Breakable
from hypothesis import given
from hypothesis import strategies as st

import aioenv

STEP, FAIL, RESET = "step", "fail", "reset"


@dataclasses.dataclass
class Model:
    """What the env's next state must be: ``t``, the step count of the last observation
    handed out; ``ended``, the last state ended its episode (cut short) and the new
    env's reset has not been handed out yet."""

    autoreset: str
    t: int = 0
    ended: bool = False
    restarts: int = 0

    def expect(self, op: str, state: Any) -> None:
        """Check ``state``, the answer to ``op``, and move on."""
        info = state.info
        if op == RESET or (self.ended and self.autoreset == "next_step"):
            # A reset, or the step after an end under next-step autoreset: the new episode.
            assert (state.observation[0], state.reward, state.done) == (0, 0.0, False)
            assert info["reset"] is True
            self.t, self.ended = 0, False
            return
        if op == STEP:
            assert (state.observation[0], state.reward, state.done) == (self.t + 1, 1.0, False)
            assert state.final_observation is None
            self.t += 1
            return
        # A failing step: the episode ends cut short, and the env is replaced.
        assert (state.reward, state.terminated, state.truncated) == (0.0, False, True)
        self.restarts += 1
        if self.autoreset == "same_step":
            assert state.final_observation[0] == self.t
            assert state.final_info["aioenv"]["restarted"] is True
            assert "EnvError" in state.final_info["aioenv"]["reason"]
            assert state.observation[0] == 0 and info["reset"] is True
            self.t = 0
        else:
            assert state.observation[0] == self.t
            assert set(info) == {"aioenv"} and info["aioenv"]["restarted"] is True
            assert "EnvError" in info["aioenv"]["reason"]
            self.ended = True


def allowed(op: str, model: Model) -> str:
    """``op``, or a reset where gymnasium's rules want one: under disabled autoreset an
    ended episode is reset before it steps again."""
    return RESET if model.ended and model.autoreset == "disabled" else op


async def play(kind: str, autoreset: str, ops: list[str]) -> None:
    env = AsyncBreakable if kind == "coroutine" else Breakable
    model = Model(autoreset)
    async with aioenv.make_pool(
        env,
        1,
        mode=kind,
        restart="on_failure",
        max_restarts=len(ops) + 1,
        restart_window=math.inf,  # a lifetime count, past the failures ops can make
        autoreset=autoreset,
    ) as pool:
        await pool.reset_all()
        for op in ops:
            op = allowed(op, model)
            pool.send_action({STEP: 0, FAIL: 1, RESET: aioenv.RESET}[op], 0)
            state, _ = await pool.get_state()  # type: ignore[misc]
            model.expect(op, state)
            assert isinstance(state.observation, np.ndarray)
        assert pool.restarts == model.restarts
        assert pool.active_ids == [0]


@given(
    kind=st.sampled_from(["sync", "thread", "coroutine"]),
    autoreset=st.sampled_from(["disabled", "next_step", "same_step"]),
    ops=st.lists(st.sampled_from([STEP, STEP, FAIL, RESET]), min_size=1, max_size=25),
)
def test_restarts_follow_the_rule_of_an_episode_cut_short(
    kind: str, autoreset: str, ops: list[str]
) -> None:
    asyncio.run(asyncio.wait_for(play(kind, autoreset, ops), timeout=30))
