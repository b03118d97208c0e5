"""Infos of grouped workers, built in gymnasium's vector form where the envs run and merged
with a slice per key: identical to SyncVectorEnv's (key order, dtypes, masks, the type of
every object), and the per-row infos of a BatchStep that crossed a process as they were."""

from __future__ import annotations

import functools
import pickle
from typing import Any

import numpy as np
import pytest
from envs import InfoZoo
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv

import aioenv
from aioenv.core._environment import BatchStep, VectorSource
from aioenv.core._infos import Mixed
from aioenv.core._messages import EpisodeOptions
from aioenv.core._restarts import mark_restarted
from aioenv.env_side._infos import flat_infos, group_infos
from aioenv.env_side._vector_runner import VectorRunner
from aioenv.wire._frames import HEADER, decode_batch_step, encode_batch_step

N = 4
AUTORESET = {"next_step": AutoresetMode.NEXT_STEP, "same_step": AutoresetMode.SAME_STEP}


def assert_identical(
    ours: dict[Any, Any], theirs: dict[Any, Any], path: str = "infos", ordered: bool = True
) -> None:
    """The same keys (in the same order, if ``ordered``), arrays of the same dtype and
    shape, the same type for every item of an object array."""
    if ordered:
        assert list(ours) == list(theirs), path
    assert ours.keys() == theirs.keys(), path
    for key, value in theirs.items():
        assert_same_item(ours[key], value, f"{path}[{key!r}]", ordered)


def assert_same_item(mine: Any, reference: Any, path: str, ordered: bool = True) -> None:
    assert type(mine) is type(reference), path
    if isinstance(reference, dict):
        assert_identical(mine, reference, path, ordered)
    elif isinstance(reference, np.ndarray):
        assert (mine.dtype, mine.shape) == (reference.dtype, reference.shape), path
        if reference.dtype == object:
            for index, item in enumerate(reference.ravel()):
                assert_same_item(mine.ravel()[index], item, f"{path}[{index}]")
        else:
            np.testing.assert_array_equal(mine, reference, err_msg=path)
    else:
        assert mine == reference, path


def zoo(infos: str = "varied") -> list[Any]:
    return [functools.partial(InfoZoo, i, infos) for i in range(N)]


