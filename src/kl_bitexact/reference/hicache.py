"""The host tier of the hierarchical cache: pages and checkpoints serialized to bytes.

Evicted device pages move here instead of being dropped; a later hit reloads them. With
`write_through` a page is copied to the host when it is cached, with `write_back` only when
it is evicted. A clean round trip is bit-exact; the `hicache-lossy` fault stores float16.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from kl_bitexact.reference.numerics import Array


@dataclass(frozen=True)
class PagePayload:
    """What one cached page holds on the device."""

    full_kv: Array  # (full layers, 2, page, head_dim)
    window_kv: Array | None  # (window layers, 2, page, head_dim); None once released
    checkpoint: Array | None  # recurrent state after the page's last token, if tracked


@dataclass(frozen=True)
class HostPage:
    """A page serialized into host memory."""

    blob: bytes
    has_window: bool
    has_checkpoint: bool


def to_host(payload: PagePayload, lossy: bool) -> HostPage:
    arrays = [payload.full_kv, payload.window_kv, payload.checkpoint]
    present = [array for array in arrays if array is not None]
    buffer = io.BytesIO()
    stored = [array.astype(np.float16) if lossy else array for array in present]
    np.savez(buffer, *stored, dtype=np.array(str(payload.full_kv.dtype)))
    return HostPage(
        blob=buffer.getvalue(),
        has_window=payload.window_kv is not None,
        has_checkpoint=payload.checkpoint is not None,
    )


def from_host(page: HostPage) -> PagePayload:
    with np.load(io.BytesIO(page.blob)) as archive:
        dtype = np.dtype(str(archive["dtype"]))
        arrays = [archive[f"arr_{i}"].astype(dtype) for i in range(len(archive.files) - 1)]
    full_kv = arrays.pop(0)
    window_kv = arrays.pop(0) if page.has_window else None
    checkpoint = arrays.pop(0) if page.has_checkpoint else None
    return PagePayload(full_kv=full_kv, window_kv=window_kv, checkpoint=checkpoint)
