//! What `inspect --body` found: the canonical body, the stored and computed fingerprints, and how
//! the method and path compare.

use crate::fingerprint::Canonical;

/// What `inspect --body` found (also the JSON document).
#[derive(serde::Serialize)]
pub(crate) struct BodyCheck {
    /// None on a table without a tenant (null in JSON).
    pub(crate) api_key_id: Option<String>,
    /// Each scope column's value, by column (null in JSON on a table without a scope).
    pub(crate) scope: Option<crate::report::rows::Scope>,
    pub(crate) key: String,
    pub(crate) canonical: Canonical,
    /// The stored fingerprint.
    pub(crate) stored: crate::report::rows::StoredFingerprint,
    /// The column it is stored in.
    #[serde(skip)]
    pub(crate) column: String,
    /// The body's digest, in hex.
    pub(crate) computed: String,
    pub(crate) fingerprint_matches: bool,
    pub(crate) method: Option<Compared>,
    pub(crate) path: Option<Compared>,
    pub(crate) matches: bool,
}

/// One compared request attribute: what is stored and what the caller says was sent.
#[derive(serde::Serialize)]
pub(crate) struct Compared {
    pub(crate) stored: String,
    pub(crate) given: String,
    pub(crate) matches: bool,
}
