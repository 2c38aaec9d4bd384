"""The release every process reports: the SSP's heartbeats and `/info`, the scheduler's
`/info` and the admin overview, the hosted platform's health and MCP server. One constant, so
the processes of one release never disagree about it (keep it equal to pyproject's version)."""

VERSION = "0.1.0"
