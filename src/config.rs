//! The configuration file (`--config FILE`, `IDEMCTL_CONFIG`), in TOML: connection and table
//! defaults (`database_url` or `service`, `table`, `profile`, `ttl`) and `[profiles.NAME]`
//! mappings that say which column of any other key table plays which role. Flags win over
//! environment variables, which win over the file, which wins over the built-in defaults.
//!
//! Everything is checked before connecting; a mistake is one line naming the file, the key and
//! what to write instead (exit 2). Column names are checked against the catalog once the table is
//! read, and always quoted; an in-flight predicate is parsed by [`Pred::parse`], never spliced.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Result;
use serde::Deserialize;

use crate::cli::{Given, GlobalArgs};
use crate::conn::Env;
use crate::db::predicate::Pred;
use crate::db::profile::{self, Expiry, FingerprintKind, InFlight, Profile};
use crate::domain::{ColorChoice, OutputFormat, PoolMode, ReclaimAction, TableName};
use crate::report::failure::UrlSource;
use crate::report::failure::{ActionProblem, ConfigFailure, ConfigProblem};

/// What a config file sets.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// The file as named, for messages.
    pub path: String,
    /// `database_url`, or `service = "NAME"` as the conninfo `service=NAME`.
    pub database_url: Option<String>,
    pub table: Option<TableName>,
    pub profile: Option<String>,
    pub ttl: Option<Duration>,
    /// `allow_short_ttl = true` at the top of the file: a TTL under 1h needs no --force.
    pub allow_short_ttl: bool,
    /// The mappings whose section sets `allow_short_ttl = true`.
    pub short_ttl_mappings: Vec<String>,
    /// The zone `timestamp without time zone` columns are written in, for any profile.
    pub time_zone: Option<String>,
    /// The `[profiles.NAME]` mappings, by name.
    pub mappings: Vec<Profile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    database_url: Option<String>,
    service: Option<String>,
    table: Option<String>,
    profile: Option<String>,
    ttl: Option<String>,
    allow_short_ttl: Option<bool>,
    time_zone: Option<String>,
    #[serde(default)]
    profiles: BTreeMap<String, RawMapping>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMapping {
    key: String,
    allow_short_ttl: Option<bool>,
    tenant: Option<RawScope>,
    created_at: Option<String>,
    expires_at: Option<String>,
    in_flight: Option<RawInFlight>,
    locked_at: Option<String>,
    request_method: Option<String>,
    request_path: Option<String>,
    fingerprint: Option<String>,
    response_status: Option<String>,
    response_body: Option<String>,
    time_zone: Option<String>,
    #[serde(default)]
    actions: Vec<ReclaimAction>,
}

/// A mapping's scope: one column (`tenant = "account_id"`) or several (`tenant = ["type",
/// "client"]`), a key being unique only within the values of all of them.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "tenant is a column name or a list of column names"
)]
enum RawScope {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawInFlight {
    column: Option<String>,
    values: Option<Vec<String>>,
    done: Option<Vec<String>>,
    predicate: Option<String>,
}

/// A refusal naming the file and the key.
fn bad(path: &str, key: &str, problem: ConfigProblem) -> anyhow::Error {
    anyhow::Error::new(ConfigFailure::Key {
        path: path.to_owned(),
        key: key.to_owned(),
        problem,
    })
}

/// Read and check the file at `path`.
pub fn load(path: &Path) -> Result<Config> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        anyhow::Error::new(ConfigFailure::Unreadable {
            path: shown.clone(),
            error: e.to_string(),
        })
    })?;
    parse(&shown, &text)
}

