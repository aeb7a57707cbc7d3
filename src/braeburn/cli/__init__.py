"""The `braeburn` command: one module per verb, registered in main.py."""
