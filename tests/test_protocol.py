"""The wire protocol: framing fed in arbitrary chunks, and the binary Step layout."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import pickle
from typing import Any

import numpy as np
import pytest

from aioenv import Step
from aioenv.wire._frames import (
    HEADER,
    STEP_STATE,
    FrameDecoder,
    Kind,
    decode_reply,
    encode,
    encode_step,
)
from aioenv.wire._pickles import dumps

OBSERVATIONS: list[Any] = [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.arange(12, dtype=">i4").reshape(4, 3)[:, ::2],  # big-endian, not contiguous
    np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
    np.zeros((0, 3), np.uint8),
    np.array(7),  # zero dimensions
    np.ones((84, 84, 4), np.uint8),
    np.array([True, False]),
    np.float64(3.5),  # a numpy scalar: pickled
    {"position": np.zeros(2), "mode": 1},  # a Dict observation: pickled
    np.array(["a", None], dtype=object),  # object arrays: pickled
    5,
]


@pytest.mark.parametrize("observation", OBSERVATIONS, ids=lambda o: type(o).__name__)
def test_step_round_trips_exactly(observation: Any) -> None:
    for step in (
        Step(observation, 1.5, True, False, {}),
        Step(observation, -2.0, False, True, {"episode": {"r": 3.0}}),
        Step(
            observation,
            0.0,
            True,
            True,
            {"k": 1},
            final_observation=observation,
            final_info={"x": 2},
        ),
    ):
        message = encode_step(9, step, slot=3)
        length, seq, kind, slot = HEADER.unpack_from(message)
        assert (length, seq, kind, slot) == (len(message) - HEADER.size, 9, Kind.STEP_STATE, 3)
        decoded = decode_reply(STEP_STATE, memoryview(message)[HEADER.size :], None)[0]
        assert (decoded.reward, decoded.terminated, decoded.truncated) == (
            step.reward,
            step.terminated,
            step.truncated,
        )
        assert decoded.info == step.info
        assert decoded.final_info == step.final_info
        if isinstance(observation, np.ndarray):
            np.testing.assert_array_equal(decoded.observation, observation)
            assert decoded.observation.dtype == observation.dtype
            assert decoded.observation.shape == observation.shape
            if observation.dtype != object:
                assert decoded.observation.flags.writeable
        else:
            assert repr(decoded.observation) == repr(observation)


def test_decoded_observation_does_not_alias_the_receive_buffer() -> None:
    buffer = bytearray(encode_step(1, Step(np.arange(4.0))))
    decoded = decode_reply(STEP_STATE, memoryview(buffer)[HEADER.size :], None)[0]
    buffer[HEADER.size :] = bytes(len(buffer) - HEADER.size)  # the buffer is reused
    np.testing.assert_array_equal(decoded.observation, np.arange(4.0))


def test_frames_survive_any_chunking() -> None:
    payloads = [b"", b"x", dumps(np.arange(100_000)), b"y" * 70_000]
    stream = b"".join(encode(Kind.STATE, i + 1, p, slot=i) for i, p in enumerate(payloads))
    for chunk_size in (1, 7, 17, 4096, 65536, len(stream)):
        decoder = FrameDecoder()
        frames = []
        for at in range(0, len(stream), chunk_size):
            chunk = stream[at : at + chunk_size]
            frames += [(k, s, slot, bytes(p)) for k, s, slot, p in decoder.feed(chunk)]
        assert frames == [(Kind.STATE, i + 1, i, p) for i, p in enumerate(payloads)]
        assert decoder.pending_bytes == 0


@pytest.mark.parametrize(
    "action",
    [
        np.arange(8, dtype=np.int64),
        np.linspace(-1, 1, 6, dtype=np.float32).reshape(3, 2),
        np.array(3.5),
        np.zeros((0, 4), np.uint8),
    ],
)
def test_array_actions_travel_raw_with_dtype_and_shape(action: np.ndarray) -> None:
    from aioenv.wire._frames import decode_array, encode_array_action
    from aioenv.wire._requests import STEP_ARRAY

    [(kind, seq, slot, payload)] = FrameDecoder().feed(encode_array_action(5, action, 2))
    assert (kind, seq, slot) == (STEP_ARRAY, 5, 2)
    decoded = decode_array(payload)
    assert decoded.dtype == action.dtype and decoded.shape == action.shape
    np.testing.assert_array_equal(decoded, action)
    assert decoded.flags.writeable


def test_a_steps_done_follows_its_flags_however_the_step_is_made() -> None:
    """``done`` is ``terminated or truncated`` on a Step made, replaced, copied, pickled,
    decoded or given another observation; it is no field (not compared, not shown)."""
    for terminated, truncated in itertools.product([False, True], repeat=2):
        step = Step(np.zeros(2), 1.0, terminated, truncated, {"k": 1})
        decoded = decode_reply(STEP_STATE, encode_step(1, step, 0)[HEADER.size :], None)[0]
        made = [
            step,
            dataclasses.replace(step),
            step.with_observation(np.ones(2)),
            step.owned(),
            copy.copy(step),
            copy.deepcopy(step),
            pickle.loads(pickle.dumps(step)),
            decoded,
        ]
        assert [one.done for one in made] == [terminated or truncated] * len(made)
        assert dataclasses.replace(step, truncated=True).done is True
        assert dataclasses.replace(step, terminated=False, truncated=False).done is False
    assert "done" not in {field.name for field in dataclasses.fields(Step)}
    assert "done" not in repr(step)
    assert Step(1, 0.0, True, False) == Step(1, 0.0, True, False)
