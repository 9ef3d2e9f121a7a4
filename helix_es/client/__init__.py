"""The client: Memory, composite, middleware, sessions, encryption, redaction, audit and erasure."""
