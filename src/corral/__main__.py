"""`python -m corral ...` is the `corral` command (the same Typer app the console script runs),
for environments where the script is not on PATH."""

from corral.cli.main import app

if __name__ == "__main__":
    app(prog_name="corral")
