-- Which cluster and database this session is connected to: the cluster's system identifier (set
-- by initdb, shared by its physical replicas) and the database name. Recorded in a reclaim plan so
-- that --apply refuses another database. Readable by any role; reads the control file only.
SELECT system_identifier::text AS system_identifier, current_database()::text AS name
  FROM pg_catalog.pg_control_system()