/// Check a config file's text; `path` names it in messages.
pub fn parse(path: &str, text: &str) -> Result<Config> {
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let message = e.message().replace('\n', " ");
        anyhow::Error::new(ConfigFailure::Syntax {
            path: path.to_owned(),
            line,
            message: message.trim_end_matches('.').to_owned(),
        })
    })?;
    let database_url = match (raw.database_url, raw.service) {
        (Some(_), Some(_)) => {
            return Err(bad(path, "service", ConfigProblem::UrlAndService));
        }
        (Some(url), None) => Some(url),
        (None, Some(service)) => {
            if service.is_empty() || service.chars().any(|c| c.is_whitespace() || c == '\'') {
                return Err(bad(path, "service", ConfigProblem::ServiceName));
            }
            Some(format!("service={service}"))
        }
        (None, None) => None,
    };
    let table = raw
        .table
        .map(|t| {
            crate::cli::parse_table_name(&t)
                .map_err(|e| bad(path, "table", ConfigProblem::Parser(e)))
        })
        .transpose()?;
    let ttl = raw
        .ttl
        .map(|t| {
            crate::cli::parse_positive_duration(&t)
                .map_err(|error| bad(path, "ttl", ConfigProblem::Ttl { given: t, error }))
        })
        .transpose()?;
    let time_zone = raw
        .time_zone
        .map(|z| zone(path, "time_zone", z))
        .transpose()?;
    let mut mappings = Vec::new();
    let mut short_ttl_mappings = Vec::new();
    for (name, m) in raw.profiles {
        if m.allow_short_ttl == Some(true) {
            short_ttl_mappings.push(name.clone());
        }
        mappings.push(mapping(path, &name, m)?);
    }
    if let Some(p) = &raw.profile
        && Profile::builtin(p).is_none()
        && !mappings.iter().any(|m| &m.name == p)
    {
        return Err(bad(
            path,
            "profile",
            ConfigProblem::NoSuchProfile {
                name: p.clone(),
                builtin: profile::BUILTIN.to_vec(),
            },
        ));
    }
    Ok(Config {
        path: path.to_owned(),
        database_url,
        table,
        profile: raw.profile,
        ttl,
        allow_short_ttl: raw.allow_short_ttl == Some(true),
        short_ttl_mappings,
        time_zone,
        mappings,
    })
}

/// A time zone as written in the file: its form is checked here, the name by the server once
/// connected (before any change).
fn zone(path: &str, key: &str, z: String) -> Result<String> {
    crate::cli::parse_time_zone(&z).map_err(|e| bad(path, key, ConfigProblem::Parser(e)))
}

/// The scope's columns, in order: none, one, or several distinct ones.
fn scope(path: &str, key: &str, raw: Option<RawScope>) -> Result<Vec<String>> {
    let names = match raw {
        None => return Ok(Vec::new()),
        Some(RawScope::One(name)) => vec![name],
        Some(RawScope::Many(names)) => names,
    };
    if names.is_empty() {
        return Err(bad(path, key, ConfigProblem::NoScopeColumns));
    }
    let mut out: Vec<String> = Vec::with_capacity(names.len());
    for name in names {
        let name = column(path, key, name)?;
        if out.contains(&name) {
            return Err(bad(path, key, ConfigProblem::ColumnTwice(name)));
        }
        out.push(name);
    }
    Ok(out)
}

fn column(path: &str, key: &str, name: String) -> Result<String> {
    if name.is_empty() || name.len() > 63 || name.chars().any(char::is_control) {
        return Err(bad(path, key, ConfigProblem::ColumnName));
    }
    Ok(name)
}

/// A mapping's name: letters, digits, - and _, and not a built-in profile's.
fn check_mapping_name(path: &str, name: &str) -> Result<()> {
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid_name || Profile::builtin(name).is_some() {
        return Err(bad(
            path,
            &format!("profiles.{}", name),
            ConfigProblem::MappingName {
                builtin: profile::BUILTIN.to_vec(),
            },
        ));
    }
    Ok(())
}

