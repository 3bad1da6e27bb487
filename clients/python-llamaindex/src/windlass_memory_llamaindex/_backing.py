"""What both chat stores share: the windlass_memory object behind them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, PrivateAttr

from windlass_memory import BufferMemory


class MemoryBacked(BaseModel):
    """A pydantic model (as LlamaIndex's stores are) holding a memory object, or one it made."""

    _memory: BufferMemory = PrivateAttr()
    _owns_memory: bool = PrivateAttr(default=False)

    def __init__(
        self, *, memory: BufferMemory | None = None, target: str | None = None, **data: Any
    ) -> None:
        super().__init__(**data)
        if memory is not None and not isinstance(memory, BufferMemory):
            raise TypeError(
                "memory: expected a windlass_memory BufferMemory, WindowMemory or "
                f"SummaryMemory, not {type(memory).__name__}"
            )
        if memory is not None and target is not None:
            raise ValueError("pass memory or target, not both")
        self._owns_memory = memory is None
        self._memory = memory if memory is not None else BufferMemory(target=target)

    @property
    def memory(self) -> BufferMemory:
        return self._memory

    def close(self) -> None:
        """Closes the memory object made from ``target`` (not one passed in)."""
        if self._owns_memory:
            self._memory.close()


def check_unshaped(memory: BufferMemory) -> None:
    """Refuses a rewrite through a memory object whose reads are shaped for a provider.

    A rewrite reads the thread and adds it back: through a profile (merged
    turns, dropped ones) or tool-output clearing (placeholders) that would
    store the view in place of the messages.
    """
    if memory.profile is not None or memory.clear_tool_results is not None:
        raise NotImplementedError(
            "rewriting a thread through a memory object with a profile or clear_tool_results: "
            "its reads are a view, not the stored messages; rewrite with a memory object "
            "without them"
        )
