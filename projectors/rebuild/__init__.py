"""`helix-es rebuild`: build a view from the start of the log into a new target while the current one serves.

    helix-es rebuild --config F [--view V] [--into NAME] [--switch/--no-switch] [--drop-old] [--json]
    helix-es rebuild --config F [--view V] --drop NAME
    helix-es rebuild --config F [--view V] --into NAME --group      # members may join (Kafka)
    helix-es rebuild --config F [--view V] --into NAME --join       # one more member, on any machine

1. **Target.** `--into NAME`, else `<view>@v<N>`, one past every target built so far
   (`helix_es.model.names` names them; a long-term memory in PostgreSQL gets its own table).
2. **Build.** Every namespace topic of the deployment (every log file, embedded) is read from
   the start, or from the target's checkpoint + 1 when an unfinished target is resumed, with
   large fetches, and folded with `live=False`: recorded summaries and embeddings are replayed,
   no model is called. Each batch (one topic-partition, up to `--batch-size` events) is one
   atomic write with its checkpoint; session views keep their states in process between
   batches, so a batch costs one write and no read. Records a projector would dead-letter
   are skipped the same way, so the rebuilt view equals the one the projector built.
3. **Caught up** when every partition has been consumed to the end offsets seen last, and a
   second look finds at most `CAUGHT_UP_LAG` more (under steady writes "none" may never come;
   those few are folded after the switch, never lost). A big rebuild shares the work with worker
   processes (`--workers`): whole partitions each, or slices of a session view's sessions. Past
   one machine (`--group`, Kafka only), the partitions are shared through the target's consumer
   group with the members that `--join` it, wherever they run; this process still decides
   caught up and switches (`group`).
4. **Switch** (unless `--no-switch`): the alias moves to the target in one compare-and-set
   write, so two rebuilds cannot both win. Open memories follow within about a second. On
   Kafka the rebuild keeps folding the new target until a projector service announces it
   projects it (`projectors.follow.TargetFollower`), at most `--handover` seconds, so readers
   never wait on a target nobody writes.
5. **Drop**, only when asked (`--drop-old`, or later `--drop NAME`): the old target's keys or
   rows and its checkpoints, for this deployment's namespaces. The target readers use is never
   dropped.

Progress goes to stderr: a bar on a terminal (events done, events/s, remaining lag, ETA),
else a line every `--progress` seconds; `--json` prints the final report on stdout.
Views kept in memory (memory and file stores) live in the process that serves them: they are
rebuilt there, with `await rebuild(config)` in that process (the memories' backend), not by the CLI.

Modules: `orchestrate` (rebuild, switch, hand-over, drop), `workers` (the worker processes,
started as `python -m projectors.rebuild`), `group` (the consumer group's lead and members),
`pump` (log to target), `sinks` (where a target is written), `progress` (the bar), `status` (what
is shown and reported), `selection` (which view).
The command itself is `helix_es.cli.rebuild`; the replay readers are `helix_es.log.replay`.
"""

from __future__ import annotations

from helix_es.log.replay import DEFAULT_BATCH
from projectors.rebuild.group import MemberReport, join
from projectors.rebuild.orchestrate import HANDOVER_SECONDS, drop, drop_target, rebuild
from projectors.rebuild.progress import Display
from projectors.rebuild.selection import select, views
from projectors.rebuild.status import DropReport, RebuildError, RebuildReport, Status
from projectors.rebuild.workers import PARALLEL_MIN_EVENTS

__all__ = [
    "DEFAULT_BATCH",
    "HANDOVER_SECONDS",
    "PARALLEL_MIN_EVENTS",
    "Display",
    "DropReport",
    "MemberReport",
    "RebuildError",
    "RebuildReport",
    "Status",
    "drop",
    "drop_target",
    "join",
    "rebuild",
    "select",
    "views",
]
