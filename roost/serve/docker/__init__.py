"""The ``docker`` serving backend, split as prefect-docker splits its own:

- ``images``: the engine client and the serving image (render with ``roost.serve.dockerfile``, build
  or find it, stream the build log);
- ``containers``: the ``containers.run`` arguments, starting (and replacing) roost's container, the
  :class:`~roost.serve.docker.containers.DockerServer` with its followed log, and discovery;
- ``backend``: :class:`~roost.serve.docker.backend.DockerBackend`, the lifecycle over both.

These modules import the Docker SDK at module level; the CLI never imports them at start.
"""
