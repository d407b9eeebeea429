-- evict's round trip to the server: a statement that does no work, timed before the batches so
-- the pace and the batch deadline know what the network adds.
SELECT 1
