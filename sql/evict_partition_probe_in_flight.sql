-- evict --drop-partitions on a table without an index on its expiry column, where a partition's
-- upper bound already proves every key in it expired (the table is partitioned on its expiry, or
-- on the creation time keys expire a TTL after: idemctl compares the bound, plus that TTL, with
-- db_now). Run on the partition just detached, inside the transaction that detached it, so no
-- session can add or change a row of it until the decision commits or rolls back. {partition} =
-- the partition.
--
-- One index probe, nothing scanned: whether any in_progress key is left (through the partition's
-- copy of the optional in_progress index; such a key may still belong to a live request).
SELECT EXISTS (SELECT 1 FROM {partition} WHERE {in_flight}) AS holds_in_progress,
       now() AS db_now
