"""JetStream clustering: the meta group, stream and consumer groups, as
nats-server runs them.

* :mod:`.entries`: what nats-server's JetStream puts inside Raft entries
  (assignments, stream messages, consumer updates, snapshots);
* :mod:`.meta`: the meta group's state, built from those entries;
* :mod:`.metagroup`: this server's member of the meta group;
* :mod:`.peers`: what the cluster's servers say of themselves (statsz, route
  INFO);
* :mod:`.placement`: where a stream's replicas go.
"""
