//! Instants in the JSON of reports and plan files: RFC 3339, as every reader expects. RFC 3339
//! cannot write a year outside 0000-9999 (a row whose clock column holds a date BC, say), so such
//! an instant is written in ISO 8601's expanded form instead (a sign and six year digits,
//! `-000099-01-01T00:00:00.000000000Z`) and read back the same way: one odd row never fails a
//! report or a plan.

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
