"""Properties of what crosses a process boundary, over generated values: a Step, a
BatchStep, an array action and a batch's vector infos come back exactly as they were sent
(types, dtypes with their byte order and fields, shapes with zero sizes, values to the
bit), whatever their strides; frames come back whole however the stream is cut; and
observations written through a shared-memory layout read back the same."""

from __future__ import annotations

import itertools
import os
import pickle
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from support import mapped

from aioenv import Step
from aioenv.core._environment import BatchStep
from aioenv.wire._frames import (
    HEADER,
    STEP_STATE,
    FrameDecoder,
    decode_array,
    decode_batch_step,
    decode_reply,
    encode,
    encode_array_action,
    encode_batch_step,
    encode_step,
)
from aioenv.wire._pickles import dumps_arrays, raw_dtype
from aioenv.wire._requests import STEP_ARRAY
from aioenv.wire._shared_memory import Layout, memory_file

# Every dtype an array can have, both byte orders where there are two; structured dtypes
# (fields of any of these, nested) and objects among them. Dates and durations in native
# order only: numpy's own pickling makes big-endian ones little-endian.
SCALAR_DTYPES = st.one_of(
    hnp.boolean_dtypes(),
    hnp.integer_dtypes(endianness="?"),
    hnp.unsigned_integer_dtypes(endianness="?"),
    hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64)),
    hnp.complex_number_dtypes(endianness="?"),
    hnp.datetime64_dtypes(endianness="="),
    hnp.timedelta64_dtypes(endianness="="),
    hnp.byte_string_dtypes(endianness="?", min_len=1, max_len=4),
    hnp.unicode_string_dtypes(endianness="?", min_len=1, max_len=4),
)
DTYPES = st.one_of(
    SCALAR_DTYPES,
    hnp.array_dtypes(SCALAR_DTYPES, min_size=1, max_size=3),
    st.just(np.dtype(object)),
)
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def _objects(dtype: np.dtype[Any]) -> Any:
    return st.one_of(st.none(), st.integers(), st.text(max_size=3)) if dtype.hasobject else None


@st.composite
def arrays(draw: st.DrawFn, dtypes: Any = DTYPES, pickled: bool = False) -> np.ndarray[Any, Any]:
    """An array of any dtype and shape, and maybe a view of one with other strides: every
    other item, transposed, Fortran order or reversed. Not both non-native and strided
    where it is ``pickled`` (inside a dict, say): numpy pickles such a view in native order."""
    dtype = draw(dtypes)
    array = draw(hnp.arrays(dtype, SHAPES, elements=_objects(dtype)))
    if pickled and not dtype.isnative:
        return array  # type: ignore[no-any-return]
    view = draw(st.sampled_from(["as is", "every other", "transposed", "fortran", "reversed"]))
    if view == "every other" and array.ndim:
        return array[::2]  # type: ignore[no-any-return]
    if view == "transposed":
        return array.T  # type: ignore[no-any-return]
    if view == "fortran":
        return np.asfortranarray(array)
    if view == "reversed" and array.ndim:
        return array[::-1]  # type: ignore[no-any-return]
    return array


LEAVES = st.one_of(
    arrays(pickled=True),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.builds(np.float32, st.floats(width=32)),
    st.builds(np.int16, st.integers(-(2**15), 2**15 - 1)),
)
#: Observations and infos: arrays, scalars, and dicts, tuples and lists of them, nested.
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.dictionaries(st.text(max_size=3), inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.lists(inner, max_size=3),
    ),
    max_leaves=6,
)
INFOS = st.dictionaries(st.text(max_size=3), VALUES, max_size=3)


