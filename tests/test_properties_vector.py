"""Properties of the vector env's bookkeeping over generated layouts, spaces and infos:
a batch of actions split between workers of any sizes reaches each env as gymnasium's
``iterate`` gives it, the workers' states gather into the batch ``SyncVectorEnv`` makes,
and the infos of grouped workers merge into exactly what gymnasium's own ``_add_info``
makes of every env's info (key order, dtypes, masks, the objects in object arrays)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from gymnasium.vector.utils import batch_space, concatenate, create_empty_array, iterate
from hypothesis import currently_in_test_context, event, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from space_envs import Parity
from test_vector_infos import assert_identical

from aioenv import Step
from aioenv.core._environment import BatchStep, VectorSource
from aioenv.core._messages import EpisodeOptions
from aioenv.env_side._infos import add_info
from aioenv.env_side._vector_runner import VectorRunner
from aioenv.vector._batches import VectorBatches
from aioenv.vector._layout import EnvLayout
from aioenv.wire._frames import HEADER, decode_batch_step, encode_batch_step

AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}


@st.composite
def layouts(draw: st.DrawFn, max_envs: int = 7) -> list[int]:
    """How many envs each worker steps: any split of 1 to ``max_envs`` envs."""
    num_envs = draw(st.integers(1, max_envs))
    sizes: list[int] = []
    while sum(sizes) < num_envs:
        sizes.append(draw(st.integers(1, num_envs - sum(sizes))))
    return sizes


# Spaces: every kind gymnasium ships, nested in Dicts and Tuples.
BOX = st.builds(
    lambda dtype, shape: spaces.Box(0, 5, shape, dtype),
    st.sampled_from([np.float32, np.float64, np.int64, np.uint8, np.float16]),
    hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3),
)
LEAF_SPACES = st.one_of(
    BOX,
    st.builds(spaces.Discrete, st.integers(1, 9), start=st.integers(-3, 3)),
    st.builds(spaces.MultiBinary, st.integers(1, 4)),
    st.builds(spaces.MultiDiscrete, st.lists(st.integers(2, 5), min_size=1, max_size=3)),
    st.builds(spaces.Text, st.integers(1, 4)),
    st.builds(lambda: spaces.Graph(spaces.Box(0, 1, (2,)), spaces.Discrete(3))),
    st.builds(Parity),  # a custom space: gymnasium batches it as a Tuple
)
SPACES = st.recursive(
    LEAF_SPACES,
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from("abcd"), inner, min_size=1, max_size=3).map(spaces.Dict),
        st.lists(inner, min_size=1, max_size=3).map(lambda items: spaces.Tuple(tuple(items))),
        st.builds(spaces.Sequence, inner),
        st.lists(inner, min_size=1, max_size=2).map(lambda items: spaces.OneOf(tuple(items))),
    ),
    max_leaves=4,
)


def same_value(mine: Any, theirs: Any, path: str = "value") -> None:
    """Equal values of the same types all the way down (dicts in the same key order,
    tuples, arrays of the same dtype and shape)."""
    if isinstance(theirs, spaces.GraphInstance):
        theirs, mine = tuple(theirs), tuple(mine)
    assert type(mine) is type(theirs), f"{path}: {type(mine)} is not {type(theirs)}"
    if isinstance(theirs, dict):
        assert list(mine) == list(theirs), path
        for key, value in theirs.items():
            same_value(mine[key], value, f"{path}[{key!r}]")
    elif isinstance(theirs, (tuple, list)):
        assert len(mine) == len(theirs), path
        for index, (a, b) in enumerate(zip(mine, theirs, strict=True)):
            same_value(a, b, f"{path}[{index}]")
    elif isinstance(theirs, np.ndarray) and theirs.dtype != object:
        assert (mine.dtype, mine.shape) == (theirs.dtype, theirs.shape), path
        np.testing.assert_array_equal(mine, theirs, err_msg=path)
    elif isinstance(theirs, np.ndarray):
        assert mine.shape == theirs.shape, path
        for index, item in enumerate(theirs.ravel()):
            same_value(mine.ravel()[index], item, f"{path}[{index}]")
    else:
        assert mine == theirs, path


@given(sizes=layouts(), space=SPACES, seed=st.integers(0, 2**31))
def test_a_batch_of_actions_reaches_every_env_as_gymnasium_splits_it(
    sizes: list[int], space: Any, seed: int
) -> None:
    layout = EnvLayout(sizes)
    num_envs = layout.num_envs
    action_space = batch_space(space, num_envs)
    action_space.seed(seed)
    actions = action_space.sample()
    per_env = list(iterate(action_space, actions))  # what SyncVectorEnv gives env i
    batches = VectorBatches(layout, space, space, _add_info(num_envs))
    worker_ids, requests = batches.step_requests(actions)
    received = []
    for worker_id, request in zip(worker_ids, requests, strict=True):
        if layout.batched:  # each worker splits its batch with its own batched space
            received += iterate(batch_space(space, sizes[worker_id]), request)
        else:
            received.append(request)
    assert len(received) == num_envs
    for env, (mine, theirs) in enumerate(zip(received, per_env, strict=True)):
        same_value(mine, theirs, f"env {env}'s action")


@given(
    sizes=layouts(),
    space=SPACES,
    seed=st.integers(0, 2**31),
    order=st.randoms(use_true_random=False),
)
def test_send_splits_the_actions_of_whole_workers_in_any_order(
    sizes: list[int], space: Any, seed: int, order: Any
) -> None:
    layout = EnvLayout(sizes)
    chosen = [w for w in range(len(sizes)) if order.random() < 0.7] or [0]
    env_ids = [env for w in chosen for env in range(layout.starts[w], layout.starts[w] + sizes[w])]
    order.shuffle(env_ids)
    action_space = batch_space(space, len(env_ids))
    action_space.seed(seed)
    actions = action_space.sample()
    per_env = dict(zip(env_ids, iterate(action_space, actions), strict=True))
    batches = VectorBatches(layout, space, space, _add_info(layout.num_envs))
    worker_ids, requests = batches.send_requests(actions, env_ids)
    expected = chosen if layout.batched else env_ids  # workers of one env are that env
    assert sorted(worker_ids) == sorted(expected)
    for worker_id, request in zip(worker_ids, requests, strict=True):
        if not layout.batched:
            same_value(request, per_env[worker_id], f"env {worker_id}'s action")
            continue
        lo = layout.starts[worker_id]
        rows = iterate(batch_space(space, sizes[worker_id]), request)
        for env, mine in enumerate(rows, lo):
            same_value(mine, per_env[env], f"env {env}'s action")


@given(sizes=layouts(), space=SPACES, seed=st.integers(0, 2**31), data=st.data())
def test_gathered_states_are_the_batch_sync_vector_env_makes(
    sizes: list[int], space: Any, seed: int, data: st.DataObject
) -> None:
    layout = EnvLayout(sizes)
    num_envs = layout.num_envs
    space.seed(seed)
    batches = VectorBatches(layout, space, space, _add_info(num_envs))
    latest: list[Any] = [None] * num_envs
    for _ in range(2):  # a step of every worker, then of some (a pipelined recv)
        workers = sorted(
            data.draw(st.sets(st.integers(0, len(sizes) - 1), min_size=1))
            if latest[0] is not None
            else range(len(sizes))
        )
        states = []
        for worker_id in workers:
            lo, size = layout.starts[worker_id], sizes[worker_id]
            observations = [space.sample() for _ in range(size)]
            latest[lo : lo + size] = observations
            rewards = np.arange(lo, lo + size, dtype=np.float64)
            flags = np.array([env % 2 == 0 for env in range(lo, lo + size)])
            if layout.batched:
                stacked = concatenate(space, observations, create_empty_array(space, size))
                states.append(BatchStep(stacked, rewards, flags, ~flags))
            else:
                states.append(_step(observations[0], rewards[0], flags[0]))
        observations, rewards, terminated, truncated, _ = batches.stepped(workers, states)
        expected = concatenate(space, latest, create_empty_array(space, num_envs))
        same_value(observations, expected, "observations")
        envs = [
            env for w in workers for env in range(layout.starts[w], layout.starts[w] + sizes[w])
        ]
        np.testing.assert_array_equal(rewards[envs], np.array(envs, np.float64))
        np.testing.assert_array_equal(terminated[envs], np.array(envs) % 2 == 0)
        np.testing.assert_array_equal(truncated[envs], np.array(envs) % 2 == 1)
        rows = np.array(data.draw(st.permutations(envs)), np.int64)
        same_value(
            batches.observations(rows),
            concatenate(space, [latest[i] for i in rows], create_empty_array(space, len(rows))),
            "observations of some rows",
        )


def _step(observation: Any, reward: float, terminated: bool) -> Any:
    return Step(observation, float(reward), bool(terminated), not terminated, {})


def _add_info(num_envs: int) -> Any:
    """gymnasium's ``VectorEnv._add_info`` for a vector env of ``num_envs`` envs."""
    return _Vector(num_envs)._add_info


