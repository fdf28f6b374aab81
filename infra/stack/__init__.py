"""The local stack: every real component of the product as a supervised local process.

`python -m infra.stack up|down|status|clean|install|env` (the Makefile wraps these).
"""
