//! Instants in the JSON of reports and plan files: RFC 3339, as every reader expects. RFC 3339
//! cannot write a year outside 0000-9999 (a row whose clock column holds a date BC, say), so such
//! an instant is written in ISO 8601's expanded form instead (a sign and six year digits,
//! `-000099-01-01T00:00:00.000000000Z`) and read back the same way: one odd row never fails a
//! report or a plan.
//!
//! A time a key table holds is a [`Timestamp`]: an instant, or one of the two infinities that
//! `timestamp` and `timestamptz` add (`'infinity'`, `'-infinity'`), written as PostgreSQL spells
//! them.

use serde::Serializer;
use time::OffsetDateTime;
use time::format_description::well_known::{Iso8601, Rfc3339, iso8601};

/// ISO 8601 with the year as a sign and six digits.
const EXPANDED: iso8601::EncodedConfig = iso8601::Config::DEFAULT
    .set_year_is_six_digits(true)
    .encode();

/// The instant as RFC 3339 text, or in the expanded form where RFC 3339 has none.
pub(crate) fn text(t: OffsetDateTime) -> Result<String, time::error::Format> {
    t.format(&Rfc3339)
        .or_else(|_| t.format(&Iso8601::<EXPANDED>))
}

/// An instant written by [`text`].
pub(crate) fn parse(s: &str) -> Result<OffsetDateTime, time::error::Parse> {
    OffsetDateTime::parse(s, &Rfc3339)
        .or_else(|e| OffsetDateTime::parse(s, &Iso8601::<EXPANDED>).map_err(|_| e))
}

pub(crate) fn serialize<S: Serializer>(t: &OffsetDateTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&text(*t).map_err(serde::ser::Error::custom)?)
}

/// A time as a `timestamp` or `timestamptz` column holds it: an instant (any year PostgreSQL
/// holds, 4713 BC to 294276 AD), or one of the infinities, which sort before and after every
/// instant as they do in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Timestamp {
    /// `'-infinity'`: earlier than every instant.
    MinusInfinity,
    At(OffsetDateTime),
    /// `'infinity'`: later than every instant.
    Infinity,
}

/// How PostgreSQL spells the infinities.
const INFINITY: &str = "infinity";
const MINUS_INFINITY: &str = "-infinity";

impl Timestamp {
    /// Seconds from `self` to `to` (positive when `to` is later): infinite when either is an
    /// infinity, NaN when both are the same infinity.
    pub(crate) fn secs_until(self, to: Timestamp) -> f64 {
        match (self, to) {
            (Timestamp::At(a), Timestamp::At(b)) => (b - a).as_seconds_f64(),
            (a, b) if a == b => f64::NAN,
            (Timestamp::Infinity, _) | (_, Timestamp::MinusInfinity) => f64::NEG_INFINITY,
            _ => f64::INFINITY,
        }
    }

    /// The time `micros` microseconds later (earlier when negative); an infinity stays itself,
    /// and an instant past the last one any type holds becomes the infinity on its side.
    pub(crate) fn plus_micros(self, micros: i64) -> Timestamp {
        match self {
            Timestamp::At(t) => t.checked_add(time::Duration::microseconds(micros)).map_or(
                if micros < 0 {
                    Timestamp::MinusInfinity
                } else {
                    Timestamp::Infinity
                },
                Timestamp::At,
            ),
            other => other,
        }
    }

    /// The first time after this one that a walk of times in order starts from: an instant one
    /// microsecond later (PostgreSQL's resolution), `'infinity'` itself. After `'-infinity'`
    /// comes a day past the first instant PostgreSQL holds (4714-11-24 BC): that instant in any
    /// zone's local time is still one the server holds, so a walk of a `timestamp without time
    /// zone` column read in a zone can start there.
    pub(crate) fn next_after(self) -> Timestamp {
        match self {
            Timestamp::MinusInfinity => {
                // -211813488000000000 µs from 2000-01-01: PostgreSQL's MIN_TIMESTAMP, plus a day.
                const FIRST_DAY_END_UNIX_SECS: i64 = -211_813_488_000 + 946_684_800 + 86_400;
                OffsetDateTime::from_unix_timestamp(FIRST_DAY_END_UNIX_SECS)
                    .map_or(Timestamp::MinusInfinity, Timestamp::At)
            }
            other => other.plus_micros(1),
        }
    }

    /// As JSON and plan files write it: RFC 3339 (or the expanded form, see [`text`]), or
    /// `infinity` / `-infinity`.
    pub(crate) fn text(self) -> Result<String, time::error::Format> {
        match self {
            Timestamp::At(t) => text(t),
            Timestamp::Infinity => Ok(INFINITY.to_owned()),
            Timestamp::MinusInfinity => Ok(MINUS_INFINITY.to_owned()),
        }
    }