class _Vector:
    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


# Infos --------------------------------------------------------------------------------
KEYS = st.sampled_from(["a", "b", "c", "d", "_a", "final_info"])
SCALARS = st.one_of(
    st.integers(-(2**31), 2**31),
    st.integers(2**62, 2**65),  # past int64: where gymnasium's own array raises
    st.floats(allow_nan=False),
    st.booleans(),
    st.builds(np.float32, st.floats(width=32, allow_nan=False)),
    st.builds(np.int8, st.integers(-128, 127)),
    st.builds(np.uint16, st.integers(0, 2**16 - 1)),
    st.builds(np.bool_, st.booleans()),
)
INFO_LEAVES = st.one_of(
    SCALARS,
    hnp.arrays(
        st.sampled_from([np.float32, np.int64, np.bool_, np.int16]),
        hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=2),
    ),
    st.text(max_size=2),
    st.none(),
    st.tuples(st.integers(0, 3), st.text(max_size=1)),
)
INFO_VALUES = st.recursive(
    INFO_LEAVES, lambda inner: st.dictionaries(KEYS, inner, max_size=3), max_leaves=5
)
#: One env's info: keys it has or not, values of any type, nested dicts.
INFOS = st.dictionaries(KEYS, INFO_VALUES, max_size=4)
#: Values of one type each: infos whose keys keep their type in every env (most envs').
TYPED = [
    st.integers(-(2**31), 2**31),
    st.floats(allow_nan=False),
    st.booleans(),
    st.builds(np.float32, st.floats(width=32, allow_nan=False)),
    st.builds(np.int8, st.integers(-128, 127)),
    hnp.arrays(np.float32, (2,), elements=st.floats(width=32, allow_nan=False)),
    st.text(max_size=2),
    st.dictionaries(st.sampled_from("xy"), st.floats(allow_nan=False), max_size=2),
]


