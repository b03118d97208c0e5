"""The JSON that ``aioenv serve`` and :class:`aioenv.RemoteEnv` exchange over OpenEnv's
protocol: values as JSON can carry them (numpy arrays as lists), a JSON action as the env
takes it, and gymnasium spaces written into the JSON schema the server publishes at
``/schema`` (under :data:`SPACE_KEY`), so a client rebuilds them.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium
import numpy as np

__all__ = ["SPACE_KEY", "value_from_json", "jsonable", "space_from_schema", "space_schema"]

#: The schema key that carries a gymnasium space's description.
SPACE_KEY = "x-aioenv-space"


def jsonable(value: Any) -> Any:
    """``value`` as JSON can carry it: numpy arrays as (nested) lists, numpy scalars as
    Python numbers, tuples as lists, mapping keys as strings; anything else JSON cannot
    hold as its ``repr``."""
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)  # JSON has no nan or infinity
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        return {str(key): jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(item) for item in value]
    return repr(value)


def value_from_json(value: Any, space: Any) -> Any:
    """A JSON value as a value of ``space``: an array space's (Box, MultiDiscrete,
    MultiBinary) as a numpy array of its dtype, a Dict's and a Tuple's parts each as its
    subspace's (a Tuple's as a tuple), any other list as a numpy array."""
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Dict) and isinstance(value, dict):
        parts = space.spaces
        return {k: value_from_json(v, parts[k]) if k in parts else v for k, v in value.items()}
    if isinstance(space, spaces.Tuple) and isinstance(value, list):
        return tuple(value_from_json(v, part) for v, part in zip(value, space, strict=False))
    if isinstance(value, list) or isinstance(space, _ARRAY_SPACES):
        return np.asarray(value, dtype=getattr(space, "dtype", None))
    return value


_ARRAY_SPACES = (gymnasium.spaces.Box, gymnasium.spaces.MultiDiscrete, gymnasium.spaces.MultiBinary)


def space_schema(space: Any) -> dict[str, Any]:
    """A JSON schema for values of gymnasium ``space``, with the space itself under
    :data:`SPACE_KEY` where it is one :func:`space_from_schema` rebuilds (Box, Discrete,
    MultiDiscrete, MultiBinary, and Dict/Tuple of those); ``{}`` (any value) otherwise."""
    described = _describe_space(space)
    if described is None:
        return {}
    return {**_value_schema(described), SPACE_KEY: described}


def space_from_schema(schema: Any) -> gymnasium.Space[Any] | None:
    """The gymnasium space ``schema`` describes under :data:`SPACE_KEY`, else None."""
    if not isinstance(schema, dict) or not isinstance(schema.get(SPACE_KEY), dict):
        return None
    return _build_space(schema[SPACE_KEY])


def _describe_space(space: Any) -> dict[str, Any] | None:
    spaces = gymnasium.spaces
    if isinstance(space, spaces.Discrete):
        return {"kind": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.Box):
        return {
            "kind": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            "low": jsonable(space.low),
            "high": jsonable(space.high),
        }
    if isinstance(space, spaces.MultiDiscrete):
        nvec, start = jsonable(space.nvec), jsonable(space.start)
        return {"kind": "MultiDiscrete", "nvec": nvec, "start": start, "dtype": str(space.dtype)}
    if isinstance(space, spaces.MultiBinary):
        return {"kind": "MultiBinary", "n": jsonable(space.n)}
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        items = space.spaces.items() if isinstance(space, spaces.Dict) else enumerate(space)
        parts = {str(key): _describe_space(sub) for key, sub in items}
        if any(part is None for part in parts.values()):
            return None
        kind = "Dict" if isinstance(space, spaces.Dict) else "Tuple"
        return {"kind": kind, "spaces": parts}
    return None


def _value_schema(described: dict[str, Any]) -> dict[str, Any]:
    kind = described["kind"]
    if kind == "Discrete":
        first = described["start"]
        return {"type": "integer", "minimum": first, "maximum": first + described["n"] - 1}
    if kind == "Dict":
        properties = {k: _value_schema(v) for k, v in described["spaces"].items()}
        return {"type": "object", "properties": properties}
    if kind == "Tuple":
        return {
            "type": "array",
            "prefixItems": [_value_schema(v) for v in described["spaces"].values()],
        }
    return {"type": "array"}  # Box, MultiDiscrete, MultiBinary: (nested) lists of numbers


def _build_space(described: dict[str, Any]) -> gymnasium.Space[Any] | None:
    spaces = gymnasium.spaces
    kind = described.get("kind")
    if kind == "Discrete":
        return spaces.Discrete(described["n"], start=described.get("start", 0))
    if kind == "Box":
        dtype = np.dtype(described["dtype"])
        # Read as the dtype, so an integer bound is exact; jsonable() writes infinite bounds
        # as their repr ('inf', '-inf'), which numpy reads.
        low, high = (np.asarray(described[end], dtype=dtype) for end in ("low", "high"))
        return spaces.Box(low, high, tuple(described["shape"]), dtype)
    if kind == "MultiDiscrete":
        nvec, start = np.asarray(described["nvec"]), described.get("start")
        return spaces.MultiDiscrete(nvec, dtype=described["dtype"], start=start)
    if kind == "MultiBinary":
        return spaces.MultiBinary(described["n"])
    if kind in ("Dict", "Tuple"):
        parts = {key: _build_space(part) for key, part in described["spaces"].items()}
        if any(part is None for part in parts.values()):
            return None
        if kind == "Dict":
            return spaces.Dict(parts)  # type: ignore[arg-type]
        return spaces.Tuple(list(parts.values()))  # type: ignore[arg-type]
    return None
