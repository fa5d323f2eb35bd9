"""The scripts roost runs inside a vLLM image, kept as real modules so ruff, mypy and the tests see them.

``probe``: what a base image holds (its vLLM, what that vLLM requires of xgrammar, the xgrammar it
has), run as ``python3 -c`` in a throw-away container of the base (``roost.serve.docker.images``).
``xgrammar_check``: the serving image's last build step, copied into the image by the Dockerfile
``roost.serve.dockerfile`` renders. Neither is imported there: each runs as a file of its own
under the image's ``python3``, so it imports only the standard library (and, at run time, the
xgrammar and vLLM it checks), and is written for that Python, which may be older than roost's own.
roost imports them only for their output prefixes, and reads their text to ship them.
"""