def assert_same(mine: Any, theirs: Any, path: str = "value") -> None:
    """The same types all the way down; arrays of the same dtype (byte order and fields
    included) and shape, bit for bit, C-contiguous and writable (fresh copies)."""
    assert type(mine) is type(theirs), f"{path}: {type(mine)} is not {type(theirs)}"
    if isinstance(theirs, np.ndarray):
        assert mine.dtype == theirs.dtype and mine.dtype.str == theirs.dtype.str, path
        assert mine.dtype.names == theirs.dtype.names, path
        assert mine.shape == theirs.shape, path
        if theirs.dtype.hasobject:
            assert mine.tolist() == theirs.tolist(), path
        else:
            assert mine.tobytes() == theirs.tobytes(), path
        assert mine.flags.writeable, f"{path} is read-only"
    elif isinstance(theirs, dict):
        assert list(mine) == list(theirs), path
        for key, value in theirs.items():
            assert_same(mine[key], value, f"{path}[{key!r}]")
    elif isinstance(theirs, (tuple, list)):
        assert len(mine) == len(theirs), path
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_same(a, b, f"{path}[{index}]")
    elif isinstance(theirs, np.generic):
        assert mine.tobytes() == theirs.tobytes(), path  # NaN too
    elif isinstance(theirs, float) and theirs != theirs:
        assert mine != mine, path
    else:
        assert mine == theirs, path


def _payload(message: bytes) -> bytes:
    return message[HEADER.size :]


STRUCTURED = np.zeros(2, [("x", "<f4"), ("y", ">i2")])


@given(
    observation=st.one_of(arrays(), VALUES),
    reward=st.floats(),
    terminated=st.booleans(),
    truncated=st.booleans(),
    info=INFOS,
    final=st.one_of(st.none(), st.tuples(VALUES, INFOS)),
)
@example(STRUCTURED, 0.0, False, False, {}, None)  # a structured dtype kept its fields
@example(np.zeros((0, 3), ">f2")[:, ::2], 1.0, True, False, {"k": 1}, (np.int8(3), {}))
def test_a_step_round_trips_exactly(
    observation: Any,
    reward: float,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
    final: tuple[Any, dict[str, Any]] | None,
) -> None:
    final_observation, final_info = (None, None) if final is None else final
    step = Step(observation, reward, terminated, truncated, info, final_observation, final_info)
    decoded = decode_reply(STEP_STATE, _payload(encode_step(7, step, slot=3)), None)[0]
    assert_same(decoded.observation, observation)
    assert decoded.reward == reward or (reward != reward and decoded.reward != decoded.reward)
    assert (decoded.terminated, decoded.truncated) == (terminated, truncated)
    assert_same(decoded.info, info, "info")
    assert_same(decoded.final_observation, final_observation, "final_observation")
    assert_same(decoded.final_info, final_info, "final_info")


@st.composite
def batch_steps(draw: st.DrawFn) -> BatchStep[Any]:
    rows = draw(st.integers(1, 4))
    observations = draw(st.one_of(arrays().filter(lambda array: array.ndim > 0), VALUES))
    rewards = np.array(draw(st.lists(st.floats(), min_size=rows, max_size=rows)), np.float64)
    flags = st.lists(st.booleans(), min_size=rows, max_size=rows).map(np.array)
    sparse = st.dictionaries(st.integers(0, rows - 1), INFOS, max_size=rows)
    infos, final_infos = draw(sparse), draw(sparse)
    finals = {row: draw(VALUES) for row in final_infos}
    return BatchStep(observations, rewards, draw(flags), draw(flags), infos, finals, final_infos)


@given(batch_steps())
@example(BatchStep(STRUCTURED, np.zeros(2), np.zeros(2, bool), np.ones(2, bool)))
def test_a_batch_step_round_trips_exactly(batch: BatchStep[Any]) -> None:
    decoded = decode_batch_step(_payload(encode_batch_step(9, batch, slot=1)))
    assert_same(decoded.observations, batch.observations, "observations")
    for name in ("rewards", "terminated", "truncated"):
        assert_same(getattr(decoded, name), getattr(batch, name), name)
    assert_same(decoded.infos, batch.infos, "infos")
    assert_same(decoded.final_observations, batch.final_observations, "finals")
    assert_same(decoded.final_infos, batch.final_infos, "final_infos")