@pytest.mark.parametrize("autoreset", list(AUTORESET))
@pytest.mark.parametrize(
    ("mode", "per_worker", "infos"),
    [
        ("process", 2, "varied"),
        ("process", 4, "varied"),
        ("thread", 2, "varied"),
        ("process", 2, "quirks"),
        ("process", 2, "uniform"),
        ("thread", 4, "uniform"),
        ("process", 2, "flat"),
        ("process", 4, "flat"),
        ("sync", 2, "flat"),
    ],
)
def test_grouped_infos_are_sync_vector_envs_to_the_last_type(
    mode: str, per_worker: int, infos: str, autoreset: str
) -> None:
    reference = SyncVectorEnv(zoo(infos), autoreset_mode=AUTORESET[autoreset])
    ours = aioenv.AioVectorEnv(
        zoo(infos), mode=mode, envs_per_worker=per_worker, autoreset_mode=autoreset
    )
    try:
        assert ours.group_sizes == (per_worker,) * (N // per_worker)
        mine, theirs = ours.reset(seed=3), reference.reset(seed=3)
        assert_identical(mine[1], theirs[1])
        seen: set[str] = set()
        for step in range(24):
            actions = np.zeros(N, np.int64)
            a, b = ours.step(actions), reference.step(actions)
            np.testing.assert_array_equal(a[0], b[0])
            assert_identical(a[4], b[4], f"step {step}")
            seen.update(b[4])
        assert {"np64", "_np64", "episodes"} <= seen
        if autoreset == "same_step":
            assert "final_obs" in seen
        elif infos != "flat":
            assert "episode" in seen
        if infos in ("varied", "quirks"):
            assert {"shape_shifter", "sometimes", "start"} <= seen
    finally:
        ours.close()
        reference.close()


def stepped(autoreset: str, steps: int, infos: str = "varied") -> list[BatchStep[Any]]:
    """A VectorRunner's batches over ``N`` InfoZoo envs, in this process."""
    runner = VectorRunner(
        VectorSource(tuple(zoo(infos))),
        0,
        EpisodeOptions(autoreset=autoreset),  # type: ignore[arg-type]
    )
    batches = [runner.reset()]
    batches += [runner.step(np.zeros(N, np.int64)) for _ in range(steps)]
    runner.close()
    return batches


def envs_own_infos(autoreset: str, steps: int, style: str) -> list[tuple[Any, Any, Any]]:
    """Per step, the infos each env returned: (infos, final observations, final infos)."""
    envs = [InfoZoo(i, style) for i in range(N)]
    out = []
    resets = [env.reset(seed=i) for i, env in enumerate(envs)]
    out.append(({i: info for i, (_, info) in enumerate(resets)}, {}, {}))
    pending = [False] * N
    for _ in range(steps):
        infos, finals, final_infos = {}, {}, {}
        for i, env in enumerate(envs):
            if pending[i]:
                pending[i] = False
                infos[i] = env.reset()[1]
                continue
            observation, _, terminated, _, info = env.step(0)
            if terminated and autoreset == "same_step":
                finals[i], final_infos[i] = observation, info
                info = env.reset()[1]
            pending[i] = terminated and autoreset == "next_step"
            infos[i] = info
        out.append((infos, finals, final_infos))
    return out


@pytest.mark.parametrize("infos_style", ["varied", "flat"])
@pytest.mark.parametrize("autoreset", list(AUTORESET))
def test_a_batch_that_crossed_a_process_gives_each_rows_infos_as_they_were(
    autoreset: str, infos_style: str
) -> None:
    expected = envs_own_infos(autoreset, 16, infos_style)
    batches = stepped(autoreset, 16, infos_style)
    packed = [batch.packed_infos is not None for batch in batches]
    assert any(packed) == (infos_style == "flat") and not all(packed)
    for batch, (infos, finals, final_infos) in zip(batches, expected, strict=True):
        decoded = decode_batch_step(encode_batch_step(1, batch)[HEADER.size :])
        assert "infos" not in decoded.__dict__  # derived only when read
        assert decoded.packed_infos == batch.packed_infos
        assert batch.vector_infos is not None and decoded.vector_infos is not None
        assert_identical(decoded.vector_infos, batch.vector_infos)
        for view in (batch, decoded):
            assert view.infos.keys() == infos.keys()
            for row, info in infos.items():  # a derived row's keys: in the batch's order
                assert_identical(view.infos[row], info, f"row {row}", view is batch)
            assert view.final_infos.keys() == final_infos.keys() == view.final_observations.keys()
            for row, info in final_infos.items():
                assert_identical(view.final_infos[row], info, f"final {row}", view is batch)
                np.testing.assert_array_equal(view.final_observations[row], finals[row])


def test_the_vector_form_is_gymnasiums_for_the_groups_envs() -> None:
    """``vector_infos`` is what a SyncVectorEnv of the group's envs alone returns."""
    reference = SyncVectorEnv(zoo(), autoreset_mode=AutoresetMode.SAME_STEP)
    try:
        theirs = [reference.reset(seed=0)[1]]
        theirs += [reference.step(np.zeros(N, np.int64))[4] for _ in range(12)]
    finally:
        reference.close()
    for step, (batch, infos) in enumerate(zip(stepped("same_step", 12), theirs, strict=True)):
        assert_identical(batch.vector_infos, infos, f"step {step}")


def test_keys_with_values_of_several_types_keep_each_value() -> None:
    grouped = group_infos([(0, {"k": 1}), (1, {"k": 2.5}), (2, {"k": np.int8(3)})], 4)
    assert grouped is not None
    infos, kinds = grouped
    assert kinds[("k",)] == Mixed((0, 1, 2), (1, 2.5, np.int8(3)))
    assert infos["k"].dtype == np.int64 and infos["k"].tolist() == [1, 2, 3, 0]
    assert infos["_k"].tolist() == [True, True, True, False]


@pytest.mark.parametrize(
    "entries",
    [
        [(0, {"_private": 1})],
        [(0, {"nested": {"_x": 1}})],
        [(1, {"final_obs": 0, "final_info": {}}), (1, {"final_info": {"own": 1}})],
        [(0, {"big": 2**70}), (1, {"big": 1.0})],  # gymnasium raises: it must do so itself
    ],
)
def test_infos_only_the_per_env_path_gets_right_are_not_grouped(
    entries: list[tuple[int, dict[str, Any]]],
) -> None:
    assert group_infos(entries, 2) is None


def test_a_group_whose_info_has_its_own_final_info_sends_rows() -> None:
    batches = stepped("same_step", 12, "quirks")
    assert any(batch.vector_infos is None and batch.infos for batch in batches)
    assert any(batch.vector_infos for batch in batches)


def test_a_packed_batch_stays_packed_when_copied_and_per_row_when_marked() -> None:
    batch = next(b for b in stepped("next_step", 4, "flat") if b.packed_infos is not None)
    decoded = decode_batch_step(encode_batch_step(1, batch)[HEADER.size :])
    owned = decoded.owned()
    assert owned.packed_infos == batch.packed_infos and "vector_infos" not in owned.__dict__
    assert owned.observations is not decoded.observations
    np.testing.assert_array_equal(owned.observations, batch.observations)
    assert_identical(owned.vector_infos, batch.vector_infos)
    marked = mark_restarted(decoded, "a test")
    assert marked.packed_infos is None and marked.vector_infos is None
    assert marked.infos[0]["aioenv"] == {"restarted": True, "reason": "a test"}
    assert marked.infos[0]["np64"] == batch.infos[0]["np64"]
    assert list(pickle.loads(pickle.dumps(decoded)).infos) == list(batch.infos)


@pytest.mark.parametrize(
    "infos",
    [
        [{"a": 1.0, "b": 2}, {"b": 2, "a": 1.0}],  # the same keys in another order
        [{"a": 1}, {"a": np.int64(1)}],  # one dtype, two types
        [{"a": 2**70}, {"a": 1}],
        [{"_a": 1.0}, {"_a": 2.0}],
        [{"a": np.bool_(True)}, {"a": np.bool_(False)}],  # gymnasium keeps these as objects
        [{"a": "text"}, {"a": "more"}],
    ],
)
def test_only_flat_scalars_with_one_layout_are_packed(infos: list[dict[str, Any]]) -> None:
    assert flat_infos(infos) is None


def test_packed_infos_expand_to_the_vector_form() -> None:
    infos = [
        {"a": 1.5, "b": np.float32(2), "c": 3, "d": True},
        {"a": 0.5, "b": np.float32(1), "c": 4, "d": False},
    ]
    packed = flat_infos(infos)
    assert packed is not None
    vector, kinds = packed.expanded()
    grouped = group_infos(list(enumerate(infos)), 2)
    assert grouped is not None
    assert_identical(vector, grouped[0])
    assert kinds == grouped[1] == {("a",): float, ("b",): np.float32, ("c",): int, ("d",): bool}


class _Vector:
    """What gymnasium's ``VectorEnv._add_info`` reads of its vector env (itself, for
    nested dicts)."""

    _add_info = VectorEnv._add_info

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


class _EnvModel:
    """One InfoZoo env stepped as a vector env's autoreset steps it: what it gives next
    (its info, and the final observation and info where same-step autoreset ended an
    episode)."""

    def __init__(self, index: int, style: str, autoreset: str) -> None:
        self.env, self.autoreset, self.pending = InfoZoo(index, style), autoreset, False
        self.first: dict[str, Any] | None = self.env.reset(seed=index)[1]

    def next(self) -> tuple[dict[str, Any], Any]:
        if self.first is not None:
            info, self.first = self.first, None
            return info, None
        if self.pending:
            self.pending = False
            return self.env.reset()[1], None
        observation, _, terminated, _, info = self.env.step(0)
        if terminated and self.autoreset == "same_step":
            return self.env.reset()[1], {"final_obs": observation, "final_info": info}
        self.pending = terminated and self.autoreset == "next_step"
        return info, None


def _rows_of(infos: dict[Any, Any], rows: list[int]) -> dict[Any, Any]:
    """Vector infos cut down to ``rows``: each array's rows; what is no array (gymnasium
    sets an env's number into a dict another env made of the key) as it is."""
    return {
        key: _rows_of(value, rows)
        if type(value) is dict
        else value[rows]
        if isinstance(value, np.ndarray)
        else value
        for key, value in infos.items()
    }


@pytest.mark.parametrize("infos_style", ["varied", "quirks", "uniform", "flat"])
@pytest.mark.parametrize("autoreset", list(AUTORESET))
@pytest.mark.parametrize(
    ("mode", "per_worker", "batch_size"),
    [("process", 2, 2), ("process", 2, 4), ("process", 1, 2), ("thread", 2, 2), ("thread", 1, 3)],
)
def test_a_recv_gives_gymnasiums_infos_of_its_envs(
    mode: str,
    per_worker: int,
    batch_size: int,
    autoreset: str,
    infos_style: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A recv's infos are what gymnasium's ``_add_info`` makes of its envs' own infos
    (each env at its own step: the pipelined envs need not keep in step), over the
    vector env's indices, cut down to the recv's rows; also where the workers' forms
    are joined as they are (whole workers, one kind per key)."""
    from aioenv.vector._layout import EnvLayout

    joined: list[bool] = []
    joined_rows = EnvLayout.joined_rows

    def spied(batches: list[BatchStep[Any]]) -> dict[str, Any] | None:
        infos = joined_rows(batches)
        joined.append(infos is not None)
        return infos

    monkeypatch.setattr(EnvLayout, "joined_rows", staticmethod(spied))
    rounds = 14
    models = [_EnvModel(i, infos_style, autoreset) for i in range(N)]
    taken = [0] * N  # how many results of each env were taken
    add_info = _Vector(N)._add_info
    ours = aioenv.AioVectorEnv(
        zoo(infos_style),
        mode=mode,
        envs_per_worker=per_worker,
        autoreset_mode=autoreset,
        batch_size=batch_size,
    )
    try:
        ours.async_reset(seed=0)
        call = 0
        while min(taken) <= rounds:  # every env's reset and 14 steps at least
            *_, infos = ours.recv()
            rows = infos.pop("env_id").tolist()
            reference: dict[str, Any] = {}
            for row in rows:
                info, final = models[row].next()
                if final is not None:
                    reference = add_info(reference, final, row)
                reference = add_info(reference, info, row)
                taken[row] += 1
            assert_identical(infos, _rows_of(reference, rows), f"recv {call}, envs {rows}")
            ours.send(np.zeros(len(rows), np.int64), rows)
            call += 1
    finally:
        ours.close()
    if mode == "process" and per_worker > 1 and infos_style in ("uniform", "flat"):
        assert any(joined)  # the joined path was taken
