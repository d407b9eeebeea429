//! `idemctl check`: is the table what idemctl expects, may this role do its jobs, and are the
//! eviction lag and stuck-key count within the alert thresholds. Every problem comes with the
//! statement that fixes it.

use anyhow::Result;

use crate::cli::CheckArgs;
use crate::commands::stats;
use crate::conn::Route;
use crate::context::Context;
use crate::db::KeyTable;
use crate::db::session::Writability;
use crate::db::table::{Job, Privileges};
use crate::domain::ReclaimAction;
use crate::exit::{Exit, fail};
use crate::output::human_secs;
pub(crate) use crate::report::check::{Finding, Status, finding};

/// Run `check`.
pub(crate) async fn run(ctx: &Context, args: &CheckArgs) -> Result<Exit> {
    let client = ctx.session().await?;
    let table = ctx.table(&client).await?;
    let mut findings = vec![connection(ctx.route())];
    findings.extend(structure(&table));
    let keys = crate::db::queries::referencing_keys(&client, &table).await?;
    let mut still_referenced = Vec::new();
    for k in &keys {
        // Counted only where it is cheap: an index probe per expired key, a bounded number of them.
        let cheap = k.blocks()
            && k.indexed
            && k.may_read
            && !table.profile.lacks_ttl()
            && table.profile.time_problem(&table.columns).is_none()
            && table.expiry_index().is_some();
        still_referenced.push(if cheap {
            Some(
                crate::db::references::referenced_expired(
                    &client,
                    &table,
                    k,
                    stats::REFERENCED_CAP,
                )
                .await?,
            )
        } else {
            None
        });
    }
    let role_privileges = table.privileges(&client).await?;
    findings.extend(referencing(&keys, &still_referenced, &role_privileges.role));
    let writability = client.writability().await?;
    findings.extend(privileges(&table, &role_privileges, writability));
    findings.push(writes(writability));
    let distributed = crate::commands::shards::distributed(&client, &table).await?;
    if let Some(layout) = &distributed {
        let outcomes =
            super::citus_check::findings(ctx, &client, &table, layout, &role_privileges).await;
        findings.extend(crate::output::citus::check_findings(&outcomes));
    }
    // The statistics read the key table only; a failure elsewhere (a referencing table without
    // an index, a missing identity index) leaves them safe to read, so the thresholds are checked.
    let blocking: Vec<String> = findings
        .iter()
        .filter(|f| {
            f.status == Status::Fail && !THRESHOLDS_READ_DESPITE.contains(&f.check.as_str())
        })
        .map(|f| f.check.clone())
        .collect();
    if !blocking.is_empty() {
        findings.extend(thresholds_skipped(args, &blocking));
    } else {
        let stuck_after = args.stuck_after.as_secs_f64();
        let min_ttl = args.min_ttl.map(|d| d.as_secs_f64());
        let report = match distributed {
            Some(layout) => {
                super::citus_stats::gather(
                    ctx,
                    &client,
                    &table,
                    layout,
                    stuck_after,
                    stats::STUCK_CAP,
                    args.allow_scan,
                    min_ttl,
                )
                .await?
            }
            None => {
                stats::gather(
                    &client,
                    &table,
                    stuck_after,
                    None,
                    stats::STUCK_CAP,
                    args.allow_scan,
                    min_ttl,
                )
                .await?
            }
        };
        findings.extend(partitioning(&table, &report));
        findings.extend(thresholds(&report, args));
    }
    let json = serde_json::json!({ "table": table.qualified_name(), "findings": findings });
    ctx.output
        .emit(&crate::output::check::findings(&findings), &json)?;
    let failed: Vec<&Finding> = findings
        .iter()
        .filter(|f| matches!(f.status, Status::Fail | Status::Breached))
        .collect();
    match failed.as_slice() {
        [] => Ok(Exit::Success),
        failed => Err(fail(
            Exit::ThresholdBreached,
            crate::output::check::failed(failed),
        )),
    }
}

/// Failing checks that do not keep the statistics from being read safely.
const THRESHOLDS_READ_DESPITE: &[&str] = &["referencing key", "identity index"];

