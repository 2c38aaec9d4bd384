"""The stream processor (SSP): hub, shard workers, edge publisher; the gateway lives in `gateway/`."""
