"""The model: messages, events, names, errors and token counts. Imports nothing else of helix_es."""
