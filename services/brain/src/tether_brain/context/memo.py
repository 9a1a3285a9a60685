"""A value computed once per object, for objects a hot path sees again and again (the
same tool spec offered step after step) that cannot be hashed (pydantic models)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class IdentityMemo(Generic[K, V]):
    """`memo(obj)` is `compute(obj)`, computed once per object: keyed by identity, each
    entry holding its object (so its id cannot be reused while it is kept), cleared when
    `size` entries are kept (objects made afresh each time then cost a recompute only)."""

    def __init__(self, compute: Callable[[K], V], size: int = 1024) -> None:
        self.compute = compute
        self.size = size
        self._kept: dict[int, tuple[K, V]] = {}

    def __call__(self, obj: K) -> V:
        kept = self._kept.get(id(obj))
        if kept is not None and kept[0] is obj:
            return kept[1]
        if len(self._kept) >= self.size:
            self._kept.clear()
        value = self.compute(obj)
        self._kept[id(obj)] = (obj, value)
        return value
