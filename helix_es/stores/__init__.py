"""Stores: the ports (`ports`), one package per technology holding every adapter of it, and the registry."""
