"""`python -m speclp ...` runs the command line (same as the `speclp` script)."""

from .cli import app

if __name__ == "__main__":
    app()
