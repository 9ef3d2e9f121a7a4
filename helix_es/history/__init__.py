"""A session's history from the log: audit and as-of, the records behind a listing, reveal, erasure and forget."""
