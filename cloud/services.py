"""The composition root of the control plane's components: :func:`build` makes each one and
hands it the few ports it calls (the store, the data keys, the fingerprinter, the DNS lookup,
git). The REST app, the MCP endpoint and the background worker all take a :class:`Services`;
none of them builds a component itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from cloud.audit import Audit
from cloud.backupconfig import BackupConfig
from cloud.backupfwd import BackupForwarder
from cloud.config import CloudConfig
from cloud.deployments import Deployments
from cloud.domains import Domains, TxtLookup
from cloud.identity import Identity
from cloud.keys import DataKeys
from cloud.paging import Cursors
from cloud.projects import Projects
from cloud.repolinks import GitRemote, RepoLinks
from cloud.secret import Fingerprinter
from cloud.store import Store
from cloud.tenants import Tenants
from cloud.usage import RequestMeter, Usage
from cloud.values import Values
from dbclient import Database

__all__ = ["Services", "build"]


@dataclass
class Services:
    cfg: CloudConfig
    store: Store
    keys: DataKeys
    fingerprints: Fingerprinter
    cursors: Cursors
    identity: Identity
    tenants: Tenants
    projects: Projects
    values: Values
    domains: Domains
    links: RepoLinks
    usage: Usage
    meter: RequestMeter
    audit: Audit
    deployments: Deployments
    backup_config: BackupConfig
    backups: BackupForwarder

    @property
    def default_limits(self) -> dict[str, int]:
        return dict(self.cfg.limits)


def build(cfg: CloudConfig, db: Database | None = None) -> Services:
    store = Store(db or Database(cfg.db))
    keys = DataKeys(store, cfg.keyring)
    fingerprints = Fingerprinter(cfg.server_key)
    limits = cfg.limits
    values = Values(store, keys, fingerprints, limits)
    usage = Usage(store, cfg.prices)
    return Services(
        cfg=cfg, store=store, keys=keys, fingerprints=fingerprints,
        cursors=Cursors(cfg.server_key),
        identity=Identity(store, signup_open=cfg.signup_open,
                          session_ttl_secs=cfg.session_ttl_secs,
                          tokens_per_user=limits["tokens_per_user"]),
        tenants=Tenants(store, max_members=limits["members"]),
        projects=Projects(store, values, retention_days=cfg.project_retention_days,
                          max_projects=limits["projects"]),
        values=values,
        domains=Domains(store, TxtLookup(cfg.dns_resolvers),
                        max_per_project=limits["domains_per_project"]),
        links=RepoLinks(store, GitRemote(cfg.local_repos), local_ok=cfg.local_repos,
                        max_per_project=limits["links_per_project"]),
        usage=usage, meter=RequestMeter(usage, cfg.usage_flush_secs), audit=Audit(store),
        deployments=Deployments(store, values, fingerprints),
        backup_config=BackupConfig(store),
        backups=BackupForwarder(store, keys),
    )
