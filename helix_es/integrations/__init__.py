"""Adapters for the frameworks agents are written in (each imports its framework only when used)."""
