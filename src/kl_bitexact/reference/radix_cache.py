"""A radix prefix cache with sglang's geometry for hybrid models.

The tree holds whole pages of `page_size` tokens. A prefix is reusable only up to a page
boundary where (1) every page on the way is cached, (2) a recurrent-state checkpoint was
saved exactly there, and (3) the sliding-window keys of the `window - 1` positions before
it are still held. Checkpoints are taken only at chunk and track-interval positions, so a
track interval that is not a multiple of the page size, or larger than a turn's output,
loses hits - the geometry lesson of sglang PR 34405. Over the token budget, the least
recently used unreferenced leaves are evicted (to the host tier when it is enabled).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from kl_bitexact.reference.faults import Fault
from kl_bitexact.reference.hicache import HostPage, PagePayload, from_host, to_host
from kl_bitexact.reference.numerics import Array
from kl_bitexact.reference.sequence import SequenceState


@dataclass(frozen=True)
class CacheGeometry:
    page_size: int
    sliding_window: int
    max_total_tokens: int
    hierarchical: bool = False
    write_through: bool = True
    host_ratio: float = 2.0
    faults: frozenset[Fault] = frozenset()


@dataclass(frozen=True)
class PrefixMatch:
    """A reusable prefix: `length` tokens, their pages, and the state to resume from."""

    length: int
    pages: tuple[PagePayload, ...]
    checkpoint: Array | None
    window_start: int
    from_host: int = 0  # tokens of `length` reloaded from the host tier


NO_MATCH = PrefixMatch(length=0, pages=(), checkpoint=None, window_start=0)


class Node:
    __slots__ = ("children", "device", "end", "host", "last_access", "page", "parent")

    def __init__(self, page: tuple[int, ...], parent: Node | None, end: int) -> None:
        self.page = page
        self.parent = parent
        self.end = end
        self.children: dict[tuple[int, ...], Node] = {}
        self.device: PagePayload | None = None
        self.host: HostPage | None = None
        self.last_access = 0

    @property
    def has_checkpoint(self) -> bool:
        if self.device is not None:
            return self.device.checkpoint is not None
        return self.host is not None and self.host.has_checkpoint

    @property
    def has_window(self) -> bool:
        if self.device is not None:
            return self.device.window_kv is not None
        return self.host is not None and self.host.has_window

    def has_device_children(self) -> bool:
        return any(child.device is not None for child in self.children.values())


class RadixCache:
    def __init__(self, geometry: CacheGeometry) -> None:
        self.geometry = geometry
        self._clock = itertools.count(1)
        self.flush()

    def flush(self) -> None:
        self.root = Node((), None, 0)
        self.device_pages = 0
        self.host_pages = 0

    @property
    def device_tokens(self) -> int:
        return self.device_pages * self.geometry.page_size

    # ---- lookup -------------------------------------------------------------------------

    def match(self, tokens: Sequence[int], limit: int) -> PrefixMatch:
        """The longest reusable prefix of `tokens` no longer than `limit` tokens."""
        path, diverged = self._walk(tokens, limit)
        found = self._best(path)
        if diverged and path and self._faulty(Fault.BRANCH_CHECKPOINT_REUSE):
            borrowed = self._sibling_checkpoint(path[-1])
            if borrowed is not None and self._window_ok(path, path[-1].end):
                found = (len(path), borrowed)
        if found is None:
            return NO_MATCH
        pages, checkpoint_node = found
        reloaded = sum(1 for node in path[:pages] if node.device is None)
        payloads = tuple(self._load(node) for node in path[:pages])
        checkpoint = self._load(checkpoint_node).checkpoint
        self._evict()
        size = self.geometry.page_size
        length = pages * size
        window = self._window_from(length)
        return PrefixMatch(length, payloads, checkpoint, window, reloaded * size)

    def _walk(self, tokens: Sequence[int], limit: int) -> tuple[list[Node], bool]:
        size = self.geometry.page_size
        node, now = self.root, next(self._clock)
        path: list[Node] = []
        for index in range(min(limit, len(tokens)) // size):
            child = node.children.get(tuple(tokens[index * size : (index + 1) * size]))
            if child is None:
                return path, True
            child.last_access = now
            path.append(child)
            node = child
        return path, False

    def _best(self, path: list[Node]) -> tuple[int, Node] | None:
        for pages in range(len(path), 0, -1):
            node = path[pages - 1]
            if node.has_checkpoint and self._window_ok(path, node.end):
                return pages, node
        return None

    def _window_ok(self, path: list[Node], end: int) -> bool:
        first = self._window_from(end) // self.geometry.page_size
        return all(node.has_window for node in path[first : end // self.geometry.page_size])

    def _window_from(self, end: int) -> int:
        """Start of the first page whose window keys a resume at `end` needs."""
        size = self.geometry.page_size
        needed = max(0, end - self.geometry.sliding_window + 1)
        if self._faulty(Fault.SWA_EARLY_RELEASE):
            needed = -(-needed // size) * size
        return needed // size * size

    def _sibling_checkpoint(self, node: Node) -> Node | None:
        """The nearest checkpoint below `node` (only the branch-checkpoint-reuse fault asks)."""
        frontier = list(node.children.values())
        while frontier:
            for candidate in frontier:
                if candidate.has_checkpoint:
                    return candidate
            frontier = [child for parent in frontier for child in parent.children.values()]
        return None

    def _load(self, node: Node) -> PagePayload:
        if node.device is None:
            assert node.host is not None, "a cached node is on the device or the host"
            node.device = from_host(node.host)
            if self._faulty(Fault.RESTORE_AFTER_EVICTION) and len(node.children) > 1:
                node.device = _one_slot_late(node.device)
            self.device_pages += 1
        return node.device

    # ---- insertion ----------------------------------------------------------------------

    def insert(
        self, tokens: Sequence[int], state: SequenceState, checkpoints: dict[int, Array]
    ) -> None:
        """Cache the whole pages of the `state.length` fed tokens of `tokens`."""
        size = self.geometry.page_size
        windowed = set(self._retained_pages(checkpoints))
        node, now = self.root, next(self._clock)
        for index in range(state.length // size):
            start, end = index * size, (index + 1) * size
            window = None
            if index in windowed and start >= state.window_start:
                window = state.window_kv[:, :, start:end].copy()
            child = node.children.get(tuple(tokens[start:end]))
            if child is None:
                child = self._create(node, tuple(tokens[start:end]), end)
                child.device = PagePayload(
                    state.full_kv[:, :, start:end].copy(), window, checkpoints.get(end)
                )
                self._written(child)
            else:
                self._enrich(child, window, checkpoints.get(end))
            child.last_access = now
            node = child
        self._evict()

    def _retained_pages(self, checkpoints: dict[int, Array]) -> Iterator[int]:
        """Pages whose sliding-window keys a resume at some checkpoint needs; the rest are
        released, as sglang frees window slots that fall out of every window."""
        size = self.geometry.page_size
        for end in checkpoints:
            if end % size == 0:
                yield from range(self._window_from(end) // size, end // size)

    def _create(self, parent: Node, page: tuple[int, ...], end: int) -> Node:
        child = Node(page, parent, end)
        parent.children[page] = child
        self.device_pages += 1
        return child

    def _enrich(self, node: Node, window: Array | None, checkpoint: Array | None) -> None:
        if node.device is None:
            return
        changes = {}
        if window is not None and node.device.window_kv is None:
            changes["window_kv"] = window
        if checkpoint is not None and node.device.checkpoint is None:
            changes["checkpoint"] = checkpoint
        if changes:
            node.device = dataclasses.replace(node.device, **changes)
            if node.host is not None:
                self.host_pages -= 1
                node.host = None
            self._written(node)

    def _written(self, node: Node) -> None:
        if self.geometry.hierarchical and self.geometry.write_through:
            self._to_host(node)

    # ---- eviction -----------------------------------------------------------------------

    def _evict(self) -> None:
        budget = self.geometry.max_total_tokens // self.geometry.page_size
        if self.device_pages <= budget:
            return
        heap = [(node.last_access, id(node), node) for node in self._device_leaves()]
        heapq.heapify(heap)
        while self.device_pages > budget and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            self._drop_device(node)
            if parent is not None and parent is not self.root and not parent.has_device_children():
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        self._trim_host()

    def _device_leaves(self) -> Iterator[Node]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            if node.device is None:
                continue
            if not node.has_device_children():
                yield node
            stack.extend(node.children.values())

    def _drop_device(self, node: Node) -> None:
        if self.geometry.hierarchical:
            if node.host is None:
                self._to_host(node)
        else:
            assert node.parent is not None and not node.children
            del node.parent.children[node.page]
        node.device = None
        self.device_pages -= 1

    def _to_host(self, node: Node) -> None:
        assert node.device is not None
        if node.host is None:
            self.host_pages += 1
        node.host = to_host(node.device, lossy=self._faulty(Fault.HICACHE_LOSSY))

    def _trim_host(self) -> None:
        budget = int(self.geometry.host_ratio * self.geometry.max_total_tokens)
        budget //= self.geometry.page_size
        if self.host_pages <= budget:
            return
        leaves = [node for node in self._all_nodes() if node.device is None and not node.children]
        for node in sorted(leaves, key=lambda leaf: leaf.last_access):
            if self.host_pages <= budget:
                return
            assert node.parent is not None
            del node.parent.children[node.page]
            self.host_pages -= 1

    def _all_nodes(self) -> Iterator[Node]:
        stack = list(self.root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    def _faulty(self, fault: Fault) -> bool:
        return fault in self.geometry.faults


def _one_slot_late(payload: PagePayload) -> PagePayload:
    """Fault.RESTORE_AFTER_EVICTION: the page's full-attention keys and values copied back
    one position late (the first slot left zero), as a restore whose offset is off by one."""
    shifted = np.zeros_like(payload.full_kv)
    shifted[:, :, 1:] = payload.full_kv[:, :, :-1]
    return dataclasses.replace(payload, full_kv=shifted)
