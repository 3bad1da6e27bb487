"""A callback that records what each model call was given, for the tests to check."""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import BaseMessage


class Prompts(BaseCallbackHandler):
    """Records the messages each model call was given."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: Any, messages: list[list[BaseMessage]], **_: Any
    ) -> None:
        self.calls.extend(messages)
