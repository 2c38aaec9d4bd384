"""Models of the root project file (`project.yml`), validated with pydantic v2.

One module per section, each usable on its own so the root schema can compose them:

* :mod:`project.workflows` -- the `workflows:` and `schedules:` sections (DAGs of outbox jobs
  and cron schedules), refused at load with `bad_dag` / `no_target_table`.
"""
