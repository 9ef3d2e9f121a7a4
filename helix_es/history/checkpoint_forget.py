"""`forget` a LangGraph thread: destroy its data keys, then append `SessionErased`, which every checkpoint view folds.

As `helix_es.history.erasure.forget` does for a memory session: the thread's values on the log
were sealed with its keys (`checkpoints: {encryption: true}` and `HELIX_KEY_STORE`), so once the
keys are gone nothing can open them, on the log or in any backup; the views drop the thread's
rows. A value that was not sealed by a key of the store cannot be shredded: `forget_thread`
refuses, changing nothing, unless `allow_unshreddable`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from helix_es.client.encryption import KeyProvider
from helix_es.client.keys import ENV_STORE, shreddable
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.config import load_section
from helix_es.history.erasure import ForgetResult, NotShreddable, erase
from helix_es.model import names
from helix_es.projection.factory import open_log
from helix_es.views.checkpoints import Checkpoints


async def forget_thread(
    config: Mapping[str, Any] | str | os.PathLike[str],
    *,
    thread_id: str,
    reason: str | None = None,
    keys: KeyProvider | None = None,
    allow_unshreddable: bool = False,
    runtime: Runtime | None = None,
) -> ForgetResult:
    """Erase one thread of the config's `checkpoints:` namespace; `messages` and `unshreddable` count values.
    `keys` defaults to `runtime`'s (by default the running loop's)."""
    cfg = load_section(config, "checkpoints")
    assert isinstance(cfg.memory.view, Checkpoints)
    ns, sid = cfg.memory.namespace, names.check_session_id(thread_id, "thread_id")
    if keys is None:
        if not cfg.memory.view.encryption:
            raise NotShreddable(
                "checkpoints.encryption is off, so the thread's values are on the log in plaintext; an "
                "append-only log cannot erase plaintext. Set checkpoints: {encryption: true} and "
                f"{ENV_STORE}=postgres|redis|file"
            )
        keys = (runtime or default_runtime()).keys()
    if not shreddable(keys):
        raise NotShreddable(
            f"{type(keys).__name__} cannot destroy one thread's key: set {ENV_STORE}=postgres|redis|file"
        )
    log = open_log(cfg.log)
    try:
        return await erase(log.read, log.append, keys, ns, sid, reason, allow_unshreddable, "values", "thread")
    finally:
        await log.close()
