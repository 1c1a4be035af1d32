"""The botmux runtime: actors, router, session actor, store, config, CLI."""
