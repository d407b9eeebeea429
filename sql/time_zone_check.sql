-- The zone a table's `timestamp without time zone` columns are declared to be written in: fails
-- with invalid_parameter_value when the server does not know it. $1 = zone name. Reads no table.
SELECT now() AT TIME ZONE $1::text AS local_now
