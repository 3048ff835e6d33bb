"""venturi as a ``django.tasks`` backend: jobs written on Django's own connection, in
its transactions, run by ``venturi worker --django`` (docs/integrations/django.md).

Needs Django 6 (Python 3.12 or later) and psycopg 3: ``pip install 'venturi[django]'``.
Add ``"venturi.contrib.django"`` to ``INSTALLED_APPS`` for the management commands
(``venturi_worker``, ``venturi``) and for ``manage.py migrate`` to create venturi's
tables.
"""

from .backend import VenturiBackend, VenturiTask
from .results import RunLost

__all__ = ["RunLost", "VenturiBackend", "VenturiTask"]
