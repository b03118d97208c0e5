"""A process worker's steps through the engine: its env's row in a step buffer
(:mod:`aioenv.engine._buffer`) of the child's own, a request wake that the child waits on
beside its socket, and an answer wake that the parent's event loop watches
(:mod:`aioenv.engine._wake`). Both halves are here: :class:`Lane`, the parent's, and
:class:`ChildLane`, the child's, so the one protocol between them is written once.

Each env a child serves (one, the default, or several with ``envs_per_process``) gets a
lane of its own once it has reported an observation space of a fixed layout (a Box,
MultiBinary, MultiDiscrete or Discrete space, or a Dict or Tuple of them); the child waits
on every lane's request wake beside its socket. What a step needs then travels without
the socket, and nothing but an info is pickled: ``RESET``, or the action as the user gave
it (an int, a numpy scalar or an array of the space's dtype and shape, read back in the
child as that same type, where the action space is one such array), and the answer when
it is a plain step (an observation that fits the row's layout exactly, no final
observation, an info whose pickle fits the row's :data:`INFO_BYTES`: most envs' few
scalars do, and an empty one is no bytes). A worker of
several envs (``envs_per_worker``) has a lane too, for its batches: the batch of actions
as an array of the batched space, and a BatchStep back whose infos (final observations
included) fit the slot as a BATCH_STATE message's tail carries them. Everything else
keeps the socket: resets with arguments, other actions, rollouts, control requests,
answers with larger infos or a failure; and each request is still answered once, on one
of the two. The lane's observation row is the env's one shared memory: a state answered
on the socket has its observation there too where it fits (:attr:`Lane.observations`,
the ``shared`` of :func:`~aioenv.wire._frames.encode_step`), and so has a worker of
several envs' batch, stacked there in place (:meth:`~aioenv.env_side._serving.Slots.share`).

Order. The child serves each env's requests in the order the parent made them: a step
posted through the env's lane is served after every request for that env already on the
socket and before any later one. The parent posts a step only when all it wrote to the
socket before has been taken by the kernel (nothing queued or waiting in its writes); the
child, once it has taken its posts, reads everything the socket holds and serves its
requests in order, each env's posted step just before that env's first request numbered
above it (requests are numbered per env), the rest after them. (Requests that are not
numbered, such as the idle spin's setting, are served where they arrive; a slot's closing
drops a step posted for it, whose worker is gone.)
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from ..core._commands import RESET
from ..core._environment import PLAIN_STEP, BatchStep, Step, copy_arrays
from ..wire._pickles import decode_infos, dumps, encode_infos, loads
from ..wire._shared_memory import Layout, SharedObservations
from ._buffer import NoLayout, StepBuffer
from ._wake import Wake

__all__ = ["INFO_BYTES", "ChildLane", "Lane"]

#: How the action in a lane was given, so the child hands the env that same type; or that
#: the request is ``RESET``.
_INT, _SCALAR, _ARRAY, _RESET = 1, 2, 3, 4


#: Bytes of a lane's info slot: its length (4 bytes), then the pickled info. A lane of a
#: worker of several envs has its rewards and flags in the buffer's rows of them, one per
#: env, and this many bytes of its rows' info slots, taken as one, for its infos (see _Half).
INFO_BYTES = 1024
_LENGTH = struct.Struct("<I")
_new_step = object.__new__  # see Lane.answered


def _info_bytes(envs: int) -> int:
    """Bytes of each of the ``envs`` rows' info slots: :data:`INFO_BYTES` in all, at least."""
    return -(-INFO_BYTES // envs)


#: A lane's action row where the action space has no fixed layout: its actions take the
#: socket, its observations the row. (As a batch of one's layout, as a lane's actions are
#: laid out: the rows of its buffer are the worker's envs, its action the worker's one.)
_NO_ACTIONS = Layout.of(batch_space(spaces.MultiBinary(1), 1))


class _Half:
    """What each half holds: the ``buffer`` (one action and one observation, the worker's,
    and a row of reward and flags per env it steps), views of its action, observation and
    info, and the request and answer wakes (set by each half: new, or the parent's).

    ``envs``: the envs its worker steps. One: the answer is a Step. More
    (``envs_per_worker``): the row holds the batch of actions and of observations, and
    the answer is a BatchStep, whose rewards, terminated and truncated flags take the
    buffer's rows of them, and the info slot (its rows' slots, taken as one) its infos'
    length, their flag and their bytes, as a BATCH_STATE message's tail carries them
    (:func:`~aioenv.wire._pickles.encode_infos`)."""

    request: Wake
    answer: Wake

    def __init__(self, buffer: StepBuffer, envs: int) -> None:
        self.buffer, self.envs = buffer, envs
        actions = buffer.actions
        self._action = (
            actions[0:1].reshape(actions.shape[1:]) if isinstance(actions, np.ndarray) else None
        )
        #: The row's observation, laid out as the worker's observation space (its buffer's
        #: observations are one observation, not a batch of one).
        self.observations = SharedObservations(buffer.layouts[0], buffer.observation_views)
        views = buffer.observation_views
        #: The row as one array, where the observation is one (the common case, read with
        #: no call), else None (a Dict, a Tuple, a Discrete's int: read by the layout).
        self._row = views if type(views) is np.ndarray and views.ndim else None
        # (uint8: a view of bytes; the rows' slots as one, of INFO_BYTES)
        self._info = memoryview(buffer.infos.reshape(-1))[:INFO_BYTES]

    def close(self) -> None:
        """Close the wakes and the buffer (a state still viewing the row keeps its memory)."""
        self.request.close()
        self.answer.close()
        self._info.release()
        del self._action, self.observations, self._row, self._info
        self.buffer.close()


class Lane(_Half):
    """The parent's half: a buffer for ``observation_space`` and ``action_space`` (one
    row of each, a reward and flags for each of the ``envs``) and two wakes, new
    (NoLayout where the observation space has no fixed layout; see the module's
    docstring). ``views``: the states read from it view its observation row (valid until
    the next request) rather than own a copy; the child answers on the socket with its
    observation in the row only then (as :attr:`observations`)."""

    def __init__(self, observation_space: Any, action_space: Any, views: bool, envs: int) -> None:
        observations = Layout.of(observation_space)
        if observations is None:
            raise NoLayout(f"the observation space {observation_space} has no fixed layout")
        actions = Layout.of(batch_space(action_space, 1))
        buffer = StepBuffer(observations, actions or _NO_ACTIONS, envs, None, _info_bytes(envs))
        super().__init__(buffer, envs)
        if actions is None:
            self._action = None  # (the placeholder's row takes no action: put refuses all)
        self.views = views
        self.request, self.answer = Wake.new(), Wake.new()
        #: The descriptor that becomes readable when the child has answered.
        self.answer_fd = self.answer.descriptors()[0]

    def descriptors(self) -> list[int]:
        """What the child needs of this lane, in the order :class:`ChildLane` takes them."""
        return [self.buffer.fd, *self.request.descriptors(), *self.answer.descriptors()]

    def offer(self) -> tuple[Any, Any, int, int, int, bool]:
        """What the child needs besides the descriptors: the buffer's layouts, the envs of
        the worker, how many descriptors each wake has, and ``views``."""
        request, answer = self.request.descriptors(), self.answer.descriptors()
        return (*self.buffer.layouts, self.envs, len(request), len(answer), self.views)

    def put(self, seq: int, action: Any, post: bool = True) -> bool:
        """Write step ``seq`` with ``action`` (or ``RESET``) into the row and post it to the
        child (``post``; else the caller posts it later, on :attr:`request`); False (nothing
        written) where the action is not an int, numpy scalar or array that fits the row
        as it is."""
        into = self._action
        kind = type(action)
        if action is RESET:
            how = _RESET
        elif into is None:
            return False
        elif kind is np.ndarray:
            if action.dtype != into.dtype or action.shape != into.shape:
                return False
            np.copyto(into, action)
            how = _ARRAY
        elif into.ndim or into.dtype.kind not in "iu":
            return False
        elif kind is int:
            try:
                into[()] = action
            except OverflowError:
                return False
            how = _INT
        elif isinstance(action, np.generic) and action.dtype == into.dtype:
            into[()] = action
            how = _SCALAR
        else:
            return False
        buffer = self.buffer
        buffer.notes[0] = how
        buffer.seqs[0] = seq
        if post:
            self.request.post()
        return True

    def answered(self) -> tuple[int, Step[Any] | BatchStep[Any] | Exception] | None:
        """The child's answer, its post taken: the number of the request it answers, and
        the step it left in the row (see ``views``), or why its info could not be
        unpickled here; None where there is none (the descriptor was readable for another
        reason)."""
        try:
            self.answer.take()
        except (BlockingIOError, OSError):
            return None
        buffer = self.buffer
        seq = int(buffer.seqs[0])
        (length,) = _LENGTH.unpack_from(self._info)
        row = self._row
        try:
            if row is not None:
                observation = row if self.views else row.copy()
            else:  # not one array: views of it (``views``), else copies
                observation = self.observations.read()
                if not self.views:
                    observation = copy_arrays(observation)
            if self.envs > 1:
                parts = (
                    observation,
                    buffer.rewards.copy(),
                    buffer.terminated.copy(),
                    buffer.truncated.copy(),
                )
                if not length:
                    return seq, BatchStep(*parts)
                tail = self._info[_LENGTH.size + 1 : _LENGTH.size + 1 + length]
                return seq, decode_infos(self._info[_LENGTH.size], tail, parts)
            info = loads(self._info[_LENGTH.size : _LENGTH.size + length]) if length else {}
        except Exception as exc:  # an info that does not unpickle here
            return seq, exc
        terminated, truncated = bool(buffer.terminated[0]), bool(buffer.truncated[0])
        # Step(...) without its __init__, the one Python call of the answer that this one
        # can do without (see PLAIN_STEP).
        step: Step[Any] = _new_step(Step)
        step.__dict__.update(
            PLAIN_STEP,
            observation=observation,
            reward=float(buffer.rewards[0]),
            terminated=terminated,
            truncated=truncated,
            info=info,
            done=terminated or truncated,
        )
        return seq, step


class ChildLane(_Half):
    """The child's half, over what the parent's :class:`Lane` sent (whose descriptors the
    caller closes if this fails)."""

    def __init__(
        self, offer: tuple[Any, Any, int, int, int, bool], descriptors: Sequence[int]
    ) -> None:
        observations, actions, envs, requests, answers, self.views = offer
        buffer = StepBuffer(observations, actions, envs, descriptors[0], _info_bytes(envs))
        super().__init__(buffer, envs)
        self.request = Wake.from_descriptors(descriptors[1 : 1 + requests])
        self.answer = Wake.from_descriptors(descriptors[1 + requests : 1 + requests + answers])
        #: The descriptor that becomes readable when the parent has posted a step.
        self.request_fd = self.request.descriptors()[0]

    def posted(self) -> int:
        """The number of the step the parent posted, taking its post; 0 if none is."""
        try:
            self.request.take()
        except BlockingIOError:
            return 0
        return int(self.buffer.seqs[0])

    def action(self) -> Any:
        """The posted step's action, as the parent's caller gave it."""
        how, value = self.buffer.notes[0], self._action
        if how == _RESET:
            return RESET
        assert value is not None, "a lane without an action row is posted only RESET"
        if how == _ARRAY:
            return value.copy()
        return int(value) if how == _INT else value[()]

    def answered(self, seq: int, result: Any) -> bool:
        """Answer request ``seq`` with ``result`` through the lane, if it is a plain step
        (a BatchStep, for a worker of several envs) that fits the row (see the module's
        docstring); False: it goes on the socket. A plain Step has no final observation
        or info; its info goes into the info slot pickled, after its length. A
        BatchStep's observations go into the row, the rest into the info slot, its infos
        there as :func:`~aioenv.wire._pickles.encode_infos` gives them, after their
        length and flag. Either where it fits."""
        try:
            if self.envs > 1:
                if type(result) is not BatchStep:
                    return False
                flag, data = encode_infos(result) or (0, b"")
                observation, rewards = result.observations, result.rewards
            else:
                if type(result) is not Step or result.final_observation is not None:
                    return False
                if result.final_info is not None:
                    return False
                flag, data = 0, dumps(result.info) if result.info else b""
                observation, rewards = result.observation, float(result.reward)
        except Exception:
            return False  # the socket's path pickles it by value, or says what failed
        at = _LENGTH.size + (self.envs > 1)  # (a BatchStep's flag before its infos)
        if at + len(data) > len(self._info) or not self._written(observation):
            return False
        _LENGTH.pack_into(self._info, 0, len(data))
        self._info[_LENGTH.size] = flag  # (a Step's info, where it has one, writes over it)
        self._info[at : at + len(data)] = data
        buffer = self.buffer
        buffer.rewards[:] = rewards  # (a Step's: the one row's)
        buffer.terminated[:] = result.terminated
        buffer.truncated[:] = result.truncated
        buffer.seqs[0] = seq
        self.answer.post()
        return True

    @property
    def shared(self) -> SharedObservations | None:
        """Where an answer on the socket leaves its observation: the row, where the parent
        reads it there (``views``)."""
        return self.observations if self.views else None

    def _written(self, observation: Any) -> bool:
        """``observation`` written into the row, where it fits the row's layout exactly."""
        row = self._row
        if row is None:
            return self.observations.write(observation)
        if type(observation) is not np.ndarray or observation.dtype != row.dtype:
            return False
        if observation.shape != row.shape:
            return False
        if observation is not row:  # (else stacked there in place: see Slots.share)
            np.copyto(row, observation)
        return True
