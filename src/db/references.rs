//! The parts of evict's statements generated from the foreign keys that reference the key table
//! (read by [`super::queries::referencing_keys`]). The templates in `sql/` carry markers in
//! comments (`/*{not_referenced}*/`, ...); left as they are, each statement is whole, and this
//! module fills them in:
//!
//! * a key that a NO ACTION / RESTRICT row still references cannot be deleted (the DELETE would
//!   fail the whole batch): the batches leave it out with a `NOT EXISTS` probe of the referencing
//!   table, index-backed when its column is indexed, and count it instead;
//! * deleting a key that an ON DELETE SET NULL / SET DEFAULT / CASCADE row references changes that
//!   row inside the batch's statement, which then waits on a live transaction's lock on it: the
//!   SKIP LOCKED fallback locks the candidates' referencing rows `FOR UPDATE SKIP LOCKED` first
//!   and deletes only the candidates whose referencing rows it could all lock, leaving the others
//!   (counted like a held key) to the next run.
//!
//! A key the role may not read (or lock rows of) is left out of the statements: they would fail
//! on the privilege; `check` names the grant.

use super::queries::{KeyRef, ReferencingKey};
use crate::ident::quote_ident;
use crate::report::db::Step;

/// The alias of a referencing table inside the generated probes (unlikely to shadow a name).
const REF: &str = "idemctl_ref";

/// The foreign keys that reference one key table, and the statement parts made from them.
#[derive(Debug, Clone, Default)]
pub(crate) struct References {
    keys: Vec<ReferencingKey>,
}

impl References {
    pub(crate) fn new(keys: Vec<ReferencingKey>) -> References {
        References { keys }
    }

    /// No foreign key references the table.
    pub(crate) fn none() -> References {
        References::default()
    }

    /// Keys with ON DELETE NO ACTION / RESTRICT that the batches leave out while referenced.
    fn blocking(&self) -> impl Iterator<Item = &ReferencingKey> {
        self.keys.iter().filter(|k| k.blocks() && k.may_read)
    }

    /// Keys whose ON DELETE action changes the referencing rows, which the fallback locks first.
    fn acting(&self) -> impl Iterator<Item = &ReferencingKey> {
        self.keys.iter().filter(|k| !k.blocks() && k.may_lock)
    }

    /// Only the NO ACTION / RESTRICT keys: the parts that leave referenced keys out, without the
    /// fallback's locks of referencing rows (for a statement that cannot take them).
    pub(crate) fn blocking_only(&self) -> References {
        References {
            keys: self.keys.iter().filter(|k| k.blocks()).cloned().collect(),
        }
    }

    /// Every NO ACTION / RESTRICT key, whether or not a statement can probe it.
    pub(crate) fn blocking_keys(&self) -> impl Iterator<Item = &ReferencingKey> {
        self.keys.iter().filter(|k| k.blocks())
    }

    /// Whether a batch can leave keys behind because they are still referenced.
    pub(crate) fn any_blocking(&self) -> bool {
        self.blocking().next().is_some()
    }

    /// The foreign keys whose probes are index-backed, for the read-only figures (the dry run's
    /// counts, stats' eviction lag): a NO ACTION / RESTRICT key whose referencing columns no index
    /// leads with is left out, as each probe would read the whole referencing table (check fails
    /// on such a key and prints the index).
    pub(crate) fn index_backed(&self) -> References {
        References {
            keys: self
                .keys
                .iter()
                .filter(|k| !k.blocks() || k.indexed)
                .cloned()
                .collect(),
        }
    }

    /// The NO ACTION / RESTRICT keys [`References::index_backed`] leaves out, or this role may not
    /// read: the keys they reference are not told apart.
    pub(crate) fn unprobed(&self) -> impl Iterator<Item = &ReferencingKey> {
        self.keys
            .iter()
            .filter(|k| k.blocks() && !(k.indexed && k.may_read))
    }

