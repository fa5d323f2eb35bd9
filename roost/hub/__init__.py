"""The Hugging Face Hub side of roost: resolve, download and verify a checkpoint or a dataset, and a local Hub.

One client for every repository roost reads from a Hub (a model's checkpoint, an evaluation dataset):

- ``snapshot``: ``download_and_verify`` (the download stage, into a model's directory); ``spec``: its
  ``DownloadSpec``, ``FileRecord`` and ``DownloadResult``;
- ``cache``: ``download_to_cache``, a repository (a dataset) in huggingface_hub's cache, laid out as
  huggingface_hub lays it out;
- ``preflight``: what the audit needs of a checkpoint, read over HTTP before downloading it;
- ``patterns``: the files roost downloads; ``progress``: the progress reports;
- ``errors``: Hub faults and their sentences; ``integrity``: digests and ``IntegrityError``;
- ``answers``: every JSON answer of a Hub, bounded and validated into typed models at one place;
- the HTTP client, by concern: ``_endpoint`` (which Hub, which token, timeouts), ``_session`` (the
  connection of one endpoint and repository type), ``_redact`` (secrets out of the HTTP log lines),
  ``_retries`` (backoff), ``_files`` (file transfers), ``_http`` (``HubClient``: the API calls);
- ``_local_folder``, ``_run``, ``_transfer``: the download directory's manifest and partial files, a
  download's steps at a resolved commit, the parallel fetch (used through ``snapshot``); ``_fetch``,
  ``_parts``, ``_lanes``: one file's transfer (one stream, or ranged parts) hashed as its bytes arrive,
  the parts and their sidecar, and how many connections run (from measured throughput);
- ``mirror`` and ``publish``: a local Hub (olah on loopback) serving repositories published from
  directories, for the embedded demo and for tests.
"""
