"""JetStream for natsbroker: streams, consumers and the ``$JS.API`` request API."""
