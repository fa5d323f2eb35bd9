"""The embedded default: a tiny random-weight checkpoint generated on the spot."""
