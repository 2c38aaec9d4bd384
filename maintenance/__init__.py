"""Maintenance-plane parts shared by the standalone SSP and the scheduler (spec, "Standalone
maintenance plane"): the backend health list and its incidents (`maintenance.backends`),
impersonation (`maintenance.impersonation`).
Below `ssp` and `scheduler`, above `ipc`: it imports nothing else of ours."""
