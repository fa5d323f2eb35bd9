"""The Hugging Face Hub side of roost: resolve, download, verify, and a local Hub mirror for tests/demos."""
