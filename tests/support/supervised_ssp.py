"""`python -m tests.support.supervised_ssp OPS_RUN_ARGS...`: ops/run's supervisor with only its
cluster SSPs, for tests that bring their own database host and `svc-scheduler`.

The arguments are ops/run's (`--ssps N --ssp-bind H:P --scheduler-bind H:P [--data DIR]`) and
`SVC_DB_URL` must be set (no host is started). The SSPs are built by `stack.__main__`'s own
`cluster_ssp_child` and run by `stack.supervisor.Supervisor`, so they are relaunched on exit
2-6 exactly as under `ops/run --ssps N`; the log format is ops/run's too.
"""

from __future__ import annotations

import logging
import os
import sys

from stack import rundir
from stack.__main__ import cluster_ssp_child
from stack.config import parse
from stack.supervisor import Supervisor


def main() -> int:
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s ops/run %(levelname)s %(message)s")
    env = dict(os.environ)
    cfg = parse(sys.argv[1:], env)
    if not cfg.cluster or cfg.starts_host:
        print("supervised_ssp: needs --ssps N and SVC_DB_URL", file=sys.stderr)
        return 2
    run_root = rundir.create()
    try:
        children = [cluster_ssp_child(cfg, env, i, bind, run_root)
                    for i, bind in enumerate(cfg.ssp_binds())]
        return Supervisor(children).run()
    finally:
        rundir.remove(run_root)


if __name__ == "__main__":
    sys.exit(main())