@st.composite
def scripts(draw: st.DrawFn, num_envs: int, length: int) -> list[list[Any]]:
    """Each env's script of infos (and whether a step ends the episode): infos of any keys
    and values, or keys of one type each, which every env gives (the packed and joined
    forms) or some envs (masks)."""
    style = draw(st.sampled_from(["any", "every key", "some keys"]))
    if style == "any":
        infos = INFOS
    else:
        schema = draw(st.dictionaries(KEYS, st.integers(0, len(TYPED) - 1), max_size=4))

        @st.composite
        def infos(draw: st.DrawFn) -> dict[str, Any]:
            return {
                key: draw(TYPED[kind])
                for key, kind in schema.items()
                if style == "every key" or draw(st.booleans())
            }

        infos = infos()
    script = st.lists(st.tuples(infos, st.booleans()), min_size=1, max_size=length)
    return [draw(script) for _ in range(num_envs)]


class ScriptedInfos(gymnasium.Env[np.ndarray, int]):
    """Gives the infos of its script in turn (a copy each time), a reset's and a step's
    alike; a step ends the episode where the script says so."""

    observation_space = spaces.Box(-np.inf, np.inf, (1,), np.float64)
    action_space = spaces.Discrete(2)

    def __init__(self, script: list[tuple[dict[str, Any], bool]]) -> None:
        self.script = script
        self.calls = 0

    def _next(self) -> tuple[np.ndarray, dict[str, Any], bool]:
        info, ends = self.script[self.calls % len(self.script)]
        self.calls += 1
        return np.array([self.calls], np.float64), copy.deepcopy(info), ends

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        observation, info, _ = self._next()
        return observation, info

    def step(self, action: int) -> Any:
        observation, info, ends = self._next()
        return observation, 1.0, ends, False, info


