//! A [`Timestamp`] as the server sends and takes it: a `timestamptz` in its binary form,
//! microseconds since 2000-01-01 UTC, where the largest and smallest values are `'infinity'` and
//! `'-infinity'`. The driver's own conversion takes those for years past the last it can hold and
//! fails on them (and on a year past 9999), so every time a key table holds is read as this.

use crate::report::timestamp::Timestamp;
use bytes::BytesMut;
use std::error::Error;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

/// 2000-01-01 00:00:00 UTC in microseconds since the Unix epoch.
const POSTGRES_EPOCH_MICROS: i128 = 946_684_800_000_000;

type Failure = Box<dyn Error + Sync + Send>;

impl<'a> FromSql<'a> for Timestamp {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Timestamp, Failure> {
        Ok(match i64::from_sql(&Type::INT8, raw)? {
            i64::MAX => Timestamp::Infinity,
            i64::MIN => Timestamp::MinusInfinity,
            micros => {
                let unix = (i128::from(micros) + POSTGRES_EPOCH_MICROS) * 1000;
                Timestamp::At(time::OffsetDateTime::from_unix_timestamp_nanos(unix)?)
            }
        })
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ
    }
}

impl ToSql for Timestamp {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Failure> {
        let micros = match self {
            Timestamp::Infinity => i64::MAX,
            Timestamp::MinusInfinity => i64::MIN,
            Timestamp::At(t) => {
                i64::try_from(t.unix_timestamp_nanos().div_euclid(1000) - POSTGRES_EPOCH_MICROS)?
            }
        };
        micros.to_sql(&Type::INT8, out)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::TIMESTAMPTZ
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(t: Timestamp) -> (Timestamp, Vec<u8>) {
        let mut out = BytesMut::new();
        t.to_sql(&Type::TIMESTAMPTZ, &mut out).unwrap();
        let back = Timestamp::from_sql(&Type::TIMESTAMPTZ, &out).unwrap();
        (back, out.to_vec())
    }

    #[test]
    fn the_infinities_and_the_farthest_years_are_read_and_sent_as_postgresql_holds_them() {
        let (back, raw) = round_trip(Timestamp::Infinity);
        assert_eq!(
            (back, raw),
            (Timestamp::Infinity, i64::MAX.to_be_bytes().to_vec())
        );
        let (back, raw) = round_trip(Timestamp::MinusInfinity);
        assert_eq!(
            (back, raw),
            (Timestamp::MinusInfinity, i64::MIN.to_be_bytes().to_vec())
        );
        // The last microsecond of 294276 AD, and the first of 4713 BC, as the server sends them.
        for micros in [9_223_371_331_199_999_999_i64, -211_813_488_000_000_000] {
            let t = Timestamp::from_sql(&Type::TIMESTAMPTZ, &micros.to_be_bytes()).unwrap();
            assert_eq!(round_trip(t), (t, micros.to_be_bytes().to_vec()));
        }
        let t = Timestamp::from_sql(&Type::TIMESTAMPTZ, &0_i64.to_be_bytes()).unwrap();
        assert_eq!(t.to_the_second(), "2000-01-01T00:00:00Z");
    }
}
