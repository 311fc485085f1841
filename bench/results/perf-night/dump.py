import json, sys, uuid
from portqueue.queries import queries_for
q = queries_for("portqueue")
query = q("claim", queues=["gp"], slots=[int(sys.argv[2])], lease_seconds=[60], matching_patterns=[],
          refused_patterns=[], worker_id=str(uuid.uuid4()), holding=[])
json.dump({"sql": query.sql, "params": dict(query.params)}, open(sys.argv[1], "w"), default=str)
