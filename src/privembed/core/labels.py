"""Every label under which privembed derives something from a key or hashes a secret-bearing value.

A key ``K`` feeds several PRFs: keyed noise tags, content ids, payload encryption keys, the
server's text identities and aliases. They are independent only if their inputs can never
collide, so every domain string lives here, once, and ``tests/test_labels.py`` checks that

* no two labels are equal and none is a prefix of another (so ``label || message`` is
  unambiguous: a message under one label is never a message under another);
* no other module of the package spells a ``privembed/...`` domain literal of its own.

Changing a label changes every value derived under it (noise, ids, payload keys): bump its
version and say so in the changelog, never edit one in place.

Examples
--------
>>> NOISE_TAG.startswith(b"privembed/")
True
>>> len(set(ALL)) == len(ALL)
True
"""

from __future__ import annotations

__all__ = [
    "ALL",
    "CONTENT_ID",
    "CONTENT_TEXT",
    "CONTENT_VECTOR",
    "CONTENT_VECTOR_ALIAS",
    "KEY_ID",
    "MODEL_IDENTITY",
    "NOISE_STREAM",
    "NOISE_TAG",
    "PAYLOAD_AD",
    "PAYLOAD_HKDF_INFO",
    "PAYLOAD_HKDF_SALT",
    "QUERY",
    "SEALED_INDEX",
    "SEEDED_ROWS",
    "SERVE_BACKEND",
    "SERVE_TEXT",
    "SERVE_VECTOR_ALIAS",
    "TAG_COMMITMENT",
]

#: keyed noise: HMAC(K, NOISE_TAG || context || 0 || typed id || 0 || content) (keyed.py)
NOISE_TAG = b"privembed/keyed/v2\x00"
#: keyed noise: the counter-mode stream key HMAC(K, NOISE_STREAM) (keyed.py)
NOISE_STREAM = b"privembed/keyed/v2/stream"
#: content digests (unkeyed SHA-256, inside a tag only): a clean vector's canonical bytes
CONTENT_VECTOR = b"privembed/content/vector/v1\x00"
#: content digests (unkeyed SHA-256, inside a tag only): (model identity, exact text)
CONTENT_TEXT = b"privembed/content/text/v1\x00"
#: record ids derived from content, keyed: HMAC(K, CONTENT_ID || kind || canonical content)
CONTENT_ID = b"privembed/content-id/v1\x00"
#: content ids' clean-vector aliases in a ledger: HMAC(K, CONTENT_VECTOR_ALIAS || vector digest)
#: (release/identity.py)
CONTENT_VECTOR_ALIAS = b"privembed/content-id/vector-alias/v1\x00"
#: an embedding model's identity: SHA-256(MODEL_IDENTITY || what computes the vectors)
MODEL_IDENTITY = b"privembed/model-identity/v1\x00"
#: the public key id: SHA-256(KEY_ID || K), first 64 bits
KEY_ID = b"privembed/key-id\x00"
#: what the ledger stores of a tag: SHA-256(TAG_COMMITMENT || tag)
TAG_COMMITMENT = b"privembed/tag-commitment\x00"
#: seeded (experiment) noise: per-row stream keys (rng.py)
SEEDED_ROWS = b"privembed/seeded-rows/v1\x00"
#: sealed payloads: HKDF-SHA256(K, salt, info) is the payload master key (payload.py)
PAYLOAD_HKDF_SALT = b"privembed/payload"
PAYLOAD_HKDF_INFO = b"privembed/payload/v1"
#: sealed payloads: the associated data's domain (payload.py)
PAYLOAD_AD = b"privembed/payload/v1/ad\x00"
#: a sealed collection's local index cache: its key HMAC(K, SEALED_INDEX || collection)
#: (search/sealed.py)
SEALED_INDEX = b"privembed/sealed-index/v1\x00"
#: query-side keyed noise: the query key HMAC(K, QUERY) (integrations/query.py)
QUERY = b"privembed/query/v1\x00"
#: the server's text identities HMAC(K, SERVE_TEXT || canonical text) (server/service.py)
SERVE_TEXT = b"privembed/serve/text/v1\x00"
#: the server's per-backend noise keys HMAC(K, SERVE_BACKEND || backend identity)
SERVE_BACKEND = b"privembed/serve/backend/v1\x00"
#: the server's clean-vector aliases HMAC(K, SERVE_VECTOR_ALIAS || vector digest)
SERVE_VECTOR_ALIAS = b"privembed/serve/vector-alias/v1\x00"

#: every label above
ALL: tuple[bytes, ...] = (
    NOISE_TAG,
    NOISE_STREAM,
    CONTENT_VECTOR,
    CONTENT_TEXT,
    CONTENT_ID,
    CONTENT_VECTOR_ALIAS,
    MODEL_IDENTITY,
    KEY_ID,
    TAG_COMMITMENT,
    SEEDED_ROWS,
    PAYLOAD_HKDF_SALT,
    PAYLOAD_HKDF_INFO,
    PAYLOAD_AD,
    SEALED_INDEX,
    QUERY,
    SERVE_TEXT,
    SERVE_BACKEND,
    SERVE_VECTOR_ALIAS,
)
