"""One module per ``roost`` command; each exposes ``register(app: typer.Typer) -> None``."""