    /// As people read it: in UTC to the second (RFC 3339, or the expanded form for a year
    /// outside 0000-9999), or `infinity` / `-infinity`.
    pub(crate) fn to_the_second(self) -> String {
        match self {
            Timestamp::At(t) => second_text(t),
            Timestamp::Infinity => INFINITY.to_owned(),
            Timestamp::MinusInfinity => MINUS_INFINITY.to_owned(),
        }
    }

    /// A time written by [`Timestamp::text`].
    pub(crate) fn parse(s: &str) -> Result<Timestamp, time::error::Parse> {
        match s {
            INFINITY => Ok(Timestamp::Infinity),
            MINUS_INFINITY => Ok(Timestamp::MinusInfinity),
            s => parse(s).map(Timestamp::At),
        }
    }
}

impl From<OffsetDateTime> for Timestamp {
    fn from(t: OffsetDateTime) -> Timestamp {
        Timestamp::At(t)
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text().map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// An instant in UTC to the second: RFC 3339, or the expanded form where RFC 3339 has none.
pub(crate) fn second_text(t: OffsetDateTime) -> String {
    const SECONDS: iso8601::EncodedConfig = iso8601::Config::DEFAULT
        .set_year_is_six_digits(true)
        .set_time_precision(iso8601::TimePrecision::Second {
            decimal_digits: None,
        })
        .encode();
    let t = t.to_offset(time::UtcOffset::UTC);
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&Rfc3339)
        .or_else(|_| t.format(&Iso8601::<SECONDS>))
        .unwrap_or_else(|_| t.to_string())
}

/// The same for an instant that may be absent (JSON null).
pub(crate) mod option {
    use serde::{Deserialize, Deserializer, Serializer};
    use time::OffsetDateTime;

    pub(crate) fn serialize<S: Serializer>(
        t: &Option<OffsetDateTime>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => super::serialize(t, s),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<OffsetDateTime>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|s| super::parse(&s).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::{Date, Month, Time};

    fn at(year: i32, nanos: u32) -> OffsetDateTime {
        let day = Date::from_calendar_date(year, Month::January, 1).unwrap();
        day.with_time(Time::from_hms_nano(1, 2, 3, nanos).unwrap())
            .assume_utc()
    }

    #[test]
    fn infinities_sort_around_every_instant_and_are_written_as_postgresql_spells_them() {
        let far = Timestamp::At(at(294_276, 0));
        let bc = Timestamp::At(at(-4712, 0));
        assert!(Timestamp::MinusInfinity < bc && bc < far && far < Timestamp::Infinity);
        assert_eq!(Timestamp::Infinity.text().unwrap(), "infinity");
        assert_eq!(Timestamp::MinusInfinity.to_the_second(), "-infinity");
        assert_eq!(far.to_the_second(), "+294276-01-01T01:02:03Z");
        assert_eq!(bc.to_the_second(), "-004712-01-01T01:02:03Z");
        assert_eq!(
            Timestamp::parse("-infinity").unwrap(),
            Timestamp::MinusInfinity
        );
        assert_eq!(Timestamp::parse(&far.text().unwrap()).unwrap(), far);
        assert_eq!(bc.secs_until(Timestamp::Infinity), f64::INFINITY);
        assert_eq!(Timestamp::Infinity.secs_until(far), f64::NEG_INFINITY);
        assert!(Timestamp::Infinity.secs_until(Timestamp::Infinity).is_nan());
        assert!(bc.secs_until(far) > 9.0e12);
        assert_eq!(Timestamp::Infinity.plus_micros(-1), Timestamp::Infinity);
        // 4714-11-24 BC is the first day PostgreSQL holds; a walk after '-infinity' starts a day on.
        assert_eq!(
            Timestamp::MinusInfinity.next_after().to_the_second(),
            "-004713-11-25T00:00:00Z"
        );
    }

    #[test]
    fn an_instant_rfc_3339_cannot_write_is_written_expanded_and_read_back() {
        let usual = at(2026, 500_000_000);
        assert_eq!(text(usual).unwrap(), "2026-01-01T01:02:03.5Z");
        assert_eq!(parse("2026-01-01T01:02:03.5Z").unwrap(), usual);
        let bc = at(-99, 0);
        let written = text(bc).unwrap();
        assert_eq!(written, "-000099-01-01T01:02:03.000000000Z");
        assert_eq!(parse(&written).unwrap(), bc);
    }
}
