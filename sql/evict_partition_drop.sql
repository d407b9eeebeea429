-- evict --drop-partitions: drop the partition detached and probed in the same transaction.
-- No CASCADE: a view or foreign key that depends on it makes the drop fail and the transaction roll
-- back, leaving the partition attached. {partition} = the partition.
DROP TABLE {partition}
