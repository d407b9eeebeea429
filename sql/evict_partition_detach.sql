-- evict --drop-partitions: take the partition out of the key table. Plain DETACH, in a transaction,
-- under a lock_timeout of a few milliseconds: it needs ACCESS EXCLUSIVE on the key table, the
-- partition and the default partition, and gives up instead of queueing live requests behind it.
-- {table} = the key table, {partition} = the partition.
ALTER TABLE {table} DETACH PARTITION {partition}
