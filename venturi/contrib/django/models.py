"""No models: venturi's tables are its own (sql/). This module exists because Django
sends ``post_migrate``, which creates them (``apps``), only to apps that have one."""
