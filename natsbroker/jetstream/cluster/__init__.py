"""JetStream clustering: the meta group, stream and consumer groups, as nats-server runs them."""
