"""The engine's parts (aioenv.engine): the kernel counter that wakes the other side, on an
eventfd and on its pipe fallback, and the step buffer both sides map. The other process
is a plain Python started with the descriptors it needs (``pass_fds``)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from gymnasium import spaces

from aioenv.core._environment import copy_arrays
from aioenv.engine._buffer import StepBuffer
from aioenv.engine._wake import Gone, Wake, kernel_counter
from aioenv.env_side._idle_spin import IdleSpin

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="needs memfd_create (Linux)"),
]

#: A deadline no healthy wait here comes near (seconds): the other side is a Python start.
PATIENCE = 30.0


def _other_process(code: str, *fds: int) -> subprocess.Popen[bytes]:
    """A Python running ``code`` with ``fds`` open (their numbers are in ``FDS``)."""
    program = f"FDS = {list(fds)!r}\n" + textwrap.dedent(code)
    return subprocess.Popen([sys.executable, "-c", program], pass_fds=fds)


def test_the_counter_is_the_one_asked_for(wake_kind: str) -> None:
    assert kernel_counter() is (wake_kind == "eventfd")
    wake = Wake.new()
    try:
        assert len(wake.descriptors()) == (1 if wake_kind == "eventfd" else 2)
    finally:
        wake.close()


def test_posts_are_counted_and_taken_at_once(wake_kind: str) -> None:
    wake = Wake.new()
    try:
        with pytest.raises(BlockingIOError):
            wake.take()
        for _ in range(3):
            wake.post()
        assert wake.take() == 3
        with pytest.raises(BlockingIOError):
            wake.take()
        wake.post()
        assert wake.wait(timeout=PATIENCE) == 1
    finally:
        wake.close()


def test_a_wake_closed_twice_closes_its_descriptors_once(wake_kind: str) -> None:
    wake = Wake.new()
    wake.close()
    other = Wake.new()  # it takes the numbers the first one freed
    try:
        wake.close()  # was: it closed the other wake's descriptors
        other.post()
        assert other.take() == 1
    finally:
        other.close()


def test_a_wait_with_no_post_ends_at_its_deadline_with_none(wake_kind: str) -> None:
    wake = Wake.new()
    try:
        assert wake.wait(timeout=0.05) == 0
        assert wake.wait(timeout=0.0) == 0
    finally:
        wake.close()


def test_what_another_process_wrote_before_it_posted_is_there_after_the_wait(
    wake_kind: str,
) -> None:
    """Two hand-offs each way through one buffer: the other process waits for the actions,
    answers with results computed from them, and both sides read what the other wrote."""
    observation_space = spaces.Dict(
        {"pixels": spaces.Box(0, 255, (4, 3), np.uint8), "count": spaces.Discrete(100)}
    )
    buffer = StepBuffer(observation_space, spaces.Box(-1.0, 1.0, (2,), np.float32), 3)
    request, answer = Wake.new(), Wake.new()
    descriptors = [buffer.fd, *request.descriptors(), *answer.descriptors()]
    other = _other_process(
        """
        from gymnasium import spaces
        import numpy as np
        from aioenv.engine._buffer import StepBuffer
        from aioenv.engine._wake import Wake
        width = (len(FDS) - 1) // 2
        buffer = StepBuffer(
            spaces.Dict({"pixels": spaces.Box(0, 255, (4, 3), np.uint8), "count": spaces.Discrete(100)}),
            spaces.Box(-1.0, 1.0, (2,), np.float32), 3, FDS[0],
        )
        request = Wake.from_descriptors(FDS[1:1 + width])
        answer = Wake.from_descriptors(FDS[1 + width:])
        for step in range(2):
            assert request.wait(timeout=30.0) == 1
            for row in range(1, 3):  # this process's rows: 1 and 2
                buffer.observations["pixels"][row] = int(buffer.actions[row].sum() * 10) + step
                buffer.observations["count"][row] = row + 10 * step
                buffer.rewards[row] = float(buffer.actions[row][0])
                buffer.terminated[row] = step == 1
            answer.post()
        """,
        *descriptors,
    )
    try:
        for step, actions in enumerate(([[0, 0], [0.5, 0.5], [1, 0.25]], [[0, 0], [1, 1], [0, 0]])):
            buffer.actions[...] = actions
            request.post()
            assert answer.wait(timeout=PATIENCE) == 1
            seen = copy_arrays({key: part[1:3] for key, part in buffer.observations.items()})
            expected = [int(sum(actions[row]) * 10) + step for row in (1, 2)]
            assert [int(seen["pixels"][i][0, 0]) for i in (0, 1)] == expected
            assert seen["pixels"].shape == (2, 4, 3) and seen["pixels"].dtype == np.uint8
            assert seen["count"].tolist() == [1 + 10 * step, 2 + 10 * step]
            assert buffer.rewards[1:].tolist() == [actions[1][0], actions[2][0]]
            assert buffer.terminated[1:].tolist() == [step == 1] * 2
        assert other.wait(PATIENCE) == 0
        assert buffer.observations["count"][0] == 0  # row 0 is nobody's: untouched
    finally:
        other.kill()
        other.wait()
        for wake in (request, answer):
            wake.close()
        buffer.close()


def test_a_watched_side_that_leaves_without_posting_is_gone(wake_kind: str) -> None:
    """The waiter watches the read end of a pipe whose only writer is the other process:
    when that process exits, the watched end reads end-of-file and the wait raises Gone."""
    wake = Wake.new()
    watched, writer = os.pipe()
    other = _other_process("import sys; sys.exit(3)", writer, *wake.descriptors())
    os.close(writer)
    try:
        with pytest.raises(Gone) as gone:
            wake.wait(timeout=PATIENCE, watch=[watched])
        assert gone.value.fd == watched
        assert other.wait(PATIENCE) == 3
    finally:
        other.kill()
        other.wait()
        os.close(watched)
        wake.close()


def test_an_answer_posted_just_before_its_sender_left_is_taken_not_lost(wake_kind: str) -> None:
    wake = Wake.new()
    watched, writer = os.pipe()
    other = _other_process(
        """
        from aioenv.engine._wake import Wake
        Wake.from_descriptors(FDS[1:]).post()
        """,
        writer,
        *wake.descriptors(),
    )
    os.close(writer)
    try:
        assert other.wait(PATIENCE) == 0  # posted, then gone, before the wait begins
        assert wake.wait(timeout=PATIENCE, watch=[watched]) == 1
    finally:
        other.kill()
        other.wait()
        os.close(watched)
        wake.close()


def test_a_spinning_wait_takes_a_post_that_is_already_there(wake_kind: str) -> None:
    spin = IdleSpin(1.0, 0)
    wake = Wake.new()
    try:
        wake.post()
        wake.post()
        assert wake.wait(timeout=PATIENCE, spin=spin) == 2
        assert spin.spin_after > 0.0  # the spin ran (and set when the next may)
        spin.spin_after = spin.clock() + 3600.0  # held: this wait blocks at once
        assert wake.wait(timeout=0.01, spin=spin) == 0
    finally:
        wake.close()


def test_a_space_without_a_fixed_layout_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="the observation space Text"):
        StepBuffer(spaces.Text(5), spaces.Discrete(2), 2)
    with pytest.raises(ValueError, match="the action space Sequence"):
        StepBuffer(spaces.Discrete(3), spaces.Sequence(spaces.Discrete(2)), 2)


def test_each_part_is_a_batch_of_its_space() -> None:
    observation_space = spaces.Tuple((spaces.Box(-1, 1, (3,)), spaces.MultiBinary(2)))
    buffer = StepBuffer(observation_space, spaces.Discrete(4), 5)
    try:
        boxes, bits = buffer.observations
        assert (boxes.shape, boxes.dtype) == ((5, 3), np.float32)
        assert (bits.shape, bits.dtype) == ((5, 2), np.int8)
        assert (buffer.actions.shape, buffer.actions.dtype) == ((5,), np.int64)
        assert [part.shape for part in (buffer.rewards, buffer.terminated, buffer.truncated)] == [
            (5,)
        ] * 3
        boxes[2] = 0.5
        copy = copy_arrays(buffer.observations)
        boxes[2] = -0.5
        assert copy[0][2].tolist() == [0.5] * 3  # a copy, not a view
        assert buffer.observations[0][2:3].tolist() == [[-0.5] * 3]  # a view
    finally:
        buffer.close()
