"""`open_memory` for code without an event loop: plain threads, scripts, WSGI apps, and sync callbacks
called from inside someone else's running loop.

    from helix_es import Message
    from helix_es.sync import open_memory

    with open_memory({"memory": {"type": "conversation"}}, session_id="s1") as mem:
        mem.add(Message("user", "hi"))
        mem.get()

Every async memory lives on one event loop that helix-es runs in a daemon thread of its own (`helix_es.sync.loop`),
started by the first `open_memory` and shared by every sync memory of the process. A call is
handed to that loop with `asyncio.run_coroutine_threadsafe` and the calling thread waits for
its result, so:

- many threads may call one memory at once: their calls run as concurrent tasks on the loop,
  exactly as concurrent coroutines would on an async memory;
- a call made from inside a running event loop (a sync callback, a sync library called from
  `async def`) blocks that caller's thread while the helix loop does the work: it never
  deadlocks, since the work is never queued on the loop that waits;
- an exception reaches the caller as itself (`InvalidMessage`, `ConsistencyTimeout`, ...).

Why one loop for every memory, not one per memory: the backends a memory runs on (the log, the
view stores and their connection pools) are shared per event loop, by its runtime (`helix_es.client.runtime`).
An embedded log folds each append into the views of its one backend, so two memories of one
log on two loops would each see only their own writes in a `memory` store; one loop gives sync
memories the sharing async memories have. It also costs one thread however many memories and
sessions are open, and the loop interleaves their I/O as any event loop does. The same holds
between sync and async code: an async memory opened on another loop of the process, over the
same embedded log, has a backend of its own, and while both are open neither one's `memory`
store sees the other's writes. Async code beside sync memories reaches the same memory through
`SyncMemory.submit` (awaited with `asyncio.wrap_future`), as the LangChain adapter does.

Closing a memory (leaving `with`, or `close()`) waits for its calls in flight, then releases its
backend; a call after that raises `MemoryClosed`. A memory dropped without closing is released
when it is garbage collected, and memories still open when the interpreter exits are closed
then (for at most `EXIT_TIMEOUT` seconds); the loop's thread is a daemon and never holds up exit.
After `os.fork()` the child starts a loop of its own; memories opened in the parent raise
`MemoryClosed` there.
"""

from __future__ import annotations

from helix_es.sync.loop import MemoryClosed, run, submit
from helix_es.sync.memory import EXIT_TIMEOUT, SyncMemory, open_memory

__all__ = ["EXIT_TIMEOUT", "MemoryClosed", "SyncMemory", "open_memory", "run", "submit"]
