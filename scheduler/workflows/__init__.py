"""Workflows and schedules: DAG runs of outbox jobs and cron schedules, owned by the scheduler.

One module per job:

* :mod:`.tables` -- the `_00_workflow*` / `_00_schedule*` tables, schema versions, migrations;
* :mod:`.errors` -- the structured failure codes and the `error` object;
* :mod:`.clock` -- cron due times and the catch-up bound (pure);
* :mod:`.runs` -- run and step states and the rules that move them (pure);
* :mod:`.rollups` -- the per-schedule success/failure tallies;
* :mod:`.engine` -- :class:`~.engine.WorkflowEngine`: the one owner of the clock and of the run
  state (loads, fires, dispatches steps as outbox jobs, follows them, recovers after a crash),
  the composition root of its components, lowest first: :mod:`.state` (`Memory`, the store
  all are handed), :mod:`.commits`, :mod:`.jobcalls`, :mod:`.quarantine`, :mod:`.endings`,
  :mod:`.runstate`, :mod:`.firing`, :mod:`.following`, :mod:`.loading`, :mod:`.settle`,
  :mod:`.actions` (the operator actions the admin API calls) and :mod:`.loop`;
* :mod:`.ids` -- record ids and times of the records;
* :mod:`.views` -- the admin API's bodies (runs, one run with its DAG, schedules);
* :mod:`.config` -- ``SVC_WORKFLOW*`` settings.

The definitions themselves are validated by :mod:`project.workflows` and written by the CLI
(`svc workflows apply`, also part of `svc schema apply`).
"""