/// The threshold rows, each marked as not checked, when a failure above makes reading the
/// statistics unsafe (they would scan the key table) or impossible.
fn thresholds_skipped(args: &CheckArgs, blocking: &[String]) -> Vec<Finding> {
    let why = format!(
        "not checked: the statistics it needs cannot be read safely until {} passes",
        blocking.join(", ")
    );
    let mut rows = vec!["eviction lag".to_owned()];
    if args.max_stuck.is_some() {
        rows.push(format!(
            "stuck keys (> {})",
            human_secs(args.stuck_after.as_secs_f64())
        ));
    }
    rows.push("autovacuum".to_owned());
    if args.min_ttl.is_some() {
        rows.push("recent TTL".to_owned());
    }
    rows.iter()
        .map(|r| finding(r, Status::Note, why.clone(), None))
        .collect()
}

/// How idemctl reaches its server sessions, and what that means for evict and reclaim.
pub(crate) fn connection(route: Option<Route>) -> Finding {
    let Some(route) = route else {
        return finding("connection", Status::Note, "not determined".into(), None);
    };
    let (status, detail) = match route {
        Route::Direct | Route::DeclaredSession => (
            Status::Ok,
            format!(
                "{}; evict and reclaim each hold a per-table lock for the whole run",
                route.describe()
            ),
        ),
        Route::DetectedPooler | Route::DeclaredTransaction => (
            Status::Note,
            format!(
                "{}; evict and reclaim hold no lock beyond a transaction, so two runs on one \
                 table may overlap (they share the rows; none is changed twice); behind a \
                 session-mode pooler, --pool-mode session keeps runs apart",
                route.describe()
            ),
        ),
    };
    finding("connection", status, detail, None)
}

/// Whether evict and reclaim can change anything on this session.
pub(crate) fn writes(writability: Writability) -> Finding {
    match writability.problem() {
        None => finding("writes", Status::Ok, "the session can write".into(), None),
        Some(why) => finding(
            "writes",
            Status::Note,
            format!("evict and reclaim refuse to run here: {why}"),
            None,
        ),
    }
}

