"""Redis: session views, long-term, aliases and key stores, and the shared connection pool."""
