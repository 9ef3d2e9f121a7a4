"""vector: semantic search over every message of a namespace (the agent); `get` returns [].

As in the seed, vector memory is search-only: it is one backend of a composite, beside a
sequential one. Messages are embedded and `search` returns the `min(limit, top_k)` nearest
by cosine, best first. A `MemoryCleared` anywhere in the namespace clears its vectors (the
seed's store is per agent). The view's name carries the embedding model, so another model
is another view, with its own consumer group, rows and checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from helix_es.model.errors import ConfigError
from helix_es.model.message import Message
from helix_es.model.recall import SEARCH_MODES, SearchMode
from helix_es.providers.embed import Embedder, EmbedSpec, parse_embed
from helix_es.views.base import IndexView


def model_slug(model: str) -> str:
    """`openai/text-embedding-3-small` -> `openai-text-embedding-3-small`: safe in group names and keys."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "model"


@dataclass(frozen=True)
class Vector(IndexView):
    kind = "vector"
    adapter = "vectors"
    top_k: int = 5
    embed: EmbedSpec = field(default_factory=EmbedSpec)
    # None: `search` is the seed's (top_k nearest) and `recall` ranks by vector alone; keyword and
    # hybrid keep a keyword index beside the vectors.
    search: SearchMode | None = None
    # Programmatic use: an embedder object (e.g. `embedder_from_func`) instead of `embed`.
    embedder: Embedder | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
            raise ConfigError("top_k", f"must be a whole number >= 1, got {self.top_k!r}")
        if self.search is not None and self.search not in SEARCH_MODES:
            raise ConfigError("search", f"must be one of {list(SEARCH_MODES)}, got {self.search!r}")

    @classmethod
    def from_config(cls, options: Mapping[str, Any], where: str) -> Vector:
        """The `VIEW_TYPES` factory: `top_k`, `embed` and `search` (config checks that the store keeps vectors)."""
        top_k = options.get("top_k", 5)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError(f"{where}.top_k", f"must be a whole number >= 1, got {top_k!r}")
        search = options.get("search")
        if search is not None and search not in SEARCH_MODES:
            raise ConfigError(f"{where}.search", f"must be one of {list(SEARCH_MODES)}, got {search!r}")
        return cls(top_k, parse_embed(options.get("embed"), f"{where}.embed"), search)

    @property
    def keywords(self) -> bool:
        """Whether the view keeps a keyword index (its search mode ranks by keywords)."""
        return self.search in ("hybrid", "keyword")

    @property
    def model(self) -> str:
        return self.embedder.model if self.embedder is not None else self.embed.model_id

    @property
    def name(self) -> str:
        return f"{self.kind}-{model_slug(self.model)}"


def keyword_text(message: Message) -> str:
    """What a message's keyword index holds: its text alone. With the speaker's name too, keyword recall
    rose (0.555 -> 0.568 recall@10 on bench/recall_eval) but hybrid recall fell (0.771 -> 0.748): short
    turns that match only the asker's name crowd the keyword ranker's top places."""
    return message.content
