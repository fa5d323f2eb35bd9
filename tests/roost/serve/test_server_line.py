"""A server's line as a backend hands it to its ``log`` callback: the text callers always got, and its parts."""

from __future__ import annotations

import copy
import pickle

from roost.serve.logs import ServerLine


def test_a_server_line_reads_as_before_and_keeps_its_parts_through_a_copy() -> None:
    line = ServerLine("vllm 42", "INFO:     Application startup complete.")
    assert line == "[vllm 42] INFO:     Application startup complete." and line.startswith("[vllm 42] ")
    for again in (copy.copy(line), pickle.loads(pickle.dumps(line))):
        assert isinstance(again, ServerLine) and again == line
        assert (again.source, again.text) == ("vllm 42", "INFO:     Application startup complete.")
