-- Citus, in the transaction of a batch on a table Citus plans on the coordinator (a reference or
-- Citus local table): plan the batch's statement with its parameters' values. Citus cannot plan a
-- statement that locks rows in a WITH and then changes them without the values ("could not create
-- distributed plan"), which is what a generic plan asks of it. Local to the transaction.
SET LOCAL plan_cache_mode = force_custom_plan