/// A mapping's `in_flight`: a predicate, or a state column with its in-flight and done values.
fn in_flight(path: &str, name: &str, raw: Option<RawInFlight>) -> Result<InFlight> {
    let at = |k: &str| format!("profiles.{name}.{k}");
    Ok(match raw {
        None => InFlight::None,
        Some(RawInFlight {
            predicate: Some(text),
            column: None,
            values: None,
            done: None,
        }) => {
            let parsed = Pred::parse(&text).map_err(|e| {
                bad(
                    path,
                    &at("in_flight.predicate"),
                    ConfigProblem::Predicate(e.to_string()),
                )
            })?;
            InFlight::Mapped {
                predicate: text,
                parsed,
            }
        }
        Some(RawInFlight {
            predicate: None,
            column: Some(c),
            values,
            done,
        }) => {
            let values = values.unwrap_or_default();
            let done = done.unwrap_or_default();
            if values.is_empty() {
                return Err(bad(
                    path,
                    &at("in_flight.values"),
                    ConfigProblem::NoInFlightValues,
                ));
            }
            if done.is_empty() {
                return Err(bad(
                    path,
                    &at("in_flight.done"),
                    ConfigProblem::NoDoneValues,
                ));
            }
            if let Some(both) = values.iter().find(|v| done.contains(v)) {
                return Err(bad(
                    path,
                    &at("in_flight"),
                    ConfigProblem::StateInBoth(both.clone()),
                ));
            }
            InFlight::State {
                column: column(path, &at("in_flight.column"), c)?,
                in_flight: values,
                done,
            }
        }
        Some(RawInFlight {
            predicate: None,
            column: None,
            ..
        }) => {
            return Err(bad(path, &at("in_flight"), ConfigProblem::InFlightMissing));
        }
        Some(_) => {
            return Err(bad(path, &at("in_flight"), ConfigProblem::InFlightBoth));
        }
    })
}

/// One `[profiles.NAME]` section as a profile, every column and rule checked.
fn mapping(path: &str, name: &str, m: RawMapping) -> Result<Profile> {
    let at = |k: &str| format!("profiles.{name}.{k}");
    check_mapping_name(path, name)?;
    let opt = |k: &str, v: Option<String>| v.map(|v| column(path, &at(k), v)).transpose();
    let in_flight = in_flight(path, name, m.in_flight)?;
    let mut p = Profile {
        name: name.to_owned(),
        key: column(path, &at("key"), m.key)?,
        tenant: scope(path, &at("tenant"), m.tenant)?,
        created_at: column(
            path,
            &at("created_at"),
            m.created_at.unwrap_or_else(|| "created_at".to_owned()),
        )?,
        expiry: match opt("expires_at", m.expires_at)? {
            Some(column) => Expiry::Column { column },
            None => Expiry::CreatedPlusTtl {
                ttl: None,
                ttl_seconds: None,
            },
        },
        in_flight,
        locked_at: opt("locked_at", m.locked_at)?,
        request_method: opt("request_method", m.request_method)?,
        request_path: opt("request_path", m.request_path)?,
        // bytea or hex text: which one is read from the catalog.
        fingerprint: opt("fingerprint", m.fingerprint)?.map(|c| (c, FingerprintKind::Hex)),
        response_status: opt("response_status", m.response_status)?,
        response_body: opt("response_body", m.response_body)?,
        time_zone: m
            .time_zone
            .map(|z| zone(path, &at("time_zone"), z))
            .transpose()?,
        naive_times: false,
        actions: Vec::new(),
        tenant_types: Vec::new(),
        key_type: "text".to_owned(),
        body_type: "jsonb".to_owned(),
        row_identity: Vec::new(),
        scope_nulls: Vec::new(),
        scope_walk: Vec::new(),
        matched_because: None,
        origin: Some(crate::output::errors::mapping_origin(path, name)),
    };
    p.actions = actions(path, name, &p, m.actions)?;
    Ok(p)
}

