"""Render 8 CartPoles as one tiled image and save it as a PNG.

Run with ``python examples/render_tiled.py [out.png]`` (needs pygame:
``pip install "gymnasium[classic-control]"``, part of the dev extras).
"""

from __future__ import annotations

import asyncio
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

import gymnasium
import numpy as np

import aioenv


def cartpole() -> gymnasium.Env[Any, Any]:
    return gymnasium.make("CartPole-v1", render_mode="rgb_array")


def write_png(path: Path, image: np.ndarray[Any, Any]) -> None:
    """An 8-bit RGB PNG: signature, IHDR, one zlib-compressed IDAT, IEND."""
    height, width, _ = image.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8), image.reshape(height, -1)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
    png += chunk(b"IDAT", zlib.compress(rows.tobytes(), 6)) + chunk(b"IEND", b"")
    path.write_bytes(png)


async def main(out: Path) -> None:
    async with aioenv.make_pool(cartpole, 8, mode="process") as pool:
        await pool.reset_all(seed=0)
        for step in range(10):  # push every cart a little so the frames differ
            for worker_id in range(len(pool)):
                pool.send_action((worker_id + step) % 2, worker_id)
            await pool.get_batch(min_size=len(pool))
        image = await pool.render(mode="rgb_array", tiled=True)
    write_png(out, image)
    print(f"saved {image.shape[1]}x{image.shape[0]} tiled frame of 8 CartPoles to {out}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "cartpoles.png")))