/// Columns and indexes.
pub(crate) fn structure(table: &KeyTable) -> Vec<Finding> {
    let mut out = Vec::new();
    let p = &table.profile;
    out.push(finding(
        "profile",
        Status::Ok,
        format!("{}: {}", p.name, &p.matched_because),
        None,
    ));
    let problems = table.column_problems();
    let time_problem = p.time_problem(&table.columns);
    if problems.is_empty() && time_problem.is_none() {
        out.push(finding(
            "columns",
            Status::Ok,
            format!("every column profile {} names, with a usable type", p.name),
            None,
        ));
    }
    // The table belongs to the application: a mismatch is fixed by choosing or mapping the
    // profile, never by changing the table.
    for (name, found, types) in problems {
        let detail = match &found {
            None => format!("column {name} (profile {}) is missing", p.name),
            Some(t) => format!(
                "column {name} is {}, profile {} expects {}",
                t,
                p.name,
                types.join(" or ")
            ),
        };
        let fix = "choose the profile that fits with --profile, or map the table's columns in a config file (--config)".to_owned();
        out.push(finding("columns", Status::Fail, detail, Some(fix)));
    }
    if let Some(why) = time_problem {
        out.push(finding("columns", Status::Fail, why, None));
    }
    if p.lacks_ttl() {
        out.push(finding(
            "expiry",
            Status::Fail,
            format!(
                "the table has no expiry column: keys expire a TTL after {}, which evict and stats need to know",
                &p.created_at
            ),
            Some("pass --ttl DUR (or set IDEMCTL_TTL, or ttl in the config file)".into()),
        ));
    }
    out.push(match table.expiry_index() {
        Some(i) => finding(
            "expiry index",
            Status::Ok,
            format!(
                "{} orders keys by {}",
                i.name,
                table.profile.expiry_column()
            ),
            None,
        ),
        None if let Some(walked) = table.walk_index() => finding(
            "expiry index",
            Status::Warn,
            format!(
                "no valid index on {}: evict walks {} instead, reading every key of the table in bounded pages each run to find the expired ones (its summary counts the rows examined per row evicted), and stats estimates the backlog and cannot tell the lag{}",
                table.profile.expiry_column(),
                walked.name,
                if table.profile.expires_by_ttl() {
                    format!("; creating the index costs {}", index_write_cost(false))
                } else {
                    String::new()
                }
            ),
            Some(table.expiry_index_fix()),
        ),
        None => finding(
            "expiry index",
            Status::Fail,
            format!(
                "no valid index on {}: eviction, lag and backlog cannot be index-backed{}",
                table.profile.expiry_column(),
                // On a TTL table the index is one the application's own schema does not have:
                // say what it costs the API, as for the in_progress index.
                if table.profile.expires_by_ttl() {
                    format!("; creating it costs {}", index_write_cost(false))
                } else {
                    String::new()
                }
            ),
            Some(table.expiry_index_fix()),
        ),
    });
    out.push(match table.identity_index() {
        Some(i) if !table.identity_is_global() => finding(
            "identity index",
            Status::Note,
            format!(
                "{} identifies a row by ({}); it includes the partition key, as PostgreSQL requires of a unique index on a partitioned table, so the database enforces it only within one partition: keeping {} unique across partitions is the API's business (an insert of an existing key with another {} is not refused)",
                i.name,
                i.columns.join(", "),
                table.identity_label(),
                table.partition_key().join(", ")
            ),
            None,
        ),
        Some(i) => finding(
            "identity index",
            Status::Ok,
            format!(
                "{} is unique on ({}), so {} identifies a row",
                i.name,
                i.columns.join(", "),
                table.identity_label()
            ),
            None,
        ),
        // The table's own identity is wider than the mapping's (a primary key of more columns):
        // an index on the mapping's columns would refuse rows the application writes.
        None if let Some(i) = table.wider_identity_index() => finding(
            "identity index",
            Status::Warn,
            format!(
                "{} makes a key unique only within ({}), wider than the mapping's {}: the same key may exist under several values of the other columns (inspect lists them); no index is proposed, since one on {} would refuse the application's rows",
                i.name,
                i.columns.join(", "),
                table.identity_label(),
                table.identity_label()
            ),
            None,
        ),
        // No unique index implies the identity: idemctl never proposes one (it could refuse rows
        // already written), only the plain index lookups need.
        None if table.has_tenant_key_index() => finding(
            "identity index",
            Status::Warn,
            crate::output::check::identity_not_enforced(table),
            None,
        ),
        None => finding(
            "identity index",
            Status::Fail,
            crate::output::check::identity_not_enforced(table),
            Some(table.lookup_index_fix()),
        ),
    });
    out.push(match table.stuck_index() {
        None if !p.has_in_flight_marker() => finding(
            "in_progress index",
            Status::Ok,
            crate::output::stats::no_in_flight_marker(&table.qualified_name(), &table.profile.name),
            None,
        ),
        Some(i) => finding(
            "in_progress index",
            Status::Ok,
            format!("{} makes reclaim and stuck counts index-backed; it costs the API's completion UPDATE its HOT path", i.name),
            None,
        ),
        None => finding(
            "in_progress index",
            Status::Note,
            format!(
                "optional index absent: reclaim and stuck-key counts need --allow-scan (a full table read). Creating it makes them index-backed, but it costs {}",
                index_write_cost(true)
            ),
            Some(table.stuck_index_fix()),
        ),
    });
    out
}

/// What an index costs the API's writes, for the findings that propose one: every insert adds an
/// entry, and an index on a column the completion UPDATE writes makes that UPDATE non-HOT (every
/// index touched), the cost measured for the in_progress index.
fn index_write_cost(written_by_completion: bool) -> String {
    if written_by_completion {
        "every completion UPDATE: it then touches all indexes (no HOT update; about +9% write latency measured)".to_owned()
    } else {
        "one more index entry per insert; the completion UPDATE does not write its column, so it stays a HOT update (no write latency measurable: 0.97x, bench/index-cost)".to_owned()
    }
}