/// A mapping's `actions`, each once and each one it can carry out.
fn actions(
    path: &str,
    name: &str,
    p: &Profile,
    listed: Vec<ReclaimAction>,
) -> Result<Vec<ReclaimAction>> {
    let at = format!("profiles.{name}.actions");
    let mut actions = Vec::new();
    for action in listed {
        if actions.contains(&action) {
            return Err(bad(path, &at, ConfigProblem::ActionTwice));
        }
        if let Some(why) = action_problem(p, action) {
            return Err(bad(path, &at, ConfigProblem::Action(why)));
        }
        actions.push(action);
    }
    Ok(actions)
}

/// Why `action` cannot be allowed on a mapping: it needs columns to write, and what it writes must
/// end the key's in-flight state (or the same key would be reclaimed again at every run).
fn action_problem(p: &Profile, action: ReclaimAction) -> Option<ActionProblem> {
    let reads = |c: &Option<String>| {
        c.as_ref().is_some_and(|c| match &p.in_flight {
            InFlight::Mapped { parsed, .. } => parsed.columns().contains(c),
            _ => false,
        })
    };
    if !p.has_in_flight_marker() {
        return Some(ActionProblem::NoInFlightMarker);
    }
    match action {
        ReclaimAction::Delete => None,
        ReclaimAction::Fail if p.response_status.is_none() || p.response_body.is_none() => {
            Some(ActionProblem::FailWithoutResponse)
        }
        ReclaimAction::Fail => match &p.in_flight {
            InFlight::State { .. } => None,
            _ if reads(&p.response_status) || reads(&p.response_body) => None,
            _ => Some(ActionProblem::FailLeavesInFlight),
        },
        ReclaimAction::Release if p.locked_at.is_none() => Some(ActionProblem::ReleaseWithoutLock),
        ReclaimAction::Release if reads(&p.locked_at) => None,
        ReclaimAction::Release => Some(ActionProblem::ReleaseLeavesInFlight),
    }
}

/// The run's global settings, resolved once before any work from the flags, the environment and
/// the config file (in that order of precedence), and never changed afterwards.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The connection string, if any (else PG* variables and libpq's defaults).
    pub database_url: Option<String>,
    /// Where the connection string came from (`--database-url`, `IDEMCTL_DATABASE_URL`,
    /// `DATABASE_URL`, or the config file), for messages about it.
    pub database_url_from: UrlSource,
    pub table: TableName,
    /// The profile named, if any; a mapping of the config file in `mapping`.
    pub profile: Option<String>,
    /// Where the profile was named (`--profile`, `IDEMCTL_PROFILE`, or the config file).
    pub profile_from: String,
    /// The config file's mapping that applies to the table, if any.
    pub mapping: Option<Profile>,
    pub ttl: Option<Duration>,
    /// Where the TTL came from (`--ttl`, `IDEMCTL_TTL`, or the config file); empty without one.
    pub ttl_from: String,
    /// Whether the config file allows a TTL under 1h without --force (`allow_short_ttl`, at its
    /// top or in the section of the mapping that applies).
    pub short_ttl_allowed: bool,
    pub time_zone: Option<String>,
    /// Where the time zone was named (`--time-zone`, `IDEMCTL_TIME_ZONE` or the config file).
    pub time_zone_from: String,
    /// The output format asked for (`auto` unless given).
    pub output: OutputFormat,
    pub quiet: bool,
    pub color: ColorChoice,
    /// NO_COLOR is set (non-empty) or TERM is `dumb`.
    pub no_color: bool,
    pub connect_timeout: Option<Duration>,
    pub statement_timeout: Duration,
    /// --statement-timeout was given: it holds whatever the session's own setting says.
    pub statement_timeout_given: bool,
    pub lock_timeout: Duration,
    pub idle_in_transaction_timeout: Duration,
    pub pool_mode: PoolMode,
}

