"""Which Ray the parent's side uses: the module, imported when the first Ray worker is made
(never by ``import aioenv``), and the cluster, joined or started once per process."""

from __future__ import annotations

import importlib
import os
from typing import Any

__all__ = ["LOCAL_RAY_DEFAULTS", "import_ray", "init_ray"]

#: ``ray.init`` defaults when aioenv starts Ray itself: a laptop, not a cluster.
LOCAL_RAY_DEFAULTS: dict[str, Any] = {
    "include_dashboard": False,
    "object_store_memory": 256 * 1024**2,
    "log_to_driver": True,
}


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError saying what to install."""
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ImportError(
            "Ray workers need Ray, which is not installed: pip install 'aioenv[ray]'"
        ) from exc


def init_ray(ray: Any) -> None:
    """Start a local Ray instance (:data:`LOCAL_RAY_DEFAULTS`, usage stats off) unless Ray
    is initialised already (``ray.init(address=...)``: that cluster is used) or
    ``RAY_ADDRESS`` names a cluster to join."""
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # joins that cluster, which has its own settings
    else:
        ray.init(**LOCAL_RAY_DEFAULTS)