/// The foreign keys that reference the key table: every evicted key runs their ON DELETE action
/// inside evict's batch (its timing includes that work), and scans the referencing table when no
/// index leads with the referencing columns. A NO ACTION / RESTRICT key keeps a referenced key
/// from being deleted: evict leaves it behind (`still_referenced`: of the oldest expired keys
/// examined, how many are, when counted).
pub(crate) fn referencing(
    keys: &[crate::report::rows::ReferencingKey],
    still_referenced: &[Option<(i64, i64)>],
    role: &str,
) -> Vec<Finding> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| {
            let columns = k.columns.join(", ");
            let referencing = k.referencing_table.clone();
            let what = format!(
                "{referencing} ({columns}) references the table ON DELETE {} ({})",
                k.on_delete,
                &k.name
            );
            let quoted_columns = k
                .columns
                .iter()
                .map(|c| crate::db::table::quote_ident(c))
                .collect::<Vec<_>>()
                .join(", ");
            if !k.indexed {
                let effect = if k.blocks() {
                    "each evicted key would scan it to prove nothing references the key"
                } else {
                    "evict's batches include that work"
                };
                return finding(
                    "referencing key",
                    Status::Fail,
                    format!(
                        "{what}; no index leads with ({columns}), so every evicted key scans {referencing} ({effect})"
                    ),
                    Some(format!(
                        "CREATE INDEX CONCURRENTLY ON {} ({quoted_columns});",
                        k.referencing_quoted
                    )),
                );
            }
            let grant = |what: &str| {
                Some(format!(
                    "GRANT {what} ON {} TO {};",
                    k.referencing_quoted,
                    crate::db::table::quote_ident(role)
                ))
            };
            if k.blocks() {
                if !k.may_read {
                    return finding(
                        "referencing key",
                        Status::Warn,
                        format!(
                            "{what}; indexed, but this role may not read {referencing}, so evict cannot leave out the keys it still references: a batch that meets one fails"
                        ),
                        grant("SELECT"),
                    );
                }
                let counted = match still_referenced.get(i).copied().flatten() {
                    Some((n, examined)) => format!(
                        " ({n} of the oldest {examined} expired keys are referenced now)"
                    ),
                    None => String::new(),
                };
                return finding(
                    "referencing key",
                    Status::Warn,
                    format!(
                        "{what}; indexed, but evict leaves the expired keys it still references behind (counted as skipped_referenced){counted}: they go once nothing references them"
                    ),
                    None,
                );
            }
            if !k.may_lock {
                return finding(
                    "referencing key",
                    Status::Note,
                    format!(
                        "{what}; indexed, so evict's batches include that work, but this role may not lock {referencing}'s rows: a live transaction holding a referencing row makes evict's batches wait on it up to lock_timeout and fail"
                    ),
                    grant("SELECT, UPDATE"),
                );
            }
            finding(
                "referencing key",
                Status::Ok,
                format!(
                    "{what}; indexed, so evict's batches include that work (a key whose referencing row a live transaction holds is left to the next run)"
                ),
                None,
            )
        })
        .collect()
}

/// How a partitioned table is laid out, and what that means for evict.
fn partitioning(table: &KeyTable, r: &stats::StatsReport) -> Vec<Finding> {
    let (Some(how), Some(parts)) = (&r.partitioning, &r.partitions) else {
        return Vec::new();
    };
    let definition = how.definition.clone();
    let mut out = vec![finding(
        "partitioning",
        Status::Ok,
        format!(
            "{definition}, {} leaf partitions; every statement reaches them through the partitions' copies of the table's indexes",
            parts.len()
        ),
        None,
    )];
    if let Some(p) = r.default_partition().filter(|p| p.estimated_rows > 0) {
        out.push(finding(
            "default partition",
            Status::Note,
            format!(
                "{} holds about {} rows: keys fell outside every partition's range, so partition maintenance (e.g. pg_partman's run_maintenance) is behind; evict deletes them in batches, --drop-partitions never drops the default partition",
                p.name, p.estimated_rows
            ),
            None,
        ));
    }
    let drop = match table.range_key() {
        None => finding(
            "evict --drop-partitions",
            Status::Note,
            format!("not available: it needs RANGE partitioning on expires_at or created_at, not {definition}; evict deletes in batches"),
            None,
        ),
        Some(_) if table.stuck_index().is_none() && table.profile.has_in_flight_marker() => finding(
            "evict --drop-partitions",
            Status::Note,
            "not available without the optional in_progress index, which proves a partition holds no in_progress key while it is locked".into(),
            Some(table.stuck_index_fix()),
        ),
        Some(key) => finding(
            "evict --drop-partitions",
            Status::Ok,
            format!(
                "available: a partition whose {} range has passed is dropped whole when it holds no in_progress or unexpired key (needs ownership of the table)",
                key.column()
            ),
            None,
        ),
    };
    out.push(drop);
    out
}