impl Plan {
    /// Resolve the global options: the flags and their variables as clap parsed them (`given`
    /// says which were given), `DATABASE_URL`, NO_COLOR and TERM from `env`, then the file that
    /// `--config` (or IDEMCTL_CONFIG) names, if any, for what they left unset.
    pub(crate) fn resolve(args: GlobalArgs, given: &Given, env: &dyn Env) -> Result<Plan> {
        let from = |g: Option<&str>| g.unwrap_or_default().to_owned();
        // An empty value names no file and no profile (as an empty connection string is none),
        // so an environment template may leave IDEMCTL_CONFIG or IDEMCTL_PROFILE empty.
        let env_url = env.var("DATABASE_URL").filter(|v| !v.is_empty());
        let mut plan = Plan {
            database_url_from: match given
                .database_url
                .or(env_url.as_ref().map(|_| "DATABASE_URL"))
            {
                Some("--database-url") | None => UrlSource::Option,
                Some(var) => UrlSource::Env(var),
            },
            database_url: args.database_url.or(env_url),
            table: args.table,
            profile: args.profile.filter(|p| !p.is_empty()),
            profile_from: from(given.profile),
            mapping: None,
            ttl: args.ttl,
            ttl_from: from(given.ttl),
            short_ttl_allowed: false,
            time_zone: args.time_zone,
            time_zone_from: from(given.time_zone),
            output: args.output,
            quiet: args.quiet,
            color: args.color,
            no_color: env.var("NO_COLOR").is_some_and(|v| !v.is_empty())
                || env.var("TERM").is_some_and(|t| t == "dumb"),
            connect_timeout: args.connect_timeout,
            statement_timeout: args.statement_timeout,
            statement_timeout_given: given.statement_timeout,
            lock_timeout: args.lock_timeout,
            idle_in_transaction_timeout: args.idle_in_transaction_timeout,
            pool_mode: args.pool_mode,
        };
        if let Some(path) = args.config.filter(|p| !p.as_os_str().is_empty()) {
            plan.fill_from(&load(&path)?, given)?;
        }
        Ok(plan)
    }

    /// Fill in from the config file `c` what the flags and the environment left unset, and choose
    /// the mapping that applies.
    fn fill_from(&mut self, c: &Config, given: &Given) -> Result<()> {
        let by = |key: &str| crate::output::errors::set_in_config_file(key, &c.path);
        if self.database_url.is_none() && c.database_url.is_some() {
            self.database_url.clone_from(&c.database_url);
            self.database_url_from = UrlSource::ConfigFile(c.path.clone());
        }
        if let Some(t) = c.table.as_ref().filter(|_| !given.table) {
            self.table = t.clone();
        }
        if self.profile.is_none() && c.profile.is_some() {
            self.profile.clone_from(&c.profile);
            self.profile_from = by("profile");
        }
        if self.ttl.is_none() && c.ttl.is_some() {
            self.ttl = c.ttl;
            self.ttl_from = by("ttl");
        }
        if self.time_zone.is_none() && c.time_zone.is_some() {
            self.time_zone.clone_from(&c.time_zone);
            self.time_zone_from = by("time_zone");
        }
        self.mapping = c.mapping(self.profile.as_deref())?;
        self.short_ttl_allowed = c.allow_short_ttl
            || self
                .mapping
                .as_ref()
                .is_some_and(|m| c.short_ttl_mappings.contains(&m.name));
        Ok(())
    }
}

