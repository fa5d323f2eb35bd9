"""The Hugging Face Hub side of roost: resolve, download and verify a checkpoint, and a local Hub.

- ``snapshot``: ``download_and_verify``, ``DownloadSpec``, ``DownloadResult`` (the download stage);
- ``patterns``: the files roost downloads; ``progress``: the progress reports;
- ``errors``: Hub faults and their sentences; ``integrity``: digests and ``IntegrityError``;
- ``answers``: every JSON answer of a Hub, bounded and validated into typed models at one place;
- ``_http``, ``_local_folder``, ``_transfer``: the HTTP client and retries, the download directory's
  manifest and partial files, the parallel fetch (used through ``snapshot``);
- ``mirror`` and ``publish``: a local Hub (olah on loopback) serving repositories published from
  directories, for the embedded demo and for tests.
"""
