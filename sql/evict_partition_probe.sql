-- evict --drop-partitions: may this partition go whole? Run on the partition just detached, inside the
-- transaction that detached it, so no session can add or change a row of it until the decision
-- commits or rolls back. {partition} = the partition.
--
-- Two index probes, nothing scanned: whether any in_progress key is left (through the partition's copy
-- of the optional in_progress index; such a key may still belong to a live request), and the latest
-- expires_at (through its copy of the expiry index; all rows expired when it is in the past).
SELECT EXISTS (SELECT 1 FROM {partition} WHERE {in_flight}) AS holds_in_progress,
       (SELECT {expiry} FROM {partition} ORDER BY {expiry} DESC LIMIT 1) AS newest_expiry,
       now() AS db_now