@given(arrays(DTYPES.filter(raw_dtype)))
def test_an_array_action_round_trips_exactly(action: np.ndarray[Any, Any]) -> None:
    message = encode_array_action(5, action, 2)
    length, seq, kind, slot = HEADER.unpack_from(message)
    assert (length, seq, kind, slot) == (len(message) - HEADER.size, 5, STEP_ARRAY, 2)
    assert_same(decode_array(_payload(message)), action)


@given(VALUES)
@example({"records": STRUCTURED, "_records": np.ones(2, bool)})
def test_vector_infos_pickled_as_raw_arrays_round_trip_exactly(infos: Any) -> None:
    assert_same(pickle.loads(dumps_arrays(infos)), infos)


FRAMES = st.lists(
    st.tuples(
        st.integers(1, 255),  # kind
        st.integers(0, 2**64 - 1),  # sequence number
        st.integers(0, 2**16 - 1),  # slot
        st.binary(max_size=40),
    ),
    max_size=6,
)


@given(frames=FRAMES, cuts=st.lists(st.integers(0, 400), max_size=8), views=st.booleans())
def test_frames_come_back_whole_however_the_stream_is_cut(
    frames: list[tuple[int, int, int, bytes]], cuts: list[int], views: bool
) -> None:
    stream = b"".join(encode(kind, seq, payload, slot) for kind, seq, slot, payload in frames)  # type: ignore[arg-type]
    points = sorted({0, len(stream), *(cut for cut in cuts if cut < len(stream))})
    decoder = FrameDecoder()
    received = []
    for start, stop in itertools.pairwise(points):
        chunk = stream[start:stop]
        received += decoder.feed(memoryview(chunk) if views else chunk)
    assert [(k, s, sl, bytes(p)) for k, s, sl, p in received] == [
        (kind, seq, slot, payload) for kind, seq, slot, payload in frames
    ]
    assert decoder.pending_bytes == 0


# Shared memory ---------------------------------------------------------------------------
BOX_DTYPES = st.sampled_from(
    [np.float16, np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.uint16]
)
BOX_SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5)
LEAF_SPACES = st.one_of(
    st.builds(lambda dtype, shape: spaces.Box(0, 100, shape, dtype), BOX_DTYPES, BOX_SHAPES),
    st.builds(lambda shape: spaces.Box(0, 1, shape, np.bool_), BOX_SHAPES),
    st.builds(spaces.Discrete, st.integers(1, 50), start=st.integers(-5, 5)),
    st.builds(
        spaces.MultiBinary,
        st.one_of(st.integers(1, 9), st.tuples(st.integers(1, 3), st.integers(1, 3))),
    ),
    st.builds(spaces.MultiDiscrete, st.lists(st.integers(2, 9), min_size=1, max_size=4)),
)
#: Nested Dict and Tuple spaces of fixed-layout leaves (what shared memory takes).
FIXED_SPACES = st.recursive(
    LEAF_SPACES,
    lambda inner: st.one_of(
        st.dictionaries(
            st.text("abcxyz", min_size=1, max_size=3), inner, min_size=1, max_size=3
        ).map(spaces.Dict),
        st.lists(inner, min_size=1, max_size=3).map(lambda items: spaces.Tuple(tuple(items))),
    ),
    max_leaves=6,
)


def as_written(space: Any, value: Any) -> Any:
    """A space's sample as the layout takes it: a Discrete value as a Python int, a Box
    value as an array of the Box's dtype and shape (a 0-d Box samples a numpy scalar)."""
    if isinstance(space, spaces.Dict):
        return {key: as_written(sub, value[key]) for key, sub in space.spaces.items()}
    if isinstance(space, spaces.Tuple):
        return tuple(as_written(sub, item) for sub, item in zip(space, value, strict=True))
    if isinstance(space, spaces.Discrete):
        return int(value)
    return np.asarray(value, space.dtype).reshape(space.shape)


