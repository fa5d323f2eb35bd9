"""``roost install`` (``scripts/install-spark``): the whole serving box on one machine, as system services.

- :mod:`roost.install.layout`: what the box is made of (paths, unit names, ports, URLs), the unit and
  environment files rendered from it, secrets masked for a dry run. Pure.
- :mod:`roost.install.system`: the machine: files written only when they differ, ``systemctl``, commands
  run as the service user, PostgreSQL's database and role.
- :mod:`roost.install.box`: the steps in order (install, uninstall), each reported ``created``,
  ``updated``, ``unchanged`` or ``removed``.
"""
