//! Names and values as PostgreSQL writes them in a statement: identifiers quoted always (as idemctl's
//! statements do) or only where needed (as a person would write a fix), and string literals.
//! Nothing here imports another module of idemctl but the domain's terminal test.

use crate::domain::moves_the_terminal;

/// The keywords PostgreSQL restricts as bare column names.
const RESTRICTED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "between",
    "bigint",
    "binary",
    "bit",
    "boolean",
    "both",
    "case",
    "cast",
    "char",
    "character",
    "check",
    "coalesce",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "dec",
    "decimal",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "exists",
    "extract",
    "false",
    "fetch",
    "float",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "greatest",
    "group",
    "grouping",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "inout",
    "int",
    "integer",
    "intersect",
    "interval",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "least",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "national",
    "natural",
    "nchar",
    "none",
    "normalize",
    "not",
    "notnull",
    "null",
    "nullif",
    "numeric",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "out",
    "outer",
    "overlaps",
    "overlay",
    "placing",
    "position",
    "precision",
    "primary",
    "real",
    "references",
    "returning",
    "right",
    "row",
    "select",
    "session_user",
    "setof",
    "similar",
    "smallint",
    "some",
    "substring",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "time",
    "timestamp",
    "to",
    "trailing",
    "treat",
    "trim",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "values",
    "varchar",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

/// An identifier as a person would write it: bare when it is a plain lowercase name that is no
/// keyword PostgreSQL restricts, quoted otherwise (statements idemctl runs always quote).
pub(crate) fn quote_ident_if_needed(c: &str) -> String {
    let plain = c
        .chars()
        .next()
        .is_some_and(|ch| ch.is_ascii_lowercase() || ch == '_')
        && c.chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_')
        && !RESTRICTED.contains(&c);
    if plain { c.to_owned() } else { quote_ident(c) }
}

/// Quote an identifier the way PostgreSQL's `quote_ident` always would. A name holding a control
/// character or a bidirectional override is written in the Unicode-escape form (`U&"a\000Ab"`),
/// the same identifier to the server: a statement printed as a fix then runs as printed and never
/// carries a raw control to the terminal.
pub(crate) fn quote_ident(s: &str) -> String {
    if !s.chars().any(moves_the_terminal) {
        return format!("\"{}\"", s.replace('"', "\"\""));
    }
    let mut out = String::from("U&\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\"\""),
            '\\' => out.push_str("\\\\"),
            c if moves_the_terminal(c) => {
                let n = c as u32;
                if n <= 0xffff {
                    out.push_str(&format!("\\{n:04X}"));
                } else {
                    out.push_str(&format!("\\+{n:06X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A SQL string literal, quotes doubled.
pub(crate) fn literal(v: &str) -> String {
    format!("'{}'", v.replace('\'', "''"))
}
