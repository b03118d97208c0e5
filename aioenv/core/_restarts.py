"""How a restart shows in the states a pool hands out: the restarted env's first state
carries a note under aioenv's own info key, ``info["aioenv"] == {"restarted": True,
"reason": "..."}`` (documented in the failures guide). The worker writes it; the episode
counter and the collector read it; this module is the one place that knows its shape."""

from __future__ import annotations

import dataclasses
from typing import Any

from ._environment import BatchStep, Step

__all__ = ["RESTART_KEY", "mark_restarted", "restart_note"]

#: The info key a restarted env's first state is marked under.
RESTART_KEY = "aioenv"


def mark_restarted(state: Any, note: str) -> Any:
    """The restarted env's first state, its info saying so with the restart's reason
    ``note`` (every row's, for a batch); any other state unchanged."""
    marker = {"restarted": True, "reason": note}
    if isinstance(state, Step):
        return dataclasses.replace(state, info={**state.info, RESTART_KEY: marker})
    if isinstance(state, BatchStep):
        infos = {
            row: {**state.infos.get(row, {}), RESTART_KEY: marker} for row in range(len(state))
        }
        # The batch's vector-form infos would no longer match its rows: dropped, the
        # vector env then merges the rows' own infos.
        return dataclasses.replace(state, infos=infos, vector_infos=None, info_types=None)
    return state


def restart_note(state: Step[Any]) -> str | None:
    """The reason the env was restarted if ``state`` is a restarted env's first state,
    else None."""
    marker = state.info.get(RESTART_KEY)
    if isinstance(marker, dict) and marker.get("restarted"):
        return str(marker.get("reason", ""))
    return None