/// What each command needs, against what the role has. On a session that cannot write, the
/// evict and reclaim rows say that those commands refuse here (exit 6) instead of "ok".
pub(crate) fn privileges(
    table: &KeyTable,
    p: &Privileges,
    writability: Writability,
) -> Vec<Finding> {
    let role = p.role.clone();
    let grant = |what: &str| {
        format!(
            "GRANT {what} ON {} TO {};",
            table.quoted,
            crate::db::table::quote_ident(&p.role)
        )
    };
    let mut out = Vec::new();
    let missing = |job: Job| -> Vec<String> {
        table
            .privilege_needs(p, job)
            .into_iter()
            .filter(|(_, has)| !has)
            .map(|(g, _)| g)
            .collect()
    };
    let read_missing = missing(Job::Read);
    out.push(if read_missing.is_empty() {
        finding(
            "privileges: inspect, stats, check",
            Status::Ok,
            format!("{role} may SELECT"),
            None,
        )
    } else {
        finding(
            "privileges: inspect, stats, check",
            Status::Fail,
            format!("{role} lacks {}", read_missing.join(", ")),
            Some(grant(&read_missing.join(", "))),
        )
    });
    // Granted privileges are no use on a session that cannot write.
    let granted_but = |what: String, command: &str| match writability.problem() {
        None => (Status::Ok, what),
        Some(why) => (
            Status::Note,
            format!("{what}, but {command} refuses to run here (exit 6): {why}"),
        ),
    };
    let evict_missing = missing(Job::Evict);
    out.push(if evict_missing.is_empty() {
        let (status, detail) =
            granted_but(format!("{role} may SELECT, DELETE and lock rows"), "evict");
        finding("privileges: evict", status, detail, None)
    } else {
        finding(
            "privileges: evict",
            Status::Note,
            format!(
                "{role} lacks {} (needed only to run evict; row locks need UPDATE on a column)",
                evict_missing.join(", ")
            ),
            Some(
                evict_missing
                    .iter()
                    .map(|m| grant(m))
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
        )
    });
    if table.range_key().is_some() {
        out.push(if p.owner {
            finding(
                "privileges: evict --drop-partitions",
                Status::Ok,
                format!("{role} owns the table, so it may detach and drop partitions"),
                None,
            )
        } else {
            finding(
                "privileges: evict --drop-partitions",
                Status::Note,
                format!("{role} does not own the table (needed only to detach and drop partitions; evict without the flag deletes in batches)"),
                None,
            )
        });
    }
    // Only the actions the table's profile allows are worth a grant.
    let actions = &table.profile.actions;
    let (able, unable): (Vec<_>, Vec<_>) = actions
        .iter()
        .map(|a| (*a, missing(Job::Reclaim(*a))))
        .partition(|(_, m)| m.is_empty());
    let names = |list: &[(ReclaimAction, Vec<String>)]| {
        list.iter()
            .map(|(a, _)| format!("--action {}", action_name(*a)))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    let (status, detail, fix) = if actions.is_empty() {
        (
            Status::Note,
            format!("profile {} allows no reclaim action", table.profile.name),
            None,
        )
    } else if unable.is_empty() {
        let (status, detail) = granted_but(
            format!("{role} may reclaim with {}", names(&able)),
            "reclaim",
        );
        (status, detail, None)
    } else {
        let mut lacks: Vec<String> = Vec::new();
        for (_, m) in &unable {
            for g in m {
                if !lacks.contains(g) {
                    lacks.push(g.clone());
                }
            }
        }
        let detail = if able.is_empty() {
            format!(
                "{role} may not reclaim (needed only to run reclaim): {} needs {}",
                names(&unable),
                lacks.join(", ")
            )
        } else {
            format!(
                "{role} may reclaim with {}; {} also needs {}",
                names(&able),
                names(&unable),
                lacks.join(", ")
            )
        };
        (Status::Note, detail, Some(grant(&lacks.join(", "))))
    };
    out.push(finding("privileges: reclaim", status, detail, fix));
    out
}

fn thresholds(r: &stats::StatsReport, args: &CheckArgs) -> Vec<Finding> {
    let mut out = Vec::new();
    if r.expiry_figures != stats::ExpiryFigures::Exact {
        out.push(finding(
            "eviction lag",
            Status::Note,
            "not checked: the lag is unknown without the expiry index (or a TTL)".into(),
            None,
        ));
        out.extend(stuck_and_ttl(r, args));
        return out;
    }
    let lag = r.eviction_lag_seconds;
    // Each of the oldest expired keys stats examined is still referenced and more wait beyond
    // them: the lag is at most the newest one's wait, and past the threshold it is not evict's.
    let at_most = r.referenced_expired.as_ref().filter(|x| x.lag_at_most);
    let shown = crate::output::check::lag(lag, at_most);
    match args.max_eviction_lag {
        Some(max) if lag > max.as_secs_f64() => out.push(match at_most {
            Some(x) => finding(
                "eviction lag",
                Status::Warn,
                crate::output::check::lag_unknown(x, lag, max.as_secs_f64()),
                None,
            ),
            None => finding(
                "eviction lag",
                Status::Breached,
                format!(
                    "eviction lag {shown} exceeds --max-eviction-lag {}; is the evict job running?",
                    human_secs(max.as_secs_f64())
                ),
                None,
            ),
        }),
        Some(max) => out.push(finding(
            "eviction lag",
            Status::Ok,
            format!(
                "eviction lag {shown} within {}",
                human_secs(max.as_secs_f64())
            ),
            None,
        )),
        None => out.push(finding(
            "eviction lag",
            Status::Note,
            format!("eviction lag {shown} (no threshold set)"),
            None,
        )),
    }
    out.extend(stuck_and_ttl(r, args));
    out
}

/// The stuck-key, autovacuum and recent-TTL threshold rows.
fn stuck_and_ttl(r: &stats::StatsReport, args: &CheckArgs) -> Vec<Finding> {
    let mut out = Vec::new();
    let stuck_label = format!("stuck keys (> {})", human_secs(r.stuck_after_seconds));
    match (&r.stuck, args.max_stuck) {
        (None, Some(_)) => out.push(finding(
            &stuck_label,
            Status::Fail,
            "--max-stuck needs the optional in_progress index or --allow-scan".into(),
            None,
        )),
        (Some(st), Some(max)) if st.count.count as u64 > max => out.push(finding(
            &stuck_label,
            Status::Breached,
            format!("{} stuck in_progress keys exceed --max-stuck {max}; see `idemctl reclaim --dry-run`", st.count),
            None,
        )),
        (Some(st), Some(max)) => out.push(finding(&stuck_label, Status::Ok, format!("{} within {max}", st.count), None)),
        (Some(st), None) => out.push(finding(&stuck_label, Status::Note, format!("{} (no threshold set)", st.count), None)),
        (None, None) => {}
    }
    out.extend(maintenance(r, args));
    out
}

/// Autovacuum against the eviction interval, and --min-ttl against recent keys.
fn maintenance(r: &stats::StatsReport, args: &CheckArgs) -> Vec<Finding> {
    use crate::commands::maintenance as m;
    let mut out = Vec::new();
    match m::autovacuum_advice(&r.maintenance, args.evict_interval) {
        Some((detail, fix)) => out.push(finding("autovacuum", Status::Warn, detail, Some(fix))),
        None => out.push(finding(
            "autovacuum",
            Status::Ok,
            match r.maintenance.cycle_seconds {
                Some(c) => format!(
                    "eviction's dead rows wait up to about {} for autovacuum (eviction every {})",
                    human_secs(c),
                    human_secs(args.evict_interval.as_secs_f64())
                ),
                None => "no recent keys to estimate the eviction rate from".into(),
            },
            None,
        )),
    }
    if let Some(min) = args.min_ttl {
        match &r.recent_ttl {
            None => out.push(finding(
                "recent TTL",
                Status::Note,
                "no keys to sample".into(),
                None,
            )),
            Some(t) => match m::short_ttl(t, min) {
                Some(detail) => out.push(finding("recent TTL", Status::Breached, detail, None)),
                None => out.push(finding(
                    "recent TTL",
                    Status::Ok,
                    format!(
                        "recent keys live at least {} (--min-ttl {})",
                        human_secs(t.min_seconds),
                        human_secs(min.as_secs_f64())
                    ),
                    None,
                )),
            },
        }
    }
    out
}

fn action_name(a: ReclaimAction) -> &'static str {
    match a {
        ReclaimAction::Delete => "delete",
        ReclaimAction::Fail => "fail",
        ReclaimAction::Release => "release",
    }
}
