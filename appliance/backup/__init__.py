"""Configuration backup and restore (``appliance backup``, ``appliance restore``, the console's page)."""
