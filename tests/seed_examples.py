"""The seed's three YAML examples, verbatim (docs/usage.md, "Configuration"): every test that needs one uses these."""

SLIDING_WITH_LOGGING = """\
agents:
  - id: chat
    type: react
    memory:
      type: sliding-window
      window_size: 30
    memory_middleware: [logging]
"""

COMPOSITE_RECENT_PLUS_VECTOR = """\
memory:
  type: composite
  backends:
    - { type: sliding-window, window_size: 20 }
    - { type: vector, top_k: 5,
        embed: { provider: openai, model: text-embedding-3-small },
        store: memory }
"""

MULTI_TENANT_REDIS = """\
memory:
  type: conversation
  store: redis
  namespace: prod-chat
  session_id_header: X-Session-ID
  redis_url: redis://redis:6379
  ttl: 168h        # 7 days
"""
