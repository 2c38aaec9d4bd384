"""The project files: the root `project.yml` and each app's `project.yml` (pydantic v2 models).

* :mod:`project.appconfig` -- one app's file (the spec's "App configuration file" table).
* :mod:`project.rootconfig` -- the root file and loading a whole project, every problem with
  its file, property path and reason.
* :mod:`project.jobwiring` -- backends' outboxes as `SVC_JOB_CONFIG` and scheduler job tables.
* :mod:`project.schemagen` -- the published JSON Schemas (`project/schema/*.json`).
"""
