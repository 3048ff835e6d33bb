"""Integrations with other frameworks, each behind its own extra (``venturi[django]``).

Nothing here is imported by ``import venturi``.
"""
