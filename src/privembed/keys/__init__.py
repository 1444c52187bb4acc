"""Secrets and the records of their use: keyed noise, its tags and content ids
(:mod:`.keyed`), sealed payloads (:mod:`.payload`) and the privacy ledger (:mod:`.ledger`, with
its PostgreSQL backend :mod:`.ledger_pg`). Imports only :mod:`privembed.core`.
"""
