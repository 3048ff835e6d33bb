"""Numbered, forward-only schema migrations (``NNNN_name.sql``), shipped as ``venturi.sql``.

``{prefix}`` in a file is replaced by the queue's validated table prefix; it is
the only text substituted into SQL anywhere in venturi.
"""
