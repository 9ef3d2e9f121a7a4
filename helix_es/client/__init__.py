"""The memory's read and write path: Memory, composite, middleware, sessions, encryption, redaction, the wait."""
