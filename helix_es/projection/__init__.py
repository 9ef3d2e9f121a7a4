"""Projections: the protocol, the one fold, the one driver, and the one factory from config to adapters."""
