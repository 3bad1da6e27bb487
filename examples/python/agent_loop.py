"""An agent loop that keeps its conversation in windlass-memory.

Each turn: add the user's message, recall the context the model would get
(a running summary plus the recent turns), add the assistant's reply (canned
here: no model is called). Meanwhile a watcher thread streams the thread's
summary updates with Watch, resuming after the last event it saw when the
stream breaks.

Run a server (`npm start`: gRPC on 127.0.0.1:50051, extractive summariser),
then, with the environment from scripts/setup-clients.sh:

    .venv/bin/python examples/python/agent_loop.py [--target HOST:PORT]

The target can also come from WINDLASS_MEMORY_TARGET.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid

import grpc
from windlass.memory.v1 import memory_pb2, memory_pb2_grpc
from windlass_memory import Message, Role, SummaryMemory

# (user turn, the reply a model would have written)
CONVERSATION = [
    ("I'd like to plan a weekend in Lisbon.", "Happy to help. When are you going?"),
    ("The second weekend of May, two adults.", "Noted: 9-11 May, two adults."),
    ("We like seafood and walking.", "Alfama and Cais do Sodre suit you; I'll list restaurants."),
    ("Budget is about 150 euros a night.", "I'll keep hotels near 150 euros a night."),
    ("Can we add a day trip?", "Sintra is 40 minutes by train; I'll add it for Saturday."),
    ("What should we pack?", "Comfortable shoes and a light jacket: May evenings are cool."),
]


class SummaryWatcher(threading.Thread):
    """Prints the thread's summary updates, resuming after breaks."""

    def __init__(self, channel: grpc.Channel, thread_id: str) -> None:
        super().__init__(name="summary-watcher", daemon=True)
        self._stub = memory_pb2_grpc.MemoryServiceStub(channel)
        self._thread_id = thread_id
        self._stopping = threading.Event()
        self._call: grpc.RpcContext | None = None  # the open Watch, to cancel
        self._seen = threading.Condition()
        self.summarized_through_seq = 0

    def run(self) -> None:
        resume_token = ""
        while not self._stopping.is_set():
            request = memory_pb2.WatchRequest(
                thread_ids=[self._thread_id],
                event_types=[
                    memory_pb2.EVENT_TYPE_SUMMARY_UPDATED,
                    memory_pb2.EVENT_TYPE_SUMMARY_FAILED,
                ],
                resume_token=resume_token,
                # On the first connection, the summary as it is now, so an
                # update written before the stream was open is not missed.
                send_initial_state=resume_token == "",
            )
            call = self._stub.Watch(request)
            self._call = call
            try:
                for event in call:
                    resume_token = event.resume_token
                    self._show(event)
            except grpc.RpcError as error:
                if self._stopping.is_set():
                    return
                if error.code() == grpc.StatusCode.UNAVAILABLE:
                    print(f"[watch] stream broke ({error.details()}); resuming")
                    time.sleep(1)
                elif resume_token and error.code() in (
                    grpc.StatusCode.OUT_OF_RANGE,  # older than the retained history
                    grpc.StatusCode.INVALID_ARGUMENT,  # issued before a server restart
                ):
                    # The events after our token are gone: start again from
                    # the current state rather than miss updates silently.
                    print(f"[watch] cannot resume ({error.details()}); watching from now")
                    resume_token = ""
                else:
                    raise

    def _show(self, event: memory_pb2.WatchResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "summary_updated":
            update = event.summary_updated
            print(
                f"[watch] summary updated through seq {update.summarized_through_seq}"
                f" ({update.folded_count} messages folded):"
            )
            for line in update.summary.splitlines():
                print(f"[watch]   {line}")
            with self._seen:
                self.summarized_through_seq = update.summarized_through_seq
                self._seen.notify_all()
        elif kind == "summary_failed":
            failed = event.summary_failed
            print(f"[watch] summary failed (attempt {failed.attempt}): {failed.reason}")

    def wait_for(self, seq: int, timeout: float) -> bool:
        """Waits until an update covering ``seq`` has been printed."""
        with self._seen:
            return self._seen.wait_for(lambda: self.summarized_through_seq >= seq, timeout)

    def stop(self) -> None:
        self._stopping.set()
        if self._call is not None:
            self._call.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--target",
        default=os.environ.get("WINDLASS_MEMORY_TARGET", "127.0.0.1:50051"),
        help="gRPC address of windlass-memory (default: $WINDLASS_MEMORY_TARGET or %(default)s)",
    )
    parser.add_argument("--thread", default=f"agent-loop-{uuid.uuid4().hex[:8]}", help="thread id")
    args = parser.parse_args()

    # One channel for the memory and the watcher (the generated stub).
    channel = grpc.insecure_channel(args.target)
    watcher = SummaryWatcher(channel, args.thread)
    watcher.start()
    # Keep the 4 newest messages verbatim; fold the overflow every 2 messages.
    # llm=None: the server's default summariser (extractive with npm start).
    memory = SummaryMemory(window=4, summarize_every=2, channel=channel)
    print(f"thread {args.thread} on {args.target}")
    try:
        for turn, (user_text, reply) in enumerate(CONVERSATION, start=1):
            memory.add(Message.user(user_text), thread_id=args.thread)
            context = memory.get(thread_id=args.thread)
            has_summary = bool(context) and context[0].role is Role.SYSTEM
            print(
                f"turn {turn}: user: {user_text}\n"
                f"        context for the model: {len(context)} messages"
                f" ({'summary + ' if has_summary else ''}"
                f"{len(context) - has_summary} verbatim)\n"
                f"        assistant: {reply}"
            )
            memory.add(Message.assistant(reply), thread_id=args.thread)

        final = memory.get(thread_id=args.thread)
        # One print, so the watcher's lines cannot land inside it.
        lines = ["final context:"]
        for message in final:
            # Whole: the summary message's first line is only its heading.
            first, *rest = message.content.split("\n")
            lines.append(f"  {message.role.value:>9}: {first}")
            lines.extend(f"             {line}" for line in rest)
        print("\n".join(lines), flush=True)
        # Every fold the server has made is streamed; wait until the watcher
        # has printed the newest, so its output is complete.
        stub = memory_pb2_grpc.MemoryServiceStub(channel)
        thread = stub.Get(memory_pb2.GetRequest(thread_id=args.thread, allow_stale=True)).thread
        through = thread.summarized_through_seq
        if through and not watcher.wait_for(through, timeout=5):
            print(f"[watch] no update through seq {through} within 5 s")
    finally:
        watcher.stop()
        channel.close()


if __name__ == "__main__":
    main()
