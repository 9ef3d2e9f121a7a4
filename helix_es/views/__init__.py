"""Views: pure folds of the log into what `get` and `search` return (`base`), one module per view."""