def _outcome(call: Any) -> tuple[str, Any]:
    try:
        return "infos", call()
    except Exception as exc:
        return "raised", type(exc)


@given(
    sizes=layouts(5),
    data=st.data(),
    autoreset=st.sampled_from(list(AUTORESET)),
    steps=st.integers(1, 4),
    crossed=st.booleans(),
)
def test_grouped_infos_merge_into_exactly_gymnasiums(
    sizes: list[int], data: st.DataObject, autoreset: str, steps: int, crossed: bool
) -> None:
    per_env = data.draw(scripts(sum(sizes), steps + 1), label="the envs' infos")
    workers = data.draw(
        st.one_of(st.none(), st.sets(st.integers(0, len(sizes) - 1), min_size=1).map(sorted)),
        label="the workers received (None: every worker, in lockstep)",
    )
    assert_infos_merge_as_gymnasiums(sizes, per_env, autoreset, steps, crossed, workers)


def test_a_mask_key_that_holds_an_envs_own_info_is_left_to_gymnasium() -> None:
    """An env's ``_a`` (a dict) where gymnasium puts another env's ``a`` mask: gymnasium
    sets the mask item in that dict, and so must the merge of a vector-form group."""
    per_env = [[({"_a": {}}, False)], [({"a": None}, False)]]
    for crossed in (False, True):
        assert_infos_merge_as_gymnasiums([1, 1], per_env, "next_step", 1, crossed)


@pytest.mark.parametrize(
    ("sizes", "per_env"),
    [
        ([1, 1], [[({"a": None}, False)], [({"a": np.array(0.0, np.float32)}, False)]]),
        ([1, 2], [[({"_a": {}}, False)], [({}, False)], [({"a": np.array(False)}, False)]]),
    ],
)
def test_zero_dimensional_array_infos_stay_arrays_where_rows_are_replayed(
    sizes: list[int], per_env: list[Any]
) -> None:
    for crossed in (False, True):
        assert_infos_merge_as_gymnasiums(sizes, per_env, "next_step", 1, crossed)


def test_a_rows_zero_dimensional_array_info_crosses_a_process_as_an_array() -> None:
    runner = VectorRunner(
        VectorSource((functools.partial(ScriptedInfos, [({"a": np.array(1.5)}, False)]),) * 2),
        None,
        EpisodeOptions(),
    )
    try:
        batch = _crossed(runner.reset())
    finally:
        runner.close()
    for row in (0, 1):
        value = batch.infos[row]["a"]
        assert type(value) is np.ndarray and value.shape == () and value == 1.5


