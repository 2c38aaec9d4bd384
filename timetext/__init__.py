"""Time as text: SurrealDB's duration text and ISO 8601 date-times, read the same way by every
process (the gateway's body checks, the hub's view lifetimes, the scheduler's settings and
changefeed retention, the operator command). Imports none of our packages.
"""