def assert_same_view(mine: Any, theirs: Any, path: str = "observation") -> None:
    """What reading shared memory gives: :func:`assert_same` but views, not copies."""
    assert type(mine) is type(theirs), path
    if isinstance(theirs, np.ndarray):
        assert (mine.dtype.str, mine.shape) == (theirs.dtype.str, theirs.shape), path
        assert mine.tobytes() == theirs.tobytes(), path
    elif isinstance(theirs, dict):
        assert list(mine) == list(theirs), path
        for key, value in theirs.items():
            assert_same_view(mine[key], value, f"{path}[{key!r}]")
    elif isinstance(theirs, tuple):
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            assert_same_view(a, b, f"{path}[{index}]")
    else:
        assert mine == theirs, path


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)")
@given(space=FIXED_SPACES, seeds=st.lists(st.integers(0, 2**31), min_size=1, max_size=3))
def test_observations_written_to_shared_memory_read_back_the_same(
    space: Any, seeds: list[int]
) -> None:
    layout = Layout.of(space)
    if layout is None:  # nothing to share: every array of it is empty
        assert all(np.prod(shape) == 0 for shape in _shapes(space))
        return
    fd = memory_file(layout.nbytes, "aioenv-test")
    try:
        child, parent = mapped(layout, fd), mapped(layout, fd)
    finally:
        os.close(fd)
    for seed in seeds:  # one observation after another, as a worker's steps write them
        space.seed(seed)
        observation = as_written(space, space.sample())
        assert child.write(observation)
        assert_same_view(parent.read(), observation)
        step = Step(observation, 1.0)
        payload = _payload(encode_step(1, step, shared=child))
        decoded, borrowed = decode_reply(STEP_STATE, payload, parent)
        assert borrowed  # the observation views the shared memory
        assert_same_view(decoded.observation, observation)


def _shapes(space: Any) -> list[tuple[int, ...]]:
    if isinstance(space, spaces.Dict):
        return [shape for sub in space.spaces.values() for shape in _shapes(sub)]
    if isinstance(space, spaces.Tuple):
        return [shape for sub in space.spaces for shape in _shapes(sub)]
    return [() if isinstance(space, spaces.Discrete) else space.shape]


def _spoiled(space: Any, value: Any, how: Any) -> Any:
    """``value`` with one leaf that no longer fits ``space``'s layout exactly."""
    if isinstance(space, spaces.Dict):
        key = how.choice(list(space.spaces))
        return {**value, key: _spoiled(space[key], value[key], how)}
    if isinstance(space, spaces.Tuple):
        index = how.randrange(len(space.spaces))
        items = list(value)
        items[index] = _spoiled(space[index], items[index], how)
        return tuple(items)
    if isinstance(space, spaces.Discrete):
        return np.int64(value)  # a numpy scalar, not a Python int
    if how.random() < 0.5:
        return value.astype(np.complex64)  # another dtype
    return np.expand_dims(value, 0)  # another shape


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)")
@given(space=FIXED_SPACES, seed=st.integers(0, 2**31), how=st.randoms(use_true_random=False))
def test_an_observation_that_does_not_fit_is_refused_and_leaves_the_memory_as_it_was(
    space: Any, seed: int, how: Any
) -> None:
    layout = Layout.of(space)
    if layout is None:
        return
    fd = memory_file(layout.nbytes, "aioenv-test")
    try:
        shared = mapped(layout, fd)
    finally:
        os.close(fd)
    space.seed(seed)
    written = as_written(space, space.sample())
    assert shared.write(written)
    spoiled = _spoiled(space, as_written(space, space.sample()), how)
    assert not shared.write(spoiled)
    assert_same_view(shared.read(), written)
