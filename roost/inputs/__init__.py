"""The validation layer at roost's boundaries: every value that comes from outside (a file read, a
JSON document, a URL given or answered, a CLI value) passes one function here that either returns
it checked and bounded or raises a :class:`~roost.errors.UserError` naming it and saying what to do.

- :mod:`roost.inputs.files`: only regular files are read, in bounded size and time (a FIFO, a
  device or a directory where a file is expected is refused by name, never waited on).
- :mod:`roost.inputs.jsondoc`: JSON parsed with bounded depth and number sizes.
- :mod:`roost.inputs.text`: what a message may echo of a value (control characters escaped, long
  values cut), and URLs with their userinfo redacted.
"""