def assert_infos_merge_as_gymnasiums(
    sizes: list[int],
    per_env: list[Any],
    autoreset: str,
    steps: int,
    crossed: bool,
    workers: list[int] | None = None,
) -> None:
    """Groups of ``sizes`` envs of these scripts give, merged, what SyncVectorEnv gives;
    the groups ``workers`` alone (a pipelined ``recv``) what it gives where the other
    envs give no infos."""
    num_envs = sum(sizes)
    sources = [functools.partial(ScriptedInfos, per_env[i]) for i in range(num_envs)]
    layout = EnvLayout(sizes, batched=True)
    received = list(range(len(sizes))) if workers is None else workers
    silent = functools.partial(ScriptedInfos, [({}, False)])
    in_reference = {
        env for w in received for env in range(layout.starts[w], layout.starts[w] + sizes[w])
    }
    reference = SyncVectorEnv(
        [source if env in in_reference else silent for env, source in enumerate(sources)],
        autoreset_mode=AUTORESET[autoreset],
    )
    runners = []
    for lo, size in zip(layout.starts, sizes, strict=True):
        group = VectorSource(tuple(sources[lo : lo + size]))
        runners.append(VectorRunner(group, None, EpisodeOptions(autoreset=autoreset)))  # type: ignore[arg-type]
    try:
        for step in range(steps + 1):
            if step == 0:
                theirs = _outcome(lambda: reference.reset()[1])
                batches = [runner.reset() for runner in runners]
            else:
                theirs = _outcome(lambda: reference.step(np.zeros(num_envs, np.int64))[4])
                batches = [
                    runner.step(np.zeros(len(runner.runners), np.int64)) for runner in runners
                ]
            if currently_in_test_context():
                for batch in batches:
                    event(f"a group's infos {_form(batch)}")
            if crossed:  # through a process worker's wire
                batches = [_crossed(batch) for batch in batches]
            chosen = [batches[w] for w in received]
            merge = functools.partial(layout.infos_of, received, chosen, reference._add_info)
            mine = _outcome(merge)
            assert mine[0] == theirs[0], f"step {step}: {mine} but gymnasium's {theirs}"
            if theirs[0] == "raised":
                assert mine[1] is theirs[1], f"step {step}"
                return  # gymnasium's vector env cannot go on either
            assert_identical(mine[1], theirs[1], f"step {step}")
    finally:
        reference.close()
        for runner in runners:
            runner.close()


def _form(batch: BatchStep[Any]) -> str:
    fields = batch.__dict__
    if fields.get("packed_infos") is not None:
        return "packed"
    return "per row" if fields.get("vector_infos") is None else "in vector form"


def _crossed(batch: BatchStep[Any]) -> BatchStep[Any]:
    return decode_batch_step(encode_batch_step(1, batch)[HEADER.size :])


#: Infos whose keys include ``final_obs`` (at any depth), which the rule treats apart.
KEYS_AND_FINAL = st.sampled_from(["a", "b", "_a", "final_obs", "final_info"])
INFOS_AND_FINAL = st.dictionaries(
    KEYS_AND_FINAL,
    st.recursive(
        INFO_LEAVES, lambda inner: st.dictionaries(KEYS_AND_FINAL, inner, max_size=3), max_leaves=5
    ),
    max_size=4,
)


@given(
    num_envs=st.integers(1, 5),
    entries=st.lists(st.tuples(st.integers(0, 4), INFOS_AND_FINAL), max_size=6),
)
def test_adding_an_envs_info_is_gymnasiums_rule(
    num_envs: int, entries: list[tuple[int, dict[str, Any]]]
) -> None:
    """aioenv's own rule of adding one env's info to the vector infos
    (:func:`aioenv.env_side._infos.add_info`) gives what gymnasium's private
    ``VectorEnv._add_info`` gives, entry after entry, or fails where it fails."""
    ours: dict[Any, Any] = {}
    theirs: dict[Any, Any] = {}
    gymnasiums = _add_info(num_envs)
    for row, info in entries:
        row %= num_envs
        mine = _outcome(functools.partial(add_info, num_envs, ours, copy.deepcopy(info), row))
        reference = _outcome(functools.partial(gymnasiums, theirs, copy.deepcopy(info), row))
        assert mine[0] == reference[0], (mine, reference)
        if mine[0] == "raised":
            assert mine[1] is reference[1]
            return
        assert_identical(mine[1], reference[1])
        ours, theirs = mine[1], reference[1]
