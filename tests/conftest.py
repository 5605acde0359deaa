import os

os.environ.setdefault("COLUMNS", "200")  # rich tables in CLI tests: no wrapping
