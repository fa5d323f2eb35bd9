"""Live monitoring: the Prometheus configuration, alert rules and Grafana dashboard roost renders for
what it keeps serving on a host (``render``), the containers that run them (``containers``), and
keeping them in step with landings (``sync``). Every query is defined once in ``queries``."""
