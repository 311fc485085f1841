-- Queries the worker runs to find out what happened when the database did
-- not answer: a lost connection leaves a write's outcome unknown.

-- name: settled_by_lease
-- After a COMMIT whose reply never arrived (the connection broke in
-- between), did it land? A row still holding the attempt's lease token tells:
-- 'completed' (or 'cancelled') means it did; 'active' means it did not, and
-- the attempt is still this worker's to settle. No row: another token has
-- replaced it, so the lease was lost meanwhile.
SELECT j.id, j.status::text AS status
FROM {schema}.job AS j
JOIN jsonb_to_recordset(%(jobs)s::jsonb) AS d (id uuid, lease_token bigint)
    ON j.id = d.id AND j.lease_token = d.lease_token;
