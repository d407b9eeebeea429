//! Connecting the way libpq and psql do: conninfo and URI strings, PG* variables, ~/.pgpass, sslmode.
