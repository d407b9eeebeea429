-- The database clock (the transaction's start), read inside a snapshot so that ages computed
-- against it agree with the rows read in the same snapshot.
SELECT now() AS now
