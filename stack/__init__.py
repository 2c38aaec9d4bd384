"""The local stack: starts the database host and the service processes, supervises them."""
