"""A seeded generator of realistic synthetic MCP tool registries, plus small committed samples.

Run `python -m bench_data.generate --help`; see bench_data/README.md. This package imports
nothing on purpose, so `python -m bench_data.generate` does not load its module twice.
"""
