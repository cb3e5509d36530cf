"""JetStream clustering's Raft, as nats-server's NRG: the wire (``wire``) first."""
