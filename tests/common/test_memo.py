"""IdentityMemo: once per object, never another object's value."""

from __future__ import annotations

from tether_brain.context.memo import IdentityMemo
from tether_common.messages.gateway import OfferedToolSpec


def test_computed_once_per_object_and_never_shared() -> None:
    calls: list[str] = []

    def size(spec: OfferedToolSpec) -> int:
        calls.append(spec.name)
        return len(spec.name)

    memo = IdentityMemo(size, size=8)
    kept = OfferedToolSpec(name="calculate", description="", parameters={})
    assert [memo(kept) for _ in range(5)] == [9] * 5
    assert calls == ["calculate"]
    # Equal but other objects, made and dropped (their ids reused): each its own value.
    for n in range(50):
        assert memo(OfferedToolSpec(name="x" * n, description="", parameters={})) == n
    assert len(memo._kept) <= 8
    assert memo(kept) == 9