impl Config {
    /// The mapping to use, given the profile the flags, the environment or the file ask for: the
    /// named mapping, else the file's only mapping when nothing is named; None leaves the choice to
    /// the built-in profiles (forced by name, or detected).
    pub fn mapping(&self, profile: Option<&str>) -> Result<Option<Profile>> {
        let mut chosen = match profile {
            Some(name) => match self.mappings.iter().find(|m| m.name == name) {
                Some(m) => m.clone(),
                None => return Ok(None),
            },
            None => match self.mappings.as_slice() {
                [] => return Ok(None),
                [only] => only.clone(),
                several => {
                    return Err(anyhow::Error::new(ConfigFailure::SeveralMappings {
                        path: self.path.clone(),
                        names: several.iter().map(|m| m.name.clone()).collect(),
                    }));
                }
            },
        };
        chosen.matched_because = Some(crate::report::db::MatchReason::MappingIn {
            origin: chosen.origin.clone(),
            by_name: profile.is_some(),
        });
        Ok(Some(chosen))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Exit;

    fn message(text: &str) -> String {
        let e = parse("idemctl.toml", text).unwrap_err();
        assert_eq!(crate::exit::classify(&e), Exit::Usage);
        format!("{e:#}")
    }

    const MAPPING: &str = r#"
table = "billing.request_keys"
ttl = "48h"
[profiles.billing]
key = "request_id"
tenant = "account"
created_at = "inserted_at"
locked_at = "claimed_at"
response_status = "http_status"
response_body = "reply"
in_flight.predicate = "finished_at IS NULL AND claimed_at IS NOT NULL"
actions = ["release", "delete"]
"#;

    #[test]
    fn reads_defaults_and_a_mapping() {
        let c = parse("f.toml", MAPPING).unwrap();
        assert_eq!(c.ttl, Some(Duration::from_secs(48 * 3600)));
        assert_eq!(c.table.unwrap().to_string(), "billing.request_keys");
        let p = c.mappings[0].clone();
        assert_eq!(p.actions, [ReclaimAction::Release, ReclaimAction::Delete]);
        assert_eq!(
            p.render("{in_flight}", "t"),
            "((\"finished_at\" IS NULL) AND (\"claimed_at\" IS NOT NULL))"
        );
        assert!(p.expires_by_ttl());
    }

    #[test]
    fn every_mistake_names_the_file_and_the_key() {
        assert_eq!(
            message("tll = \"1h\"\n"),
            "config file idemctl.toml: line 1: unknown field `tll`, expected one of `database_url`, `service`, `table`, `profile`, `ttl`, `allow_short_ttl`, `time_zone`, `profiles`; docs/profiles.md lists the keys"
        );
        assert!(message("ttl = \"soon\"").starts_with("config file idemctl.toml: ttl: \"soon\""));
        let m = message(&MAPPING.replace(
            "finished_at IS NULL AND",
            "finished_at IS NULL; DROP TABLE x; AND",
        ));
        assert!(
            m.starts_with(
                "config file idemctl.toml: profiles.billing.in_flight.predicate: unexpected `;`"
            ),
            "{m}"
        );
        let m = message(&MAPPING.replace("\"release\", ", "\"fail\", "));
        assert!(m.contains("profiles.billing.actions: fail writes"), "{m}");
        let m = message(&MAPPING.replace("claimed_at IS NOT NULL", "http_status = 202"));
        assert!(
            m.contains("profiles.billing.actions: release clears"),
            "{m}"
        );
        let m = message(&MAPPING.replace("[profiles.billing]", "[profiles.storage]"));
        assert!(m.contains("profiles.storage: a mapping's name"), "{m}");
        let m = message("profile = \"nope\"");
        assert!(m.contains("profile: no profile nope"), "{m}");
        let m = message("[profiles.x]\nkey = \"k\"\nin_flight.column = \"s\"\n");
        assert!(
            m.contains("profiles.x.in_flight.values: a state column needs values"),
            "{m}"
        );
        let m = message(
            "[profiles.x]\nkey = \"k\"\nin_flight = { column = \"s\", values = [\"a\"] }\n",
        );
        assert!(
            m.contains("profiles.x.in_flight.done: a state column needs done"),
            "{m}"
        );
        let m = message(
            "[profiles.x]\nkey = \"k\"\nin_flight = { column = \"s\", predicate = \"a IS NULL\" }\n",
        );
        assert!(m.contains("profiles.x.in_flight: give either"), "{m}");
    }

    #[test]
    fn a_scope_is_one_column_or_a_list_of_distinct_ones() {
        let scope = |v: &str| {
            parse(
                "f.toml",
                &format!("[profiles.x]\nkey = \"k\"\ntenant = {v}\n"),
            )
        };
        assert_eq!(scope("\"a\"").unwrap().mappings[0].tenant, ["a"]);
        assert_eq!(
            scope("[\"type\", \"client\"]").unwrap().mappings[0].tenant,
            ["type", "client"]
        );
        let m = |v: &str| format!("{:#}", scope(v).unwrap_err());
        assert_eq!(
            m("[]"),
            "config file f.toml: profiles.x.tenant: expected a column name or a list of them (leave tenant out for a table without one)"
        );
        assert_eq!(
            m("[\"a\", \"a\"]"),
            "config file f.toml: profiles.x.tenant: column a is listed twice"
        );
    }

    #[test]
    fn a_mapping_may_omit_in_flight_and_declare_a_time_zone() {
        let c = parse(
            "f.toml",
            "time_zone = \"Europe/Paris\"\n[profiles.x]\nkey = \"k\"\ntime_zone = \"UTC\"\n",
        )
        .unwrap();
        assert_eq!(c.time_zone.as_deref(), Some("Europe/Paris"));
        let p = &c.mappings[0];
        assert!(!p.has_in_flight_marker());
        assert_eq!(p.time_zone.as_deref(), Some("UTC"));
        assert_eq!(p.render("{done} {in_flight}", "t"), "true false");
        let m = message("[profiles.x]\nkey = \"k\"\nactions = [\"delete\"]\n");
        assert!(
            m.contains("profiles.x.actions: reclaim acts on keys stuck in flight"),
            "{m}"
        );
        let m = message("time_zone = \"UTC'; x\"\n");
        assert!(
            m.contains("time_zone: \"UTC'; x\" is not a time zone name"),
            "{m}"
        );
    }

    #[test]
    fn a_service_is_a_conninfo_and_excludes_a_url() {
        let c = parse("f.toml", "service = \"app\"\n").unwrap();
        assert_eq!(c.database_url.as_deref(), Some("service=app"));
        let m = message("service = \"app\"\ndatabase_url = \"host=x\"\n");
        assert!(
            m.contains(": service: database_url and service are both set"),
            "{m}"
        );
        let m = message("service = \"a b\"\n");
        assert!(m.contains(": service: expected the name"), "{m}");
    }

    /// `allow_short_ttl` at the top allows a short TTL whatever mapping applies; in a mapping's
    /// section, only when that mapping applies.
    #[test]
    fn allow_short_ttl_applies_where_it_was_set() {
        let dir = tempfile::tempdir().unwrap();
        let allowed = |text: &str, profile: Option<&str>| {
            let path = dir.path().join("idemctl.toml");
            std::fs::write(&path, text).unwrap();
            let mut args = vec!["idemctl", "--config", path.to_str().unwrap()];
            args.extend(profile.map(|p| ["--profile", p]).into_iter().flatten());
            args.push("stats");
            let (cli, given) = crate::cli::parse(args).unwrap();
            let env = std::collections::HashMap::new();
            Plan::resolve(cli.global, &given, &env)
                .unwrap()
                .short_ttl_allowed
        };
        assert!(!allowed(MAPPING, None));
        assert!(allowed(&format!("allow_short_ttl = true\n{MAPPING}"), None));
        let in_section = MAPPING.replace(
            "[profiles.billing]\n",
            "[profiles.billing]\nallow_short_ttl = true\n",
        );
        assert!(allowed(&in_section, None));
        assert!(!allowed(&in_section, Some("explainer")));
        assert!(
            !allowed("allow_short_ttl = false\n", None),
            "false allows nothing"
        );
    }

    #[test]
    fn several_mappings_need_a_name() {
        let two = format!(
            "{MAPPING}\n{}",
            MAPPING
                .replace("billing", "other")
                .replace("table = \"other.request_keys\"\nttl = \"48h\"\n", "")
        );
        let c = parse("f.toml", &two).unwrap();
        assert!(c.mapping(None).is_err());
        assert_eq!(c.mapping(Some("other")).unwrap().unwrap().name, "other");
        assert!(c.mapping(Some("storage")).unwrap().is_none());
    }
}
