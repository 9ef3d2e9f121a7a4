"""In-process stores: session views, long-term, vector and aliases, for tests and the embedded mode."""
