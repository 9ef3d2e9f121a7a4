"""PostgreSQL: session views, long-term, vector, aliases and key stores, their DDL, and the shared pool."""