    /// `idemctl_ref.c = <key table>.k AND ...`: a referencing row of the key table's row.
    fn matches(key: &ReferencingKey, table: &str) -> String {
        key.columns
            .iter()
            .zip(&key.referenced)
            .map(|(c, k)| format!("{REF}.{} = {table}.{}", quote_ident(c), quote_ident(k)))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// `EXISTS (...)`: a row of `key`'s referencing table references the key table's row. `OFFSET
    /// 0` keeps it a probe per key (an index scan of the referencing table, as the ON DELETE
    /// action's own lookup), which the planner would otherwise turn into a join that may read the
    /// whole referencing table for one batch.
    fn exists(key: &ReferencingKey, table: &str) -> String {
        format!(
            "EXISTS (SELECT 1 FROM {} {REF} WHERE {} OFFSET 0)",
            key.referencing_quoted,
            Self::matches(key, table)
        )
    }

    /// Fill in the markers of a template already rendered for the table (`table`: its quoted,
    /// schema-qualified name, as the statement names it).
    pub(crate) fn fill(&self, sql: &str, table: &str) -> String {
        let not_referenced: String = self
            .blocking()
            .map(|k| format!("\n   AND NOT {}", Self::exists(k, table)))
            .collect();
        let referenced: String = self
            .blocking()
            .map(|k| format!(" OR {}", Self::exists(k, table)))
            .collect();
        let mut out = sql
            .replace("/*{not_referenced}*/", &not_referenced)
            .replace("/*{referenced}*/", &referenced);
        if let Some((candidate_keys, locks)) = self.fallback_locks() {
            out = out
                .replace("/*{candidate_keys}*/", &candidate_keys)
                .replace("/*{referencing_locks}*/", &locks)
                .replace("/*{ready}*/candidates", "ready");
        }
        out
    }

    /// The fallback's parts for the keys whose ON DELETE action changes referencing rows: the
    /// candidates' key columns (to select), and the CTEs that lock their referencing rows and keep
    /// as `ready` the candidates none of whose referencing rows another transaction holds. Each
    /// referencing table is read by `col = ANY (candidates' keys)`: an index range per key. The
    /// rows are read twice in the statement's snapshot, once locking (SKIP LOCKED) and once not;
    /// what the lock skipped is what the plain read has more of.
    fn fallback_locks(&self) -> Option<(String, String)> {
        let acting: Vec<&ReferencingKey> = self.acting().collect();
        if acting.is_empty() {
            return None;
        }
        // Each referenced column of the key table once, as idemctl_k<n>.
        let mut referenced: Vec<&str> = Vec::new();
        for k in &acting {
            for c in &k.referenced {
                if !referenced.contains(&c.as_str()) {
                    referenced.push(c);
                }
            }
        }
        let alias = |c: &str| {
            let n = referenced.iter().position(|r| *r == c).unwrap_or(0);
            format!("idemctl_k{n}")
        };
        let candidate_keys: String = referenced
            .iter()
            .map(|c| format!(", {} AS {}", quote_ident(c), alias(c)))
            .collect();
        let mut ctes = String::new();
        let mut ready = Vec::new();
        for (i, k) in acting.iter().enumerate() {
            let pairs: Vec<(&String, &String)> = k.columns.iter().zip(&k.referenced).collect();
            let select = pairs
                .iter()
                .enumerate()
                .map(|(j, (c, _))| format!("{REF}.{} AS r{j}", quote_ident(c)))
                .collect::<Vec<_>>()
                .join(", ");
            let filter = pairs
                .iter()
                .map(|(c, r)| {
                    format!(
                        "{REF}.{} = ANY (ARRAY(SELECT {} FROM candidates))",
                        quote_ident(c),
                        alias(r)
                    )
                })
                .collect::<Vec<_>>()
                .join(" AND ");
            let outputs = (0..pairs.len())
                .map(|j| format!("r{j}"))
                .collect::<Vec<_>>()
                .join(", ");
            let from = format!("{} {REF}", k.referencing_quoted);
            ctes.push_str(&format!(
                ", idemctl_locked_{i} AS MATERIALIZED (\n    SELECT {select}\n      FROM {from}\n     WHERE {filter}\n       FOR UPDATE OF {REF} SKIP LOCKED\n), idemctl_held_{i} AS MATERIALIZED (\n    SELECT {select}\n      FROM {from}\n     WHERE {filter}\n    EXCEPT ALL\n    SELECT {outputs} FROM idemctl_locked_{i}\n)"
            ));
            let same = pairs
                .iter()
                .enumerate()
                .map(|(j, (_, r))| format!("h.r{j} = c.{}", alias(r)))
                .collect::<Vec<_>>()
                .join(" AND ");
            ready.push(format!(
                "NOT EXISTS (SELECT 1 FROM idemctl_held_{i} h WHERE {same})"
            ));
        }
        ctes.push_str(&format!(
            ", ready AS MATERIALIZED (\n    SELECT tableoid, ctid\n      FROM candidates c\n     WHERE {}\n)",
            ready.join("\n       AND ")
        ));
        Some((candidate_keys, ctes))
    }
}

/// evict's and check's statements that carry the foreign keys' parts, rendered for `profile` on
/// `quoted_table` with the foreign keys `keys` (referencing table, schema-qualified and quoted;
/// its columns; the key table's columns they reference; the ON DELETE action): (file in sql/, the
/// statement). The EXPLAIN test plans them.
pub fn statements_for_explain(
    profile: &super::profile::Profile,
    quoted_table: &str,
    keys: &[(&str, &[&str], &[&str], &str)],
) -> Vec<(&'static str, String)> {
    let refs = References::new(
        keys.iter()
            .map(|(table, columns, referenced, on_delete)| ReferencingKey {
                name: String::new(),
                referencing_table: (*table).to_owned(),
                referencing_quoted: (*table).to_owned(),
                columns: columns.iter().map(|c| (*c).to_owned()).collect(),
                referenced: referenced.iter().map(|c| (*c).to_owned()).collect(),
                on_delete: (*on_delete).to_owned(),
                indexed: true,
                may_read: true,
                may_lock: true,
            })
            .collect(),
    );
    [
        ("evict_batch.sql", include_str!("../../sql/evict_batch.sql")),
        (
            "evict_batch_skip_locked.sql",
            include_str!("../../sql/evict_batch_skip_locked.sql"),
        ),
        (
            "evict_batch_referenced.sql",
            include_str!("../../sql/evict_batch_referenced.sql"),
        ),
        (
            "referenced_expired.sql",
            include_str!("../../sql/referenced_expired.sql"),
        ),
        (
            "evict_preview.sql",
            include_str!("../../sql/evict_preview.sql"),
        ),
        (
            "evict_preview_sample.sql",
            include_str!("../../sql/evict_preview_sample.sql"),
        ),
        (
            "oldest_expired_referenced.sql",
            include_str!("../../sql/oldest_expired_referenced.sql"),
        ),
    ]
    .into_iter()
    .map(|(file, template)| {
        (
            file,
            refs.fill(&profile.render(template, quoted_table), quoted_table),
        )
    })
    .collect()
}

/// Of the oldest `cap` expired completed keys, how many `key` (NO ACTION / RESTRICT) still
/// references: (referenced, examined).
pub(crate) async fn referenced_expired(
    client: &super::Session,
    table: &super::KeyTable,
    key: &ReferencingKey,
    cap: i64,
) -> anyhow::Result<(i64, i64)> {
    use anyhow::Context as _;
    let refs = References::new(vec![key.clone()]);
    let sql = refs.fill(
        &table.sql(include_str!("../../sql/referenced_expired.sql")),
        &table.quoted,
    );
    let row = client
        .query_one(&sql, &[super::p(&cap)])
        .await
        .context(Step::CountReferenced)?;
    Ok((row.try_get("referenced")?, row.try_get("examined")?))
}

/// The oldest expired completed keys, told apart by whether a NO ACTION / RESTRICT foreign key
/// still references them (stats' eviction lag).
#[derive(Debug, Clone)]
pub(crate) struct ExpiredByReference {
    /// The oldest key evict can delete (None: none of those examined).
    pub deletable: Option<KeyRef>,
    /// The oldest key still referenced (None: none of those examined).
    pub referenced: Option<KeyRef>,
    /// How many of the keys examined are still referenced.
    pub referenced_count: i64,
    /// The keys examined: the oldest expired completed ones, at most the cap.
    pub examined: i64,
    /// More expired completed keys wait beyond those examined (the walk stopped at its cap): the
    /// counts are of the oldest ones only.
    pub capped: bool,
    /// How long the newest key examined has waited (None: nothing expired waits).
    pub newest_examined_seconds: Option<f64>,
}

/// Of the oldest `cap` expired completed keys (and whether more wait beyond them), the oldest that
/// evict can delete and those it leaves because a foreign key of `refs` (NO ACTION / RESTRICT,
/// index-backed: see [`References::index_backed`]) still references them.
pub(crate) async fn oldest_expired_by_reference(
    client: &super::Session,
    table: &super::KeyTable,
    refs: &References,
    cap: i64,
) -> anyhow::Result<ExpiredByReference> {
    use anyhow::Context as _;
    let sql = refs.fill(
        &table.sql(include_str!("../../sql/oldest_expired_referenced.sql")),
        &table.quoted,
    );
    let rows = client
        .query(&sql, &[super::p(&cap)])
        .await
        .context(Step::FindOldestDeletable)?;
    let mut out = ExpiredByReference {
        deletable: None,
        referenced: None,
        referenced_count: 0,
        examined: 0,
        capped: false,
        newest_examined_seconds: None,
    };
    for r in &rows {
        out.referenced_count = r.try_get("referenced_count")?;
        out.examined = r.try_get("examined")?;
        out.capped = r.try_get("capped")?;
        out.newest_examined_seconds = r.try_get("newest_examined_seconds")?;
        let api_key_id: Option<String> = if table.profile.has_scope() {
            r.try_get("api_key_id")?
        } else {
            None
        };
        let key = KeyRef {
            scope: table.profile.scope_of(api_key_id.as_deref()),
            api_key_id,
            key: r.try_get("key")?,
            expires_at: r.try_get("expires_at")?,
            seconds: r.try_get("lag_seconds")?,
        };
        if r.try_get("referenced")? {
            out.referenced = Some(key);
        } else {
            out.deletable = Some(key);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(on_delete: &str) -> ReferencingKey {
        ReferencingKey {
            name: "rides_idempotency_key_id_fkey".into(),
            referencing_table: "rides".into(),
            referencing_quoted: "\"public\".\"rides\"".into(),
            columns: vec!["idempotency_key_id".into()],
            referenced: vec!["id".into()],
            on_delete: on_delete.into(),
            indexed: true,
            may_read: true,
            may_lock: true,
        }
    }

    #[test]
    fn without_foreign_keys_a_statement_is_its_template() {
        let sql = "SELECT ctid/*{candidate_keys}*/ FROM t WHERE x/*{not_referenced}*/";
        assert_eq!(
            References::none().fill(sql, "t"),
            "SELECT ctid/*{candidate_keys}*/ FROM t WHERE x"
        );
    }

    #[test]
    fn a_blocking_key_is_left_out_and_an_acting_one_locked() {
        let t = "\"public\".\"k\"";
        let blocking = References::new(vec![key("NO ACTION")]);
        assert_eq!(
            blocking.fill("WHERE x/*{not_referenced}*/", t),
            "WHERE x\n   AND NOT EXISTS (SELECT 1 FROM \"public\".\"rides\" idemctl_ref \
             WHERE idemctl_ref.\"idempotency_key_id\" = \"public\".\"k\".\"id\" OFFSET 0)"
        );
        let acting = References::new(vec![key("SET NULL")]);
        let filled = acting.fill(
            "SELECT ctid/*{candidate_keys}*/ FROM k)/*{referencing_locks}*/, d AS (SELECT ctid FROM /*{ready}*/candidates)",
            t,
        );
        assert!(
            filled.contains("SELECT ctid, \"id\" AS idemctl_k0 FROM k"),
            "{filled}"
        );
        assert!(
            filled.contains("FOR UPDATE OF idemctl_ref SKIP LOCKED"),
            "{filled}"
        );
        assert!(filled.ends_with("SELECT ctid FROM ready)"), "{filled}");
        assert!(!acting.any_blocking());
        let mut unlockable = key("CASCADE");
        unlockable.may_lock = false;
        let sql = "SELECT ctid/*{candidate_keys}*/";
        assert_eq!(References::new(vec![unlockable]).fill(sql, t), sql);
    }
}
