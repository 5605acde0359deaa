"""Console entry point `speclp` (thin face over lp, verifiers, proofs)."""
import typer

app = typer.Typer(help="speclp: checked numbers for speculative decoding theory.")


@app.command()
def version() -> None:
    """Print the version."""
    from speclp import __version__

    print(__version__)
