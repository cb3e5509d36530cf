"""JetStream clustering over NRG: what nats-server's JetStream cluster layer
puts inside Raft entries (:mod:`.entries`)."""
