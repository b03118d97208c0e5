"""OpenEnv's protocol on the server's side, as ``aioenv serve`` speaks it: plain JSON and a
session's episode, no web framework (:mod:`aioenv._serve` serves them over starlette, each
session's env in its own pool). The error codes OpenEnv's clients read,
:class:`SessionError` (a request answered with the protocol's error frame), the checks of a
request's data, a session's :class:`Episode` (what its ``state`` reports, and whether a
step may come), the observation payload a reset or a step is answered with, and the
document ``/schema`` publishes.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..core._commands import Reset
from ..core._environment import Step
from ..core._restarts import restart_note
from ._openenv_json import jsonable, space_schema

__all__ = [
    "CAPACITY_REACHED",
    "EXECUTION_ERROR",
    "INVALID_JSON",
    "SESSION_ERROR",
    "UNKNOWN_TYPE",
    "VALIDATION_ERROR",
    "Episode",
    "SessionError",
    "observation_payload",
    "request_body",
    "reset_command",
    "schema_document",
    "session_message",
    "step_body_action",
]

#: OpenEnv's error codes, as its clients read them.
INVALID_JSON = "INVALID_JSON"
UNKNOWN_TYPE = "UNKNOWN_TYPE"
VALIDATION_ERROR = "VALIDATION_ERROR"
EXECUTION_ERROR = "EXECUTION_ERROR"
CAPACITY_REACHED = "CAPACITY_REACHED"
SESSION_ERROR = "SESSION_ERROR"


class SessionError(Exception):
    """A request this session answers with the protocol's error frame."""

    def __init__(self, message: str, code: str = EXECUTION_ERROR) -> None:
        super().__init__(message)
        self.code = code


def request_body(raw: bytes) -> dict[str, Any]:
    """An HTTP request's JSON object, from its body's bytes (an empty body is ``{}``, as
    OpenEnv's default request)."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if not isinstance(body, dict):
        raise SessionError("the body must be a JSON object", VALIDATION_ERROR)
    return body


def session_message(raw: str) -> dict[str, Any]:
    """A WebSocket session's message, from its text: a JSON object
    (``{"type": ..., "data": {...}}``), else the error frame that says what it is not."""
    try:
        message = json.loads(raw)
    except ValueError as exc:
        raise SessionError(f"Invalid JSON: {exc}", INVALID_JSON) from None
    if not isinstance(message, dict):
        raise SessionError(
            'a message is a JSON object: {"type": ..., "data": {...}}', VALIDATION_ERROR
        )
    return message


def step_body_action(body: dict[str, Any]) -> dict[str, Any]:
    """The step's data an HTTP ``/step`` body carries: ``{"action": {"action": value}}``."""
    action = body.get("action")
    if not isinstance(action, dict) or "action" not in action:
        raise SessionError('the body must be {"action": {"action": value}}', VALIDATION_ERROR)
    return action


def reset_command(data: dict[str, Any]) -> Reset:
    """A reset's data checked (its seed an int or None, its options an object or None), as
    the command the env's worker takes."""
    seed, options = data.get("seed"), data.get("options")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise SessionError(f"seed must be an int, got {seed!r}", VALIDATION_ERROR)
    if options is not None and not isinstance(options, dict):
        raise SessionError(f"options must be an object, got {options!r}", VALIDATION_ERROR)
    return Reset(seed=seed, options=options)


class Episode:
    """Where a session's episode stands: what its ``state`` message reports (the episode's
    id, its steps so far) and whether a step may come now (not before the first reset, nor
    after the episode ended or its env failed, until the next reset)."""

    def __init__(self) -> None:
        self.needs_reset = True
        self.episode_id: str | None = None
        self.step_count = 0

    def begin(self, data: dict[str, Any]) -> None:
        """A reset of ``data`` went through: a new episode, of the id ``data`` gives or a
        fresh one."""
        episode_id = data.get("episode_id")
        self.episode_id = str(episode_id) if episode_id is not None else uuid.uuid4().hex
        self.step_count = 0
        self.needs_reset = False

    def check_step(self, data: dict[str, Any]) -> None:
        """Raise the protocol's error for a step whose ``data`` has no action, or a step
        that cannot come now."""
        if "action" not in data:
            raise SessionError('a step\'s data is {"action": value}', VALIDATION_ERROR)
        if self.needs_reset:
            if self.episode_id is None:
                raise SessionError(
                    "this session has no episode yet: reset first (a client that reconnected, "
                    "its session closed as idle or its link dropped, is in a new session)"
                )
            raise SessionError(
                "no episode is going on (the last one ended, or its env failed): reset first"
            )

    def stepped(self, state: Any) -> dict[str, Any]:
        """The observation payload of a step the env answered with ``state``, counted in
        the episode (which ends with it where it is done); the protocol's error where the
        env failed and was restarted instead."""
        note = restart_note(state) if isinstance(state, Step) else None
        if note is not None:
            self.needs_reset = True
            raise SessionError(f"the env failed and was restarted ({note}); reset to go on")
        self.step_count += 1
        reward = float(state.reward) if isinstance(state, Step) else 0.0
        result = observation_payload(state, reward=reward)
        self.needs_reset = bool(result["done"])
        return result

    def state(self) -> dict[str, Any]:
        return {"episode_id": self.episode_id, "step_count": self.step_count}


def observation_payload(state: Any, reward: float | None) -> dict[str, Any]:
    """OpenEnv's observation payload: aioenv's envelope as its observation."""
    if isinstance(state, Step):
        observation, info = state.observation, state.info
        terminated, truncated = bool(state.terminated), bool(state.truncated)
    else:  # a custom Environment's state: no flags of its own to report
        observation, info, terminated, truncated = state, {}, False, False
    envelope = {
        "observation": jsonable(observation),
        "info": jsonable(info),
        "terminated": terminated,
        "truncated": truncated,
    }
    return {"observation": envelope, "reward": reward, "done": terminated or truncated}


def schema_document(observation_space: Any, action_space: Any) -> dict[str, Any]:
    """What ``/schema`` answers: the JSON schemas of a step's action, of the observation
    payload (a reset's too) and of a session's state, the spaces given under their
    values' schemas (None: a space not known, any value)."""
    observation = {
        "type": "object",
        "properties": {
            "observation": space_schema(observation_space),
            "info": {"type": "object"},
            "terminated": {"type": "boolean"},
            "truncated": {"type": "boolean"},
        },
    }
    return {
        "action": {
            "type": "object",
            "properties": {"action": space_schema(action_space)},
            "required": ["action"],
        },
        "observation": observation,
        "reset_observation": observation,
        "state": {
            "type": "object",
            "properties": {
                "episode_id": {"type": ["string", "null"]},
                "step_count": {"type": "integer"},
            },
        },
    }
