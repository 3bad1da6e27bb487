"""The memory object an adapter uses: one passed in, or one made for a target."""

from __future__ import annotations

from windlass_memory import BufferMemory


def memory_for(memory: BufferMemory | None, target: str | None) -> tuple[BufferMemory, bool]:
    """``memory``, or a BufferMemory for ``target``; and whether the adapter owns (closes) it."""
    if memory is not None and not isinstance(memory, BufferMemory):
        raise TypeError(
            "memory: expected a windlass_memory BufferMemory, WindowMemory or "
            f"SummaryMemory, not {type(memory).__name__}"
        )
    if memory is not None and target is not None:
        raise ValueError("pass memory or target, not both")
    if memory is None:
        return BufferMemory(target=target), True
    return memory, False
