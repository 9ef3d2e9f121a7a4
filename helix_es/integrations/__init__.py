"""Framework adapters: each module imports its framework (an extra) only when it is imported."""
