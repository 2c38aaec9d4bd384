"""The hosted platform's control plane (``svc-cloud``, ``{cloud_api_url}``): tenants and their
members, projects, environment variables and vault secrets, custom domains, repo links, usage,
credentials (CLI sessions, API keys, MCP tokens) and the MCP endpoint ``/v1/mcp``.

Layout, following the data: ``config`` (settings, read once) -> ``services`` (the composition
root) -> components (``identity``, ``tenants``, ``projects``, ``values`` with ``crypto`` and
``keys``, ``domains``, ``repolinks``, ``usage``, ``audit``) over ``store`` (the database port)
-> ``api`` and ``ops`` (the table of operations and the runner every call goes through) ->
``rest`` and ``mcp`` (the two doors) -> ``asgi`` (what a gunicorn worker serves) and
``__main__`` (the process, with ``worker``'s background loops). ``client`` is the HTTP client
the CLI (``svc cloud``) uses; ``envresolve`` resolves an app's ``project.yml`` ``env`` against
the platform's variables and vault. See ``cloud/README.md``.
"""
