"""The scheduler's admin plane: the admin listener (``SVC_ADMIN_HOST:SVC_ADMIN_PORT``).

One module per job; see ``scheduler/README.md`` ("Admin plane") for the routes, the error
shape, sign-in, tokens, the incident store and operations. This package's ``__init__`` imports
nothing; the incident store it shares with the coordinator is :mod:`scheduler.incidents`.
"""
